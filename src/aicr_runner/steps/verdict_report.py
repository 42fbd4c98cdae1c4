"""What a run reports as its verdict report object, and when (``kube.report_writer`` writes it).

The machine's ``verdict-report`` state, after the last capture (the verdict and
the evidence stored): each run that validated or deployed writes one result per
CTRF test and one per component deploy.sh reported. A run whose deploy failed, or
whose upgrade check stopped it, goes there from that step, before the captures:
its components (or its crossing) are written then (a failed install is what a
fleet most needs to see). Not a step of the run report.

Advisory: every failure is one warning line and never changes the run's outcome
or exit code.
"""

from __future__ import annotations

from aicr_runner import logs
from aicr_runner.aicr.ctrf import CtrfVerdict
from aicr_runner.kube import openreports, report_writer
from aicr_runner.kube.openreports import Entry, RunFacts
from aicr_runner.run.machine import State, StepResult
from aicr_runner.run.report import StepRecord, StepStatus
from aicr_runner.settings.config import ReportsApi
from aicr_runner.steps import upgrade
from aicr_runner.steps.context import RunContext

__all__ = [
    "entries_of",
    "facts_of",
    "write_after_failed_deploy",
    "write_after_stopped_upgrade",
    "write_verdict",
    "written",
]

log = logs.get_logger()

_NOT_STARTED = (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED)


def written(ctx: RunContext) -> StepResult:
    """The ``verdict-report`` state: a run that failed its deploy or whose upgrade
    check stopped it (both end before the captures) its components or its crossing;
    any other the run's verdict, after the evidence capture (whatever its outcome).
    Best effort, never a failure."""
    if _failed(ctx, State.DEPLOY):
        write_after_failed_deploy(ctx)
    elif _failed(ctx, State.UPGRADE_CHECK):
        write_after_stopped_upgrade(ctx)
    else:
        write_verdict(ctx, evidence_stored=ctx.findings.evidence_stored)
    return StepResult.ok()


def _failed(ctx: RunContext, state: State) -> bool:
    """``state`` is a step of this run's report, and failed."""
    return any(r.state == state and r.status is StepStatus.FAILED for r in ctx.report.steps)


def entries_of(ctx: RunContext) -> list[Entry] | None:
    """The run's results: each CTRF test and each component deploy.sh reported;
    None when neither validate nor deploy ran (nothing to report)."""
    validate = ctx.report.step(State.VALIDATE.value)
    # A validation-only run has no deploy step.
    deploy = next((r for r in ctx.report.steps if r.state == State.DEPLOY), StepRecord(State.DEPLOY.value))
    crossed = upgrade.entries(ctx)
    if validate.status in _NOT_STARTED and deploy.status in _NOT_STARTED and not crossed:
        return None
    entries: list[Entry] = list(crossed)
    if validate.status not in _NOT_STARTED:
        entries += _validation(ctx, interrupted=validate.status is StepStatus.INTERRUPTED)
    if deploy.status not in _NOT_STARTED:
        entries += openreports.deploy_entries(deploy.progress, ctx.report.failed_components)
    return entries


def _validation(ctx: RunContext, *, interrupted: bool) -> list[Entry]:
    """The CTRF tests; one ``error`` result when there is no verdict to map."""
    why = "aicr validate was interrupted: no verdict" if interrupted else ""
    if not why and not ctx.ctrf_path.is_file():
        why = "aicr validate wrote no CTRF report: no verdict"
    if not why:
        try:
            raw = ctx.ctrf_path.read_bytes()
            CtrfVerdict.parse(raw)  # an unreadable report is one error result, never its tests
            return openreports.validation_entries(raw)
        except (OSError, ValueError) as exc:
            why = f"the CTRF report is unreadable: {exc}"
    return [Entry("aicr-validate", "aicr-validate", "validate", "error", openreports.stable_message(why, "error"))]


def facts_of(ctx: RunContext, namespace: str, *, evidence_stored: bool) -> RunFacts:
    s, report = ctx.settings, ctx.report
    found = ctx.findings.aicr_version
    return RunFacts(
        name=s.reports.name,
        namespace=namespace,
        release=s.reports.release,
        aicr_version=found.text if found is not None else report.aicr_version,
        recipe=", ".join(f"{key}={value}" for key, value in report.criteria.items() if value),
        run_by=report.run_by,
        evidence_configmap=s.validate.evidence_configmap if evidence_stored else "",
        when=ctx.externals.clock(),
        regressed=ctx.findings.regressed,
        upgrade_blocked=upgrade.blocked(ctx),
    )


def write_verdict(ctx: RunContext, *, evidence_stored: bool) -> None:
    """Write the run's report, if there is an API to write to and something to
    report. Never raises: a failure is one warning line."""
    target, setting = ctx.externals.report_target, ctx.settings.reports.api
    if target is None or setting is ReportsApi.NONE:
        return
    try:
        entries = entries_of(ctx)
        if entries is not None:
            facts = facts_of(ctx, target.namespace, evidence_stored=evidence_stored)
            report_writer.write(target, setting, facts, entries)
    except Exception as exc:  # noqa: BLE001 - advisory: the verdict is already captured
        log.warning("verdict report not written", reason=logs.redact(str(exc)))


def write_after_failed_deploy(ctx: RunContext) -> None:
    """A run whose deploy step failed ends before the captures: the components
    deploy.sh reported still go out. Not after an interruption: the pod is on its way out."""
    if ctx.externals.report_target is None or all(r.state != State.DEPLOY for r in ctx.report.steps):
        return
    deploy = ctx.report.step(State.DEPLOY.value)
    # The machine marks the steps it never reached skipped ("not reached"): never started.
    if deploy.status is not StepStatus.FAILED or ctx.report.step(State.CAPTURE_EVIDENCE.value).started_at is not None:
        return
    if openreports.deploy_entries(deploy.progress, ctx.report.failed_components):
        write_verdict(ctx, evidence_stored=False)


def write_after_stopped_upgrade(ctx: RunContext) -> None:
    """A run the upgrade check stopped ends before the deploy and the captures: its
    per-component verdicts still go out (a blocked upgrade is what a fleet must see)."""
    record = next((r for r in ctx.report.steps if r.state == State.UPGRADE_CHECK), None)
    if ctx.externals.report_target is None or record is None or record.status is not StepStatus.FAILED:
        return
    if ctx.findings.upgrade is not None:
        write_verdict(ctx, evidence_stored=False)
