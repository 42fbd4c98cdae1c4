"""The run's outcome announced: the log line, the pod's termination message, the
summary printed outside a Job, and the Events a warned outcome records.

Called once, by ``wiring``, after the machine ended and the final report was
written; nothing here changes the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aicr_runner import logs
from aicr_runner.aicr.recipe import RecipeSummary, component_table, with_supported
from aicr_runner.run.invocation import Invocation, Mode
from aicr_runner.run.report import RunPhase, RunReport
from aicr_runner.text import cut_bytes, one_line

if TYPE_CHECKING:
    from aicr_runner.kube.api import KubeApi
    from aicr_runner.kube.events import JobEvents
    from aicr_runner.kube.sink import Sink
    from aicr_runner.settings.config import RunnerSettings

__all__ = ["conclude", "termination_line"]

log = logs.get_logger()

#: Kubernetes keeps at most 4096 bytes of a termination message.
_TERMINATION_MESSAGE_LIMIT = 4096

#: The outcomes also reported on the HelmRelease (an Event Flux shows).
_WARNED = (RunPhase.FAILED, RunPhase.SUCCEEDED_WITH_FAILURES, RunPhase.SUCCEEDED_INCONCLUSIVE)


def conclude(
    settings: RunnerSettings,
    invocation: Invocation,
    report: RunReport,
    sink: Sink,
    *,
    cluster: tuple[KubeApi, str] | None,
    events: JobEvents | None = None,
    status_written: bool = True,
) -> None:
    """The outcome announced and recorded on the Job; a failed Job run (or one
    with failed components, or whose validation ran no check) also reported on
    its HelmRelease. ``cluster`` is the API and the run's namespace in a Job run;
    ``status_written`` false: the final status was not written, and the log line says so."""
    termination = termination_line(report)
    status = sink.describe(settings.status_configmap or "-") if status_written else "not written"
    _announce(settings, invocation, report, status=status, line=termination)
    if events is not None:
        events.run_ended(report, termination)
    if report.phase in _WARNED and cluster is not None and settings.lease.job_name:
        # After the capture and the termination message; never changes the exit code.
        _report_on_release(settings, report.phase, termination, *cluster)


def _report_on_release(
    settings: RunnerSettings, phase: RunPhase, termination: str, api: KubeApi, namespace: str
) -> None:
    """The warned outcome as an Event on the HelmRelease (imported only in a Job run)."""
    from aicr_runner.kube import events as job_events

    reasons = {
        RunPhase.FAILED: job_events.EVENT_REASON,
        RunPhase.SUCCEEDED_WITH_FAILURES: job_events.COMPONENTS_FAILED_REASON,
        RunPhase.SUCCEEDED_INCONCLUSIVE: job_events.INCONCLUSIVE_REASON,
    }
    job_events.report_failure(
        api,
        job_namespace=namespace,
        job=settings.lease.job_name,
        pod=settings.lease.pod_name,
        message=termination,
        reason=reasons[phase],
    )


def termination_line(report: RunReport) -> str:
    """The pod's termination message (before redaction): phase, exit code, why, aicr
    version; one printable line, the aicr version kept when the message is cut."""
    line = f"{report.phase.value} (exit {report.exit_code}): "
    tail = f" [aicr {one_line(report.aicr_version, 100)}]"
    why = one_line(with_supported(report.message, report.supported_combinations), _TERMINATION_MESSAGE_LIMIT)
    return cut_bytes(line + why, _TERMINATION_MESSAGE_LIMIT - len(tail.encode())) + tail


def _write_termination(path: str, line: str) -> None:
    """The termination message: redacted, printable, at most 4096 bytes of UTF-8.
    Not written without a path (outside a pod)."""
    if not path:
        return
    try:
        Path(path).write_bytes(cut_bytes(one_line(logs.redact(line), 8192), _TERMINATION_MESSAGE_LIMIT).encode())
    except OSError as exc:
        log.warning("termination message not written", path=path, reason=str(exc))


def _announce(settings: RunnerSettings, invocation: Invocation, report: RunReport, *, status: str, line: str) -> None:
    """Log the outcome, write the termination message ``line`` (redacted, bounded)
    and, outside a Job, print the summary."""
    if report.exit_code == 0:
        log.info("run ended", message=report.message, exit_code=0, status=status)
    else:
        log.error("run ended", message=report.message, exit_code=report.exit_code, status=status)
    # A Job runs `run` or `validate` (the re-validation CronJob): both end with the
    # pod's termination message, which `kubectl get pods` and alerts read.
    if invocation.mode is not Mode.PLAN:
        _write_termination(settings.termination_message_path, line)
        if invocation.results_dir is None:
            return
    print(report.summary_text())
    if report.components:
        print(component_table(RecipeSummary.from_rows(report.components)))
    print(f"\nresults in {invocation.results_dir}")
    if report.supported_combinations:
        print("criteria rejected; supported combinations:\n  " + "\n  ".join(report.supported_combinations))
