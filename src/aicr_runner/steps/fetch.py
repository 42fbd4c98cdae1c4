"""The fetch step's work: the aicr binary the run uses, checked before it is trusted.

A preinstalled binary (checked against its sha256 when one is given) or the
pinned release, downloaded and verified within its download budget; then its
Sigstore provenance, verified before aicr runs at all (``--version`` included)
and recorded in the run report whatever the outcome; then its version, asked
once (``aicr --version``) and recorded, so the run knows what it can do.
Before the step, the run's start line asks a preinstalled binary whose
provenance is not checked for its version (``aicr.start_version``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from aicr_runner import logs
from aicr_runner.aicr import capabilities
from aicr_runner.aicr.provenance import CosignVerifier, ProvenanceCheck, check_provenance
from aicr_runner.children.process import child_env
from aicr_runner.errors import DownloadError, RunnerError, ToolError
from aicr_runner.net import deadline
from aicr_runner.run.machine import State, StepResult
from aicr_runner.settings.config import ENV_PREFIX
from aicr_runner.steps.context import RunContext

if TYPE_CHECKING:
    from aicr_runner.aicr.binary import AicrBinary

__all__ = [
    "detect_version",
    "help_text",
    "known_values",
    "obtain",
    "offering_local",
    "probe_help",
    "verify_provenance",
]

log = logs.get_logger()


def obtain(ctx: RunContext) -> tuple[AicrBinary, str, bool]:
    """The aicr binary, how the step names it, and whether it was preinstalled."""
    aicr = ctx.settings.aicr
    override = ctx.config.aicr_binary or (Path(aicr.binary) if aicr.binary else None)
    if override is not None:
        from aicr_runner.aicr.binary import use_preinstalled

        # Children run in the work directory: a relative path would point elsewhere there.
        binary = use_preinstalled(override.absolute(), aicr.binary_sha256)
        return binary, f"preinstalled {binary.path}", True
    binary = _download(ctx, ctx.work / "aicr-release", aicr.download_budget_seconds)
    return binary, f"{binary.source_url} (sha256 {binary.tarball_sha256})", False


def _download(ctx: RunContext, dest: Path, budget: float) -> AicrBinary:
    """The release from its registry artifact (``aicr.release_ref``) or its HTTP folder,
    within the one download budget."""
    aicr, externals = ctx.settings.aicr, ctx.externals
    source = f"registry artifact {aicr.release_ref}" if aicr.release_ref else aicr.release_base_url

    def fetch(cancelled: deadline.Cancellation) -> AicrBinary:
        if aicr.release_ref:
            return externals.fetch_from_registry(aicr, ctx.settings.pack, dest, cancelled=cancelled)
        return externals.fetch(aicr, dest, cancelled=cancelled)

    return deadline.bounded(
        fetch,
        budget_seconds=budget,
        interrupted=externals.interrupted,
        what="the aicr download",
        over_budget=lambda: DownloadError(
            f"the aicr download from {source} did not finish within the {budget:g}s "
            f"download budget ({ENV_PREFIX}AICR__DOWNLOAD_BUDGET_SECONDS); the server is slow or "
            f"stalled: use a mirror ({ENV_PREFIX}AICR__RELEASE_REF or {ENV_PREFIX}AICR__RELEASE_BASE_URL) or a "
            "preinstalled aicr (--aicr-binary / aicr.binary.path)",
            offers_local=True,
        ),
    )


def offering_local(fetch: Callable[[], StepResult]) -> StepResult:
    """A plan's fetch step: a failed download also says how to plan without one."""
    try:
        return fetch()
    except DownloadError as exc:
        if exc.offers_local:
            raise
        raise DownloadError(
            f"{exc.message}; to plan without downloading, give a local aicr (--aicr-binary PATH) or a "
            f"mirror of the releases ({ENV_PREFIX}AICR__RELEASE_BASE_URL)",
            offers_local=True,
        ) from exc


def verify_provenance(ctx: RunContext, binary: AicrBinary) -> ProvenanceCheck:
    """aicr's Sigstore provenance, recorded in the run report whatever the outcome."""
    aicr = ctx.settings.aicr
    verifier = ctx.externals.verifier or CosignVerifier(ctx.externals.processes, ctx.config.environ)
    try:
        provenance = check_provenance(binary.path, binary.attestation_path, aicr, verifier, ctx.work)
    except RunnerError as exc:
        ctx.report.provenance = {"mode": aicr.provenance.mode.value, "status": "failed", "reason": exc.message}
        raise
    ctx.report.provenance = provenance.to_dict()
    return provenance


def detect_version(ctx: RunContext, binary: Path, *, preinstalled: bool) -> capabilities.AicrVersion:
    """What the binary says it is, recorded; one that names no release version is
    probed (its ``--help``), never taken for the pin; a downloaded one that is not
    its tag is warned about."""
    pinned = ctx.settings.aicr.version
    printed = _version_lines(ctx, binary, preinstalled=preinstalled)
    version = capabilities.AicrVersion.parse("\n".join(printed))
    if version is None:
        version = capabilities.AicrVersion.detected(logs.redact(" ".join(printed)), probe_help(ctx, binary))
        log.warning(
            "aicr names no release version (a build without release version data?); "
            "its capabilities were detected from the flags its --help lists",
            reported=version.line,
            behaves_as=f"aicr >= v{'.'.join(map(str, version.numbers))}",
        )
    ctx.findings.aicr_version = version
    ctx.report.aicr_version = version.text
    log.info("aicr version detected", aicr=version.text, reported=version.line)
    if not preinstalled and not version.detected_from_flags and version.text != pinned:
        log.warning(
            "the downloaded aicr reports another version than its release tag",
            tag=pinned,
            aicr=version.text,
        )
    return version


def probe_help(ctx: RunContext, binary: Path) -> capabilities.HelpProbe:
    """``aicr --help`` and each probed subcommand's ``--help`` (kept in the work
    directory's logs, not relayed: they are long and say nothing about the run)."""
    texts = {sub: help_text(ctx, [str(binary), sub, "--help"]) for sub in capabilities.HelpProbe.SUBCOMMANDS}
    return capabilities.HelpProbe.read(help_text(ctx, [str(binary), "--help"]), texts)


def help_text(ctx: RunContext, argv: list[str]) -> str:
    """What a ``--help`` call printed (stdout and stderr)."""
    lines: list[str] = []
    name = "-".join(["help", *argv[1:-1]])
    ctx.externals.processes.run(
        argv,
        env=child_env(ctx.config.environ),
        cwd=ctx.work,
        log_path=ctx.work / "logs" / f"{name}.log",
        on_line=lines.append,
    )
    return "\n".join(lines)


def known_values(ctx: RunContext, binary: Path) -> Mapping[str, tuple[str, ...]]:
    """The criteria values the running aicr accepts, as its ``recipe --help`` lists them."""
    version = ctx.findings.aicr_version
    if version is not None and version.probe is not None:
        return version.probe.values
    return capabilities.listed_values(help_text(ctx, [str(binary), "recipe", "--help"]))


def _version_lines(ctx: RunContext, binary: Path, *, preinstalled: bool) -> list[str]:
    """What ``aicr --version`` prints; a preinstalled binary was asked for the start line already."""
    if preinstalled and ctx.config.version_output is not None:
        return list(ctx.config.version_output)
    printed: list[str] = []
    result = ctx.run_child(State.FETCH, [str(binary), "--version"], on_line=printed.append)
    if result.exit_code != 0:
        raise ToolError(f"{binary} --version exited {result.exit_code}")
    return printed
