"""One method per state of the run; ``Steps.<state name>`` is that state's code.

Each step returns a ``StepResult`` and never raises: a ``RunnerError`` becomes a
failed result with its exit code, anything else an internal error whose traceback
goes to the work directory (never to the pod log as a wall of text).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aicr_runner import capabilities, classify, commands, deadline, logs, recipe
from aicr_runner.classify import Outcome
from aicr_runner.config import ENV_PREFIX, RunnerSettings
from aicr_runner.errors import (
    AicrContractError,
    CaptureError,
    DownloadError,
    ExitCode,
    InterruptedRun,
    PackError,
    RunnerError,
    ToolError,
)
from aicr_runner.helmguard import HelmGuard
from aicr_runner.lease import InstallLease
from aicr_runner.machine import State, StepResult
from aicr_runner.process import ProcessResult, ProcessRunner, child_env
from aicr_runner.provenance import CosignVerifier, SignatureVerifier, check_provenance
from aicr_runner.report import RunReport, StepStatus, utcnow
from aicr_runner.sink import CONFIGMAP_BUDGET_BYTES, Sink, payload_size

if TYPE_CHECKING:
    from aicr_runner.binary import AicrBinary
    from aicr_runner.pack import PulledPack

__all__ = ["Mode", "RunContext", "Steps"]

#: Lines of a failing command kept to explain the failure (never the whole output).
_TAIL_LINES = 60
#: aicr records at these levels are logged as events of that level, not relayed as text.
_AICR_LEVELS = {"ERROR": "error", "WARN": "warning", "WARNING": "warning"}


def pull_pack(*args: Any, **kwargs: Any) -> PulledPack:
    """``pack.pull_pack``, imported when a pack is pulled: oras and requests are
    heavy, and a run with a local pack or none never needs them."""
    from aicr_runner.pack import pull_pack as pull

    return pull(*args, **kwargs)


def fetch_aicr(*args: Any, **kwargs: Any) -> AicrBinary:
    """``release.fetch_aicr``, imported when aicr is downloaded (httpx is heavy)."""
    from aicr_runner.release import fetch_aicr as fetch

    return fetch(*args, **kwargs)


class Mode(StrEnum):
    RUN = "run"
    PLAN = "plan"


@dataclass
class RunContext:
    settings: RunnerSettings
    mode: Mode
    sink: Sink
    processes: ProcessRunner
    environ: Mapping[str, str]
    report: RunReport
    aicr_binary: Path | None = None
    pack_dir: Path | None = None
    pull: Callable[..., PulledPack] = pull_pack
    fetch: Callable[..., AicrBinary] = fetch_aicr
    #: What a preinstalled aicr printed for --version before the start line (not asked twice).
    version_output: list[str] | None = None
    #: True once SIGTERM/SIGINT arrived: network steps stop at once.
    interrupted: Callable[[], bool] = lambda: False
    #: Verifies aicr's Sigstore provenance; None: cosign through ``processes``.
    verifier: SignatureVerifier | None = None
    #: The install Lease (None: runs are not serialised, e.g. outside a cluster).
    lease: InstallLease | None = None
    #: Writes the run report now (the status ConfigMap), e.g. while waiting.
    progress: Callable[[], None] = lambda: None
    #: Called by the renewal thread when the Lease is lost (the run must stop).
    on_lease_lost: Callable[[str], None] = lambda reason: None
    # Filled in as the run goes.
    aicr: Path | None = None
    pack: Path | None = None
    recipe_summary: recipe.RecipeSummary | None = None
    completion_line: str = ""
    #: What the binary said it is (``aicr --version``), once fetched.
    aicr_version: capabilities.AicrVersion | None = None

    @property
    def behaviour(self) -> capabilities.Behaviour:
        """How the running aicr talks; the pinned version's until the fetch told."""
        if self.aicr_version is not None:
            return capabilities.behaviour_of(self.aicr_version.numbers)
        pinned = capabilities.AicrVersion.parse(f"aicr version {self.settings.aicr.version}")
        return capabilities.behaviour_of(pinned.numbers if pinned else (0, 0, 0))

    @property
    def work(self) -> Path:
        return self.settings.work_path

    @property
    def recipe_path(self) -> Path:
        return self.work / "recipe.yaml"

    @property
    def bundle_dir(self) -> Path:
        return self.work / "bundle"

    @property
    def ctrf_path(self) -> Path:
        return self.work / "ctrf.json"

    @property
    def evidence_dir(self) -> Path:
        return self.work / "evidence"

    def log_path(self, state: State) -> Path:
        path = self.work / "logs" / f"{state.value}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


class Steps:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.s = ctx.settings
        self.log = logs.get_logger()

    def functions(self) -> dict[State, Callable[[], StepResult]]:
        """Every state's step, found by the state's name."""
        table: dict[State, Callable[[], StepResult]] = {}
        for state in State:
            if state is not State.DONE:
                method = getattr(self, state.name.lower())
                table[state] = self._guarded(state, method)
        return table

    def _guarded(self, state: State, method: Callable[[], StepResult]) -> Callable[[], StepResult]:
        def run() -> StepResult:
            log = self.log.bind(step=state.value)
            log.info("step started")
            try:
                result = method()
            except InterruptedRun as exc:
                result = StepResult(StepStatus.INTERRUPTED, int(exc.exit_code), exc.message)
            except RunnerError as exc:
                result = StepResult.failed(int(exc.exit_code), exc.message)
            except Exception as exc:  # noqa: BLE001 - the run must end with a report, not a traceback
                details = self.ctx.work / "logs" / "traceback.txt"
                details.parent.mkdir(parents=True, exist_ok=True)
                details.write_text(logs.redact(traceback.format_exc()))
                result = StepResult.failed(
                    ExitCode.INTERNAL,
                    f"internal error in {state}: {type(exc).__name__}: {logs.redact(str(exc))} "
                    f"(traceback in {details})",
                )
            record = self.ctx.report.step(state.value)
            started = record.started_at
            log.info(
                "step ended",
                outcome=result.status.value,
                exit_code=result.exit_code,
                reason=result.reason,
                duration_s=None if started is None else round(_elapsed(started), 3),
            )
            return result

        return run

    # -- helpers -----------------------------------------------------------------

    def _relay(
        self, state: State, tail: deque[str] | None, on_line: Callable[[str], None] | None
    ) -> Callable[[str], None]:
        """The pod-log relay for an aicr call: its output is small, so each line
        is looked at (JSON records re-rendered, errors and warnings logged as
        such, the tail kept); plain lines go straight to the pod log."""
        step = state.value
        log = self.log.bind(step=step)

        def on_block(text: str) -> None:
            plain: list[str] = []
            for line in text[:-1].split("\n"):
                if tail is not None:
                    tail.append(line)
                if on_line is not None:
                    on_line(line)
                shown = logs.format_relayed_line(line)
                level = _AICR_LEVELS.get(shown.split(" ", 1)[0])
                if level is None:
                    plain.append(shown)
                    continue
                if plain:
                    logs.relay("\n".join(plain), step=step, source="aicr")
                    plain.clear()
                getattr(log, level)(shown, source="aicr")
            if plain:
                logs.relay("\n".join(plain), step=step, source="aicr")

        return on_block

    def _deploy_relay(self, markers: classify.DeployMarkers) -> Callable[[str], None]:
        """The pod-log relay for deploy.sh, which may print gigabytes: blocks go
        straight to the pod log; only the lines that mean something (progress
        and failure markers, errors) become structured events."""
        step = State.DEPLOY.value
        log = self.log.bind(step=step)

        def on_block(text: str) -> None:
            written = 0
            for start, end, level in markers.scan(text):
                logs.relay(text[written:start], step=step, source="deploy.sh")
                getattr(log, level)(text[start:end], source="deploy.sh")
                written = end + 1
            logs.relay(text[written:], step=step, source="deploy.sh")

        return on_block

    def _aicr(
        self,
        state: State,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        tail: deque[str] | None = None,
        on_line: Callable[[str], None] | None = None,
        on_block: Callable[[str], None] | None = None,
        cwd: Path | None = None,
        safe_stop: HelmGuard | None = None,
    ) -> ProcessResult:
        relay = on_block or self._relay(state, tail, on_line)
        child = env if env is not None else child_env(self.ctx.environ)
        log_path = self.ctx.log_path(state)
        run = self.ctx.processes.run
        result = (
            run(argv, env=child, cwd=cwd or self.ctx.work, log_path=log_path, on_block=relay, safe_stop=safe_stop)
            if safe_stop is not None
            else run(argv, env=child, cwd=cwd or self.ctx.work, log_path=log_path, on_block=relay)
        )
        if result.safe_point:
            raise InterruptedRun(
                f"interrupted: a shutdown was requested; {state} was stopped between two helm operations "
                f"(none was cut, exit {result.exit_code}); the next run of this release takes over"
            )
        if result.stopped:
            # The runner stopped the child after the grace period; a child that
            # finished within it keeps its outcome and the machine stops the run.
            hint = "; check `helm list -A --pending`, then re-run" if state is State.DEPLOY else ""
            raise InterruptedRun(
                f"interrupted: {state} did not finish within the {self.s.shutdown_grace_seconds:.0f}s grace "
                f"period and was stopped (exit {result.exit_code}){hint}"
            )
        return result

    def _deploying(self) -> bool:
        return self.ctx.mode is Mode.PLAN or self.s.deploy.enabled

    def _validate_exit(self) -> int | None:
        """validate's exit code once it ran (or was stopped); None when it did not run."""
        record = self.ctx.report.step(State.VALIDATE.value)
        if record.status in (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED):
            return None
        return record.exit_code

    @property
    def _binary(self) -> Path:
        if self.ctx.aicr is None:
            raise RunnerError("aicr is not available (the fetch step did not succeed)")
        return self.ctx.aicr

    # -- steps -------------------------------------------------------------------

    def fetch(self) -> StepResult:
        aicr = self.s.aicr
        override = self.ctx.aicr_binary or (Path(aicr.binary) if aicr.binary else None)
        if override is not None:
            # Children run in the work directory: a relative path would point elsewhere there.
            from aicr_runner.binary import use_preinstalled

            binary = use_preinstalled(override.absolute(), aicr.binary_sha256)
            how = f"preinstalled {binary.path}"
        else:
            dest = self.ctx.work / "aicr-release"
            budget = aicr.download_budget_seconds
            try:
                binary = self._download(dest, budget)
            except DownloadError as exc:
                if self.ctx.mode is Mode.PLAN and "--aicr-binary" not in exc.message:
                    exc.message += (
                        f"; to plan without downloading, give a local aicr (--aicr-binary PATH) or a "
                        f"mirror of the releases ({ENV_PREFIX}AICR__RELEASE_BASE_URL)"
                    )
                raise
            how = f"{binary.source_url} (sha256 {binary.tarball_sha256})"
        # Provenance is verified before aicr runs at all, --version included.
        verifier = self.ctx.verifier or CosignVerifier(self.ctx.processes, self.ctx.environ)
        try:
            provenance = check_provenance(binary.path, binary.attestation_path, aicr, verifier, self.ctx.work)
        except RunnerError as exc:
            self.ctx.report.provenance = {"mode": aicr.provenance.mode.value, "status": "failed", "reason": exc.message}
            raise
        self.ctx.report.provenance = provenance.to_dict()
        self.ctx.aicr = binary.path
        printed = self._version_lines(binary.path, preinstalled=override is not None)
        version = capabilities.AicrVersion.parse("\n".join(printed))
        if version is None:
            version = capabilities.AicrVersion.assume(aicr.version, logs.redact(" ".join(printed)))
            self.log.warning(
                "aicr names no release version (a build without release version data?); "
                "its capabilities are assumed to be the pinned version's",
                step=State.FETCH.value,
                pinned=aicr.version,
                reported=version.line,
            )
        self.ctx.aicr_version = version
        self.ctx.report.aicr_version = version.text
        self.log.info("aicr version detected", step=State.FETCH.value, aicr=version.text, reported=version.line)
        if override is None and not version.assumed and version.text != aicr.version:
            self.log.warning(
                "the downloaded aicr reports another version than its release tag",
                step=State.FETCH.value,
                tag=aicr.version,
                aicr=version.text,
            )
        refused = capabilities.unsupported(self.s, version)
        if refused:
            return StepResult.failed(ExitCode.BAD_INPUT, "; ".join(refused), classification="aicr-version-unsupported")
        if provenance.warning:
            return StepResult.warned(
                f"aicr {version.text} from {how}; {provenance.warning}", classification="provenance-unverified"
            )
        if provenance.verified is None:
            return StepResult.ok(f"aicr {version.text} from {how}; provenance not checked (mode off)")
        return StepResult.ok(f"aicr {version.text} from {how}; {provenance.verified.summary()}")

    def _version_lines(self, binary: Path, *, preinstalled: bool) -> list[str]:
        """What ``aicr --version`` prints; a preinstalled binary was asked for the start line already."""
        if preinstalled and self.ctx.version_output is not None:
            return list(self.ctx.version_output)
        printed: list[str] = []
        result = self._aicr(State.FETCH, [str(binary), "--version"], on_line=printed.append)
        if result.exit_code != 0:
            raise ToolError(f"{binary} --version exited {result.exit_code}")
        return printed

    def _download(self, dest: Path, budget: float) -> AicrBinary:
        aicr = self.s.aicr
        return deadline.bounded(
            lambda cancelled: self.ctx.fetch(aicr, dest, cancelled=cancelled),
            budget_seconds=budget,
            interrupted=self.ctx.interrupted,
            what="the aicr download",
            over_budget=lambda: DownloadError(
                f"the aicr download from {aicr.release_base_url} did not finish within the {budget:g}s "
                f"download budget ({ENV_PREFIX}AICR__DOWNLOAD_BUDGET_SECONDS); the server is slow or "
                f"stalled: use a mirror ({ENV_PREFIX}AICR__RELEASE_BASE_URL) or a preinstalled aicr "
                "(--aicr-binary / aicrBinary.path)"
            ),
        )

    def pack(self) -> StepResult:
        if self.ctx.pack_dir is not None:
            if not (self.ctx.pack_dir / "registry.yaml").is_file():
                return StepResult.failed(
                    ExitCode.PACK_VERIFICATION_FAILED,
                    f"pack directory {self.ctx.pack_dir} has no registry.yaml; aicr requires it even as a stub",
                )
            self.ctx.pack = self.ctx.pack_dir
            return StepResult.ok(f"local pack {self.ctx.pack_dir}")
        if not self.s.pack.ref:
            return StepResult.skipped("no data pack")
        target = self.ctx.work / "pack"
        shutil.rmtree(target, ignore_errors=True)
        budget = self.s.pack.pull_budget_seconds
        pulled = deadline.bounded(
            lambda cancelled: self.ctx.pull(self.s.pack, target, cancelled=cancelled),
            budget_seconds=budget,
            interrupted=self.ctx.interrupted,
            what="the data pack pull",
            over_budget=lambda: PackError(
                f"the data pack pull of {self.s.pack.ref} did not finish within the {budget:g}s pull budget "
                f"({ENV_PREFIX}PACK__PULL_BUDGET_SECONDS); the registry is slow or stalled"
            ),
        )
        self.ctx.pack = pulled.path
        return StepResult.ok(f"pulled {pulled.ref} ({pulled.manifest_digest}, {len(pulled.layers)} layers)")

    def recipe(self) -> StepResult:
        self.ctx.recipe_path.unlink(missing_ok=True)
        tail: deque[str] = deque(maxlen=_TAIL_LINES)

        def watch(line: str) -> None:
            if self.ctx.behaviour.completion_message in line:
                self.ctx.completion_line = logs.format_relayed_line(line)

        argv = commands.recipe_argv(self.s, self._binary, self.ctx.pack, self.ctx.recipe_path)
        result = self._aicr(State.RECIPE, argv, tail=tail, on_line=watch)
        if result.exit_code != 0:
            message, supported = recipe.parse_rejection(list(tail))
            if supported:
                self.ctx.report.supported_combinations = supported
                rejected = recipe.with_supported(message, supported)
                self.log.error(f"CRITERIA REJECTED: {rejected}", step=State.RECIPE.value)
            return StepResult.failed(
                result.exit_code,
                f"aicr recipe failed (exit {result.exit_code}): {message}",
                classification="criteria-rejected" if supported else "recipe-failed",
            )
        if not self.ctx.recipe_path.is_file():
            raise AicrContractError(
                f"aicr broke its contract: aicr recipe exited 0 but wrote no {self.ctx.recipe_path.name} "
                f"(--output {self.ctx.recipe_path})"
            )
        summary = recipe.load_recipe(self.ctx.recipe_path)
        self.ctx.recipe_summary = summary
        self.ctx.report.components = [c.as_row() for c in summary.components]
        return StepResult.ok(
            f"{len(summary.components)} components, overlays: {', '.join(summary.applied_overlays) or '-'}"
        )

    def capture_recipe(self) -> StepResult:
        name = self.s.recipe.configmap
        if not name:
            return StepResult.skipped("recipe capture is off (the recipe ConfigMap name is empty)")
        if self.ctx.recipe_summary is None:
            return StepResult.skipped("no recipe was resolved")
        summary = {"summary.txt": self._recipe_summary_text()}
        raw = self.ctx.recipe_path.read_bytes() if self.ctx.recipe_path.is_file() else b""
        fitted = _fit("recipe.yaml", raw, CONFIGMAP_BUDGET_BYTES - payload_size(summary))
        data, binary = fitted or ({}, {})
        try:
            self.ctx.sink.put(name, data={**summary, **data}, binary_data=binary or None)
        except CaptureError as exc:
            # Advisory, as in the anchor: this runs before anything is deployed.
            return StepResult.warned(f"recipe capture failed: {exc}")
        where = self.ctx.sink.describe(name)
        if fitted is None:
            return StepResult.warned(
                f"recipe written to {where} (recipe.yaml is {len(raw)} bytes, over budget even compressed: "
                "summary only)"
            )
        note = f" (recipe.yaml is {len(raw)} bytes: stored gzip-compressed as recipe.yaml.gz)" if binary else ""
        return StepResult.ok(f"recipe written to {where}{note}")

    def check_recipe(self) -> StepResult:
        summary = self.ctx.recipe_summary
        if summary is None:
            return StepResult.skipped("no recipe")
        expect = self.s.recipe.expect
        if expect.any_set:
            problems = recipe.check_expectations(summary, expect)
            if problems:
                return StepResult.failed(
                    ExitCode.EXPECTATIONS_NOT_MET,
                    "recipe falls short of recipe.expect: " + "; ".join(problems),
                    classification="expectations-not-met",
                )
            return StepResult.ok("recipe meets recipe.expect")
        warnings = recipe.thin_resolution_warnings(summary, self.s.criteria)
        if warnings:
            return StepResult.warned("; ".join(warnings), classification="thin-resolution")
        return StepResult.ok("no expectations set; resolution is a full leaf")

    def bundle(self) -> StepResult:
        if not self._deploying():
            return StepResult.skipped("Skipping deploy (deploy.enabled=false): assert-only run")
        # aicr 1.x verify is closed-world: always bundle into a fresh, empty directory.
        shutil.rmtree(self.ctx.bundle_dir, ignore_errors=True)
        argv = commands.bundle_argv(self.s, self._binary, self.ctx.recipe_path, self.ctx.bundle_dir, self.ctx.pack)
        result = self._aicr(State.BUNDLE, argv)
        if result.exit_code != 0:
            return StepResult.failed(result.exit_code, f"aicr bundle failed (exit {result.exit_code})")
        if not (self.ctx.bundle_dir / "deploy.sh").is_file():
            raise AicrContractError(
                f"aicr broke its contract: aicr bundle exited 0 but wrote no deploy.sh into {self.ctx.bundle_dir}"
            )
        files = sum(1 for p in self.ctx.bundle_dir.rglob("*") if p.is_file())
        return StepResult.ok(f"bundle rendered: {files} files in {self.ctx.bundle_dir}")

    def verify(self) -> StepResult:
        if not self._deploying():
            return StepResult.skipped("assert-only run: no bundle")
        result = self._aicr(State.VERIFY, commands.verify_argv(self.s, self._binary, self.ctx.bundle_dir))
        verdict = classify.classify_verify(result.exit_code, passed=self.ctx.behaviour.verify_checks)
        if verdict.outcome is Outcome.FAILED:
            return StepResult.failed(
                result.exit_code,
                f"Bundle verification FAILED (exit {result.exit_code}): {verdict.reason}",
                classification="verify-failed",
            )
        return StepResult.ok(verdict.reason, classification="verified")

    def lease(self) -> StepResult:
        if self.ctx.mode is Mode.PLAN:
            return StepResult.skipped("plan: nothing is deployed")
        if not self.s.deploy.enabled:
            return StepResult.skipped("assert-only run: nothing is deployed, no install Lease needed")
        lease = self.ctx.lease
        if lease is None:
            return StepResult.skipped(
                "no install Lease (AICR_RUNNER_LEASE__NAME is empty): runs of this release are not serialised"
            )
        record = self.ctx.report.step(State.LEASE.value)

        def on_wait(holder: str, waited: float) -> None:
            record.message = (
                f"waiting for the install Lease {lease.where}, held by {holder} "
                f"(waited {waited:.0f}s; gives up after {self.s.lease.wait_seconds:g}s)"
            )
            self.ctx.progress()

        waited = lease.acquire(on_wait)
        lease.start_renewing(self.ctx.on_lease_lost)
        after = f" after waiting {waited:.0f}s" if waited >= 1 else ""
        return StepResult.ok(f"install Lease {lease.where} held by {lease.holder}{after}")

    def deploy(self) -> StepResult:
        if self.ctx.mode is Mode.PLAN:
            return StepResult.skipped("plan: nothing is deployed")
        if not self.s.deploy.enabled:
            return StepResult.skipped("Skipping deploy (deploy.enabled=false): assert-only run")
        failure, recovered = self._settle_pending()
        if failure is not None:
            return failure
        if self.ctx.lease is not None and self.ctx.recipe_summary is not None:
            self.ctx.lease.announce(f"{c.namespace}/{c.name}" for c in self.ctx.recipe_summary.components)
        guard = self._helm_guard()
        env = child_env(self.ctx.environ)
        if guard is not None:
            env["PATH"] = os.pathsep.join([str(guard.bin_dir), env.get("PATH", "")])
        # An aicr known to print no per-component results is said to, whatever it printed.
        markers = classify.DeployMarkers(results_reported=self.ctx.behaviour.per_component_results)
        argv = commands.deploy_argv(self.s, self.ctx.bundle_dir)
        result = self._aicr(
            State.DEPLOY,
            argv,
            env=env,
            on_block=self._deploy_relay(markers),
            cwd=self.ctx.bundle_dir,
            safe_stop=guard,
        )
        verdict = classify.classify_deploy(
            result.exit_code,
            failure_report=markers.failure_report,
            dra_deferred=markers.dra_deferred,
            best_effort=self.s.deploy.best_effort,
        )
        # What deploy.sh reported, for the operator: "13/15 installed, 2 failed (nfd, aws-efa)".
        tally = "pre-flight checks failed" if markers.preflight_failed else markers.counts()
        if recovered:
            tally += f"; recovered first: {', '.join(recovered)}"
        if verdict.outcome is Outcome.FAILED:
            return StepResult.failed(
                verdict.exit_code,
                f"AICR install FAILED (deploy.sh exit {result.exit_code}): {verdict.reason}; {tally}",
                classification="deploy-failed",
            )
        if verdict.outcome is Outcome.WARNED:
            return StepResult.warned(f"{verdict.reason}; {tally}", classification="deploy-warned")
        return StepResult.ok(f"AICR install complete: {tally}", classification="deployed")

    def _settle_pending(self) -> tuple[StepResult | None, list[str]]:
        """Recover the pending releases a dead predecessor of this release left;
        fail (exit 28) on pending releases nothing proves are its own."""
        pending = self._pending_releases()
        if not pending:
            return None, []
        lease = self.ctx.lease
        proven = lease.announced_before if lease is not None else frozenset()
        foreign = [p for p in pending if f"{p[0]}/{p[1]}" not in proven and f"/{p[1]}" not in proven]
        if foreign:
            listing = ", ".join(f"{ns}/{name} ({status})" for ns, name, status in foreign)
            why = (
                f"the install Lease {lease.where} has no record of a run of this release operating on them"
                if lease is not None
                else "without an install Lease the runner cannot tell who left them"
            )
            return StepResult.failed(
                ExitCode.HELM_RELEASE_PENDING,
                f"Helm release(s) of this bundle are pending from an interrupted helm operation: {listing}; "
                f"{why}, so they are not touched, and deploy.sh would fail on them ('another operation is in "
                "progress'). Make sure no other helm is operating on them, inspect with "
                "`helm history <name> -n <namespace>`, then `helm rollback <name> <last deployed revision>` "
                "(pending-upgrade, pending-rollback) or `helm uninstall <name>` (pending-install), and re-run",
                classification="helm-release-pending",
            ), []
        recovered: list[str] = []
        for ns, name, status in pending:
            failure = self._recover(ns, name, status)
            if failure is not None:
                return failure, recovered
            recovered.append(f"{ns}/{name}")
        return None, recovered

    def _helm_guard(self) -> HelmGuard | None:
        """deploy.sh's helm behind aicr_runner.helmguard (None without a helm on PATH)."""
        helm = shutil.which("helm", path=self.ctx.environ.get("PATH"))
        if helm is None:
            return None
        guard = HelmGuard(self.ctx.work / "helm-guard")
        guard.install(str(Path(helm).absolute()))
        return guard

    def _helm_json(self, argv: list[str], log_path: Path) -> tuple[ProcessResult, list[Any] | None, list[str]]:
        """Run a helm query whose output is a JSON list; the list is None when helm
        failed or printed something else. The output lines come back for messages."""
        lines: list[str] = []
        result = self.ctx.processes.run(
            argv, env=child_env(self.ctx.environ), cwd=self.ctx.work, log_path=log_path, on_line=lines.append
        )
        try:
            parsed = json.loads("".join(lines)) if result.exit_code == 0 else None
        except ValueError:
            parsed = None
        return result, parsed if isinstance(parsed, list) else None, lines

    def _recover(self, namespace: str, name: str, status: str) -> StepResult | None:
        """Recover a pending release a dead predecessor of this release left, the way
        Flux's helm-controller does: roll back to the last deployed revision, or
        uninstall when there is none (a cut first install). None when it worked."""
        helm = shutil.which("helm", path=self.ctx.environ.get("PATH")) or "helm"
        log_path = self.ctx.work / "logs" / "deploy-recovery.log"
        history, revisions, _ = self._helm_json(
            [helm, "history", name, "--namespace", namespace, "--output", "json"], log_path
        )
        if revisions is None:
            return StepResult.failed(
                ExitCode.HELM_RELEASE_PENDING,
                f"cannot recover {namespace}/{name} ({status}): `helm history` failed (exit {history.exit_code}); "
                "repair it by hand (`helm rollback` or `helm uninstall`) and re-run",
                classification="helm-release-pending",
            )
        pending_revision = max((int(r.get("revision", 0)) for r in revisions if isinstance(r, dict)), default=0)
        settled = [
            int(r.get("revision", 0))
            for r in revisions
            if isinstance(r, dict)
            and str(r.get("status")) in ("deployed", "superseded")
            and int(r.get("revision", 0)) < pending_revision
        ]
        if status == "pending-install" or not settled:
            argv = [helm, "uninstall", name, "--namespace", namespace]
            action = "uninstalled (a cut first install; deploy.sh installs it again)"
        else:
            target = max(settled)
            argv = [helm, "rollback", name, str(target), "--namespace", namespace]
            action = f"rolled back from revision {pending_revision} to {target}"
        self.log.warning(
            f"recovering Helm release {namespace}/{name} ({status}) left by a run of this release that was stopped",
            action=argv[1],
            step=State.DEPLOY.value,
        )
        result = self.ctx.processes.run(
            argv,
            env=child_env(self.ctx.environ),
            cwd=self.ctx.work,
            log_path=self.ctx.work / "logs" / f"deploy-recovery-{name}.log",
            on_block=self._relay(State.DEPLOY, None, None),
        )
        if result.exit_code != 0:
            return StepResult.failed(
                ExitCode.HELM_RELEASE_PENDING,
                f"recovering {namespace}/{name} ({status}) failed: `{' '.join(argv[1:])}` exited {result.exit_code}; "
                "repair it by hand and re-run",
                classification="helm-release-pending",
            )
        self.ctx.report.recoveries.append(
            {
                "release": f"{namespace}/{name}",
                "status": status,
                "action": action,
                "at": utcnow().isoformat(timespec="seconds").replace("+00:00", "Z"),
            }
        )
        self.log.info(f"recovered Helm release {namespace}/{name}: {action}", step=State.DEPLOY.value)
        self.ctx.progress()
        return None

    def _pending_releases(self) -> list[tuple[str, str, str]]:
        """Releases of this bundle's components left pending-* by an interrupted helm.

        Advisory when it cannot look (no helm on PATH, cluster unreachable): it says
        so in the log and deploy.sh runs, reporting whatever it finds itself.
        """
        helm = shutil.which("helm", path=self.ctx.environ.get("PATH"))
        summary = self.ctx.recipe_summary
        if summary is None:
            return []
        if helm is None:
            self.log.warning("pending-release check skipped: helm is not on PATH", step=State.DEPLOY.value)
            return []
        result, releases, lines = self._helm_json(
            [helm, "list", "--all-namespaces", "--pending", "--output", "json"],
            self.ctx.work / "logs" / "deploy-preflight.log",
        )
        if releases is None:
            self.log.warning(
                "pending-release check skipped: helm list failed",
                exit_code=result.exit_code,
                detail=logs.redact(lines[-1] if lines else ""),
                step=State.DEPLOY.value,
            )
            return []
        # A release is ours when it has a component's name, in that component's
        # namespace (any namespace when the recipe names none).
        namespace_of = {c.name: c.namespace for c in summary.components}
        pending: list[tuple[str, str, str]] = []
        for release in releases:
            if not isinstance(release, dict):
                continue
            ns, name, status = (str(release.get(key, "")) for key in ("namespace", "name", "status"))
            if name in namespace_of and namespace_of[name] in ("", ns) and status.startswith("pending"):
                pending.append((ns, name, status))
        return pending

    def validate(self) -> StepResult:
        if self.ctx.mode is Mode.PLAN:
            return StepResult.skipped("plan: no validation")
        if not self.s.validate.enabled:
            return StepResult.skipped("validate.enabled=false")
        self.ctx.ctrf_path.unlink(missing_ok=True)
        shutil.rmtree(self.ctx.evidence_dir, ignore_errors=True)
        argv = commands.validate_argv(
            self.s, self._binary, self.ctx.recipe_path, self.ctx.pack, self.ctx.ctrf_path, self.ctx.evidence_dir
        )
        result = self._aicr(State.VALIDATE, argv)
        self.log.info(f"aicr validate exit={result.exit_code}", step=State.VALIDATE.value)
        verdict = classify.classify_validate(result.exit_code)
        if result.exit_code == 0 and not self.ctx.ctrf_path.is_file():
            return StepResult.failed(
                ExitCode.AICR_CONTRACT_BROKEN,
                f"aicr broke its contract: aicr validate exited 0 but wrote no {self.ctx.ctrf_path.name} "
                f"(--output {self.ctx.ctrf_path}); the verdict is unknown",
                classification="aicr-contract-broken",
            )
        if verdict.outcome is Outcome.FAILED:
            return StepResult.failed(result.exit_code, verdict.reason, classification="validation-failed")
        return StepResult.ok(verdict.reason, classification="validation-passed")

    def capture_verdict(self) -> StepResult:
        validate_exit = self._validate_exit()
        if validate_exit is None:
            return StepResult.skipped("validation did not run")
        if not self.ctx.ctrf_path.is_file():
            return StepResult.warned(f"no ctrf.json (exit={validate_exit})")
        name = self.s.validate.result_configmap
        if not name:
            return StepResult.skipped("verdict capture is off (the result ConfigMap name is empty)")
        raw = self.ctx.ctrf_path.read_bytes()
        fitted = _fit("ctrf.json", raw, CONFIGMAP_BUDGET_BYTES)
        if fitted is None:
            raise CaptureError(f"ctrf.json is {len(raw)} bytes, over the ConfigMap budget even compressed")
        data, binary = fitted
        self.ctx.sink.put(name, data=data, binary_data=binary or None)
        return StepResult.ok(f"CTRF verdict written to {self.ctx.sink.describe(name)}")

    def publish(self) -> StepResult:
        pub = self.s.validate.publish
        if not pub.enabled or self._validate_exit() is None:
            return StepResult.skipped("publish.enabled=false" if not pub.enabled else "validation did not run")
        if not self.ctx.evidence_dir.is_dir():
            return StepResult.failed(1, "no evidence bundle to publish (validate emitted none)")
        token = None
        if pub.identity_token_file:
            # Read now, not at start: a rotated Secret is picked up.
            try:
                token = Path(pub.identity_token_file).read_text().strip()
            except OSError as exc:
                return StepResult.failed(
                    ExitCode.BAD_INPUT, f"identity token file {pub.identity_token_file}: {exc.strerror or exc}"
                )
            logs.register_secret(token)
        env = child_env(self.ctx.environ, docker_config=pub.registry_config_dir or None, identity_token=token)
        result = self._aicr(State.PUBLISH, commands.publish_argv(self.s, self._binary, self.ctx.evidence_dir), env=env)
        self.log.info(f"evidence publish exit={result.exit_code}", step=State.PUBLISH.value)
        if result.exit_code != 0:
            return StepResult.failed(result.exit_code, f"aicr evidence publish exited {result.exit_code}")
        return StepResult.ok(f"evidence published to {pub.ref}")

    def capture_evidence(self) -> StepResult:
        v = self.s.validate
        if not v.emit_evidence or self._validate_exit() is None:
            return StepResult.skipped(
                "validate.emitEvidence=false" if not v.emit_evidence else "validation did not run"
            )
        if not self.ctx.evidence_dir.is_dir():
            return StepResult.warned("no evidence directory was written")
        if not v.evidence_configmap:
            return StepResult.skipped("evidence capture is off (the evidence ConfigMap name is empty)")
        data: dict[str, str] = {}
        pointer = self.ctx.evidence_dir / "pointer.yaml"
        if pointer.is_file():
            data["pointer.yaml"] = pointer.read_text(errors="replace")
        archive = _tar_gz(self.ctx.evidence_dir, CONFIGMAP_BUDGET_BYTES - payload_size(data))
        binary = {"evidence.tgz": archive} if archive is not None else {}
        if not data and not binary:
            return StepResult.warned("evidence bundle over budget and no pointer.yaml: not stored")
        self.ctx.sink.put(v.evidence_configmap, data=data, binary_data=binary or None)
        where = self.ctx.sink.describe(v.evidence_configmap)
        if archive is None:
            return StepResult.warned(f"evidence bundle over the ConfigMap budget: pointer only, in {where}")
        return StepResult.ok(f"Evidence artifacts written to {where}")

    def _recipe_summary_text(self) -> str:
        s = self.s
        lines = [f"criteria: {s.criteria.summary()}"]
        if s.recipe.flags or s.recipe.args:
            lines.append(f"recipeFlags: {' '.join([*s.recipe.flags.split(), *s.recipe.args])}")
        if s.pack.ref or self.ctx.pack_dir:
            lines.append(f"dataPack: {s.pack.ref or self.ctx.pack_dir}")
        if self.ctx.completion_line:
            lines.append(self.ctx.completion_line)
        summary = self.ctx.recipe_summary
        if summary is not None:
            lines.append(f"appliedOverlays: {', '.join(summary.applied_overlays)}")
            lines.append("")
            lines.append(component_table(summary))
        return "\n".join(lines) + "\n"


def component_table(summary: recipe.RecipeSummary) -> str:
    rows = [("NAME", "VERSION", "NAMESPACE", "CHART")]
    rows += [(c.name, c.version or "-", c.namespace or "-", c.chart or "-") for c in summary.components]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(col.ljust(widths[i]) for i, col in enumerate(r)).rstrip() for r in rows)


def _fit(key: str, raw: bytes, budget: int) -> tuple[dict[str, str], dict[str, bytes]] | None:
    """``raw`` as text under ``key``; over ``budget``, gzip-compressed in binaryData
    under ``key.gz`` rather than dropped; None when even that does not fit."""
    if len(raw) <= budget:
        return {key: raw.decode(errors="replace")}, {}
    packed = gzip.compress(raw, mtime=0)
    if len(packed) <= budget:
        return {}, {f"{key}.gz": packed}
    return None


def _tar_gz(directory: Path, budget: int) -> bytes | None:
    """The directory as tar+gzip, or None when it would exceed ``budget`` bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory.parent)), recursive=False)
            if buffer.tell() > budget:
                return None
    data = buffer.getvalue()
    return data if len(data) <= budget else None


def _elapsed(started: datetime) -> float:
    return (utcnow() - started).total_seconds()
