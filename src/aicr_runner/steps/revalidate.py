"""The steps only a validation-only run (``aicr-runner validate``) has, or runs its own way.

A validation-only run validates the cluster against the recipe an install
recorded: it never resolves the recipe again, renders a bundle, or deploys. It
takes the install Lease without waiting: an install in progress ends it at once.
An install that starts while it validates takes the Lease over at once, and the
validation then discards its verdict (``preempted``): a half-installed cluster
is never reported, and the install never waits for a validation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aicr_runner import logs
from aicr_runner.aicr import history, recipe
from aicr_runner.aicr.classify import CtrfVerdict
from aicr_runner.errors import ExitCode, RecipeFormatError, RunnerError
from aicr_runner.run.machine import StepResult
from aicr_runner.steps.context import Mode, RunContext
from aicr_runner.steps.upgrade import INSTALLED_KEY
from aicr_runner.text import cut_bytes, one_line, printable

__all__ = [
    "VerdictChange",
    "captured",
    "history_name",
    "keep_unreadable",
    "no_install_running",
    "note_preemption",
    "preempted",
    "record_history",
    "recorded_recipe",
    "unreadable_captured",
]

log = logs.get_logger()


def no_install_running(ctx: RunContext) -> StepResult:
    """The install Lease taken for this validation, never waited on: held by a live
    install (or another validation), the run ends (exit 33)."""
    lease = ctx.externals.lease
    if lease is None:
        return StepResult.skipped("no install Lease to take (outside a cluster, or lease.name is empty)")
    holder = lease.take_for_validation()
    if holder is not None:
        return StepResult.failed(
            ExitCode.INSTALL_IN_PROGRESS,
            f"install in progress, not validated: the install Lease {lease.where} is held by {holder}; "
            "the next scheduled validation checks the installed cluster",
            classification="install-in-progress",
        )
    lease.start_renewing(lambda reason: log.warning("install Lease lost during the validation", reason=reason))
    return StepResult.ok(
        f"no install in progress: the install Lease {lease.where} is held for this validation "
        "(an install that starts takes it over, and this verdict is then discarded)"
    )


def note_preemption(ctx: RunContext) -> None:
    """Once ``aicr validate`` has ended: whether an install took the Lease over while
    it ran (one read; the steps after it ask ``preempted``)."""
    lease = ctx.externals.lease
    if lease is not None and not lease.still_held():
        ctx.findings.preempted = True


def preempted(ctx: RunContext) -> StepResult | None:
    """A validation whose install Lease an install took over: its verdict may be of a
    half-installed cluster, so it is neither captured nor compared (exit 33)."""
    lease = ctx.externals.lease
    if not ctx.findings.preempted or lease is None:
        return None
    return StepResult.failed(
        ExitCode.INSTALL_IN_PROGRESS,
        f"an install took the install Lease {lease.where} over during the validation: its verdict may be of a "
        "half-installed cluster, so it is not captured, compared or kept in history; the install validates itself",
        classification="install-in-progress",
    )


def recorded_recipe(ctx: RunContext) -> StepResult:
    """The recipe recorded at install: ``--recipe``, a file or the recipe ConfigMap
    mounted in the pod (``recipe.yaml``, or ``recipe.yaml.gz`` when stored compressed)."""
    given = ctx.config.recipe_file
    if given is None:
        return StepResult.skipped("not a validation-only run")
    # An upgrade the upgrade check stopped left the refused recipe as recipe.yaml and
    # the installed one beside it: validate what is installed.
    if given.name == "recipe.yaml":
        installed = given.with_name(INSTALLED_KEY)
        if any(p.is_file() and p.stat().st_size for p in (installed, installed.with_name(f"{INSTALLED_KEY}.gz"))):
            given = installed  # read_recorded takes its .gz when the capture stored it compressed
    raw = recipe.read_recorded(given)
    try:
        summary = recipe.parse_recipe(raw.decode("utf-8"), where=f"--recipe {given}")
    except (UnicodeDecodeError, RecursionError, RecipeFormatError) as exc:
        why = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else one_line(str(exc), 1000)
        raise RunnerError(
            f"--recipe {given}: the recorded recipe is not a recipe this runner reads: {why}",
            exit_code=ExitCode.BAD_INPUT,
        ) from None
    ctx.recipe_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.recipe_path.write_bytes(raw)
    ctx.findings.recipe_summary = summary
    ctx.report.components = [c.as_row() for c in summary.components]
    digest = hashlib.sha256(raw).hexdigest()
    ctx.findings.recipe_digest = f"sha256:{digest}"
    return StepResult.ok(
        f"recipe recorded at install: {given} (sha256:{digest[:12]}, {len(summary.components)} components)"
    )


def history_name(ctx: RunContext) -> str:
    """The verdict history's ConfigMap: the verdict ConfigMap's name, ``-history``."""
    return f"{ctx.settings.validate.result_configmap}-history"


#: Keys of the history ConfigMap beside ``history.json``: a damaged history kept
#: aside (then replaced), and the newest unreadable CTRF report (the verdict
#: ConfigMap keeps the last good one, never overwritten by it).
HISTORY_KEY, DAMAGED_KEY, UNREADABLE_KEY = "history.json", "history.damaged.json", "ctrf.unreadable.json"
#: The bound of what is kept aside, each (the ConfigMap budget shared with the history).
_ASIDE_BYTES = 300_000


@dataclass(frozen=True)
class VerdictChange:
    """What changed since the previous verdict of the same recipe: said, and whether checks regressed."""

    said: str = ""
    regressed: bool = False


def record_history(ctx: RunContext, ctrf: bytes) -> tuple[bytes, VerdictChange]:
    """This verdict appended to the history and compared with the previous one of the
    same recipe: the CTRF report with its baseline, and what changed (nothing said if nothing).
    Advisory: a history that cannot be read or written is a warning, never a failed
    capture; a damaged one is kept aside and replaced."""
    digest = ctx.findings.recipe_digest or _digest_of(ctx)
    try:
        verdict = CtrfVerdict.parse(ctrf)
    except ValueError as exc:  # the validate step read it first: only a report changed since
        ctx.report.warnings.append(f"verdict history not compared: {exc}")
        return ctrf, VerdictChange()
    stored = _stored(ctx)
    if stored is None:
        return ctrf, VerdictChange()
    past, kept = _past(ctx, stored)
    version = ctx.findings.aicr_version.text if ctx.findings.aicr_version else ctx.report.aicr_version
    by = f"{'install' if ctx.mode is Mode.RUN else 'revalidate'} {ctx.report.run_by}".strip()
    entry = history.entry_of(
        verdict, when=ctx.externals.clock().isoformat(), run_by=by, aicr_version=version, recipe_digest=digest
    )
    change = history.change_since(history.previous_of(past, digest), entry)
    entries, dropped = history.within_bytes(history.append(past, entry, ctx.settings.validate.history_limit))
    if dropped:
        ctx.report.warnings.append(
            f"verdict history: the {dropped} oldest entries dropped to stay within {history.HISTORY_BYTES} bytes"
        )
    _write_history(ctx, {**kept, HISTORY_KEY: history.to_text(entries)})
    return history.with_baseline(ctrf, change.previous), _announce(ctx, change)


def keep_unreadable(ctx: RunContext, ctrf: bytes) -> str:
    """An unreadable CTRF report kept in the history ConfigMap (bounded), the history
    itself unchanged; where it is, or "" when it could not be kept."""
    stored = _stored(ctx)
    if stored is None:
        return ""
    text = cut_bytes(printable(ctrf.decode("utf-8", "replace")), _ASIDE_BYTES)
    kept = {key: stored[key] for key in (HISTORY_KEY, DAMAGED_KEY) if key in stored}
    if not _write_history(ctx, {**kept, UNREADABLE_KEY: text}):
        return ""
    return f"{ctx.sink.describe(history_name(ctx))} ({UNREADABLE_KEY})"


def _stored(ctx: RunContext) -> Mapping[str, str] | None:
    """The history ConfigMap's keys; None (and a warning) when it cannot be read."""
    try:
        return ctx.sink.get_data(history_name(ctx))
    except RunnerError as exc:
        ctx.report.warnings.append(f"verdict history not read, not compared: {exc.message}")
        return None


def _past(ctx: RunContext, stored: Mapping[str, str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The history's entries, and the keys to keep beside it: a damaged history is
    kept aside (replacing the one kept before) and the history starts afresh."""
    kept = {key: stored[key] for key in (DAMAGED_KEY, UNREADABLE_KEY) if key in stored}
    text = stored.get(HISTORY_KEY)
    if not text:
        return [], kept
    try:
        return history.load(text), kept
    except ValueError as exc:
        where = f"{ctx.sink.describe(history_name(ctx))} ({DAMAGED_KEY})"
        ctx.report.warnings.append(f"{exc}: kept aside in {where}; the history starts afresh with this verdict")
        return [], {**kept, DAMAGED_KEY: cut_bytes(printable(text), _ASIDE_BYTES)}


def _write_history(ctx: RunContext, data: dict[str, str]) -> bool:
    try:
        ctx.sink.put(history_name(ctx), data=data)
    except RunnerError as exc:
        log.warning("verdict history not written", reason=exc.message)
        return False
    return True


def unreadable_captured(ctx: RunContext, name: str) -> StepResult:
    """An unreadable CTRF report is no verdict: kept beside the history, never over the last good one."""
    where = keep_unreadable(ctx, ctx.ctrf_path.read_bytes())
    kept = f"kept in {where}" if where else "not kept (the history ConfigMap could not be written)"
    return StepResult.warned(
        f"the CTRF report is unreadable, no verdict: {kept}; the last good verdict in "
        f"{ctx.sink.describe(name)} is not overwritten",
        classification="verdict-unreadable",
    )


def captured(where: str, change: VerdictChange) -> StepResult:
    """The verdict capture's result: a regression is a warning (the run is never plain green)."""
    if change.regressed:
        return StepResult.warned(f"{where}; {change.said}", classification="validation-regressed")
    return StepResult.ok(f"{where}; {change.said}" if change.said else where)


def _announce(ctx: RunContext, change: history.Change) -> VerdictChange:
    """What changed: on the report (summary.txt lists its warnings) and as Events."""
    if change.previous is None or not (change.regressed or change.recovered):
        return VerdictChange()
    since = str(change.previous.get("time", "the previous run"))
    ctx.findings.regressed = tuple(change.regressed)
    ctx.handlers.on_verdict_change(change.regressed, change.recovered, since)
    said = []
    if change.regressed:
        said.append(f"REGRESSED since {since}: {', '.join(change.regressed)}")
        ctx.report.warnings.append(f"validation regressed since {since}: {', '.join(change.regressed)}")
    if change.recovered:
        said.append(f"recovered since {since}: {', '.join(change.recovered)}")
    return VerdictChange("; ".join(said), regressed=bool(change.regressed))


def _digest_of(ctx: RunContext) -> str:
    """An install's recipe digest (a validation-only run read it with the recipe)."""
    path = ctx.recipe_path
    return f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}" if path.is_file() else ""
