"""The Events a run writes: on its own Job, and on the Flux HelmRelease that rendered it.

The runner's own Job
--------------------

``kubectl describe job``, ``kubectl get events`` and the event views of Argo CD
and Lens show what the run did: a Normal Event per step that ran and ended (its
one-line reason), ``DeployProgress`` while deploy.sh installs, ``ClusterChanged``
when the snapshot step found the cluster changed since the previous run, and at the end
``RunSucceeded``, or a Warning ``RunFailed``, ``RunSucceededWithFailures`` (failed
components under --best-effort), ``RunSucceededInconclusive`` (validation ran no
check) or ``RunInterrupted``. They are
``events.k8s.io/v1`` Events whose ``regarding`` is the Job (with its uid, which
``kubectl describe`` selects by), reported by ``aicr-runner`` from the pod.

Bounded: ``DeployProgress`` at most once every ``PROGRESS_INTERVAL_SECONDS``
(the first when the first component ends) and ``MAX_PROGRESS_EVENTS`` times, and
at most ``MAX_EVENTS`` per run besides the outcome, so a run of any length
writes tens of Events. The outcome is also written on the
Job as annotations (``OUTCOME_ANNOTATION``, ``FAILED_COMPONENTS_ANNOTATION``) for
health checks (docs/installing.md "Health in delivery tools").

Advisory: each call has a short budget, a failure is logged (once) and never
changes the run's outcome or exit code; after ``MAX_FAILURES`` failed writes the
recorder stops trying.

The Flux HelmRelease
--------------------
Flux's helm-controller waits for the Job and, when it fails, reports only
"Job Failed" on the HelmRelease: the runner's termination message stays on the
pod. So a run that failed, or succeeded with failed components, reads its own
Job; when Flux rendered it (helm-controller labels every object it renders with
``helm.toolkit.fluxcd.io/name`` and ``helm.toolkit.fluxcd.io/namespace``), the
runner records a Warning Event on that HelmRelease carrying the termination
message (redacted, bounded): ``EVENT_REASON`` for a failed run,
``COMPONENTS_FAILED_REASON`` for one that succeeded with failed components
(--best-effort; Flux shows it Ready), ``INCONCLUSIVE_REASON`` for one whose
validation ran no check (without validate.failOnError; Flux shows it Ready too). ``kubectl describe helmrelease`` and
``flux events`` then show why. An Interrupted run (exit 143: its Job replaced on
upgrade, or the pod evicted) did not fail the install, and the next run takes
over, so it records none. This is a courtesy on the way out: it runs after the
verdict and run status are captured and the termination message is written,
never changes the exit code, and a failure here is logged and ignored.

One function writes an Event body per API version: ``job_event_body``
(``events.k8s.io/v1``) and ``helmrelease_event_body`` (core ``v1``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aicr_runner import logs
from aicr_runner.kube.api import KubeApi
from aicr_runner.run.report import RunPhase, RunReport, StepRecord, StepStatus
from aicr_runner.text import one_line

__all__ = [
    "COMPONENTS_FAILED_REASON",
    "EVENT_REASON",
    "FAILED_COMPONENTS_ANNOTATION",
    "FLUX_NAMESPACE_LABEL",
    "FLUX_NAME_LABEL",
    "INCONCLUSIVE_REASON",
    "MAX_EVENTS",
    "MAX_PROGRESS_EVENTS",
    "MESSAGE_LIMIT",
    "OUTCOME_ANNOTATION",
    "PROGRESS_INTERVAL_SECONDS",
    "HelmReleaseRef",
    "JobEvents",
    "helmrelease_event_body",
    "job_event_body",
    "report_failure",
]

log = logs.get_logger()

OUTCOME_ANNOTATION = "aicr.nvidia.com/outcome"
FAILED_COMPONENTS_ANNOTATION = "aicr.nvidia.com/failed-components"
REPORTING_CONTROLLER = "aicr-runner"
MAX_EVENTS = 60
#: DeployProgress Events: at most one a minute, at most this many (a deploy's first half hour).
PROGRESS_INTERVAL_SECONDS = 60.0
MAX_PROGRESS_EVENTS = 30
MAX_FAILURES = 2
#: events.k8s.io/v1 bounds: note 1 KiB, reason/action/instance 128 characters.
NOTE_LIMIT = 1024
FIELD_LIMIT = 128

FLUX_NAME_LABEL = "helm.toolkit.fluxcd.io/name"
FLUX_NAMESPACE_LABEL = "helm.toolkit.fluxcd.io/namespace"
EVENT_REASON = "AicrRunFailed"
#: A run that exited 0 with failed components (--best-effort): Flux shows it Ready.
COMPONENTS_FAILED_REASON = "AicrRunSucceededWithFailures"
#: A run that exited 0 although validation ran no check (no validate.failOnError).
INCONCLUSIVE_REASON = "AicrRunSucceededInconclusive"
#: A core/v1 message is kept to the events.k8s.io note's bound.
MESSAGE_LIMIT = NOTE_LIMIT

_RUN_END: dict[RunPhase, tuple[str, str]] = {
    RunPhase.SUCCEEDED: ("Normal", "RunSucceeded"),
    RunPhase.SUCCEEDED_WITH_FAILURES: ("Warning", "RunSucceededWithFailures"),
    RunPhase.SUCCEEDED_INCONCLUSIVE: ("Warning", "RunSucceededInconclusive"),
    RunPhase.FAILED: ("Warning", "RunFailed"),
    RunPhase.INTERRUPTED: ("Warning", "RunInterrupted"),
}


def _camel(state: str) -> str:
    return "".join(part.capitalize() for part in state.split("-"))


def _bounded(text: str, limit: int) -> str:
    """One printable line (no escape sequence reaches ``kubectl describe``), redacted, bounded."""
    return one_line(logs.redact(text), limit)


def job_event_body(
    *,
    namespace: str,
    job: str,
    job_uid: str,
    pod: str,
    kind: str,
    reason: str,
    action: str,
    note: str,
    now: datetime,
) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event regarding the Job, named as client-go names them."""
    stamp = now.astimezone(UTC)
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{job}.{int(stamp.timestamp() * 1e9):x}", "namespace": namespace},
        "eventTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": _bounded(pod or job, FIELD_LIMIT),
        "action": _bounded(action, FIELD_LIMIT),
        "reason": _bounded(reason, FIELD_LIMIT),
        "type": kind,
        "note": _bounded(note, NOTE_LIMIT),
        "regarding": {"apiVersion": "batch/v1", "kind": "Job", "name": job, "namespace": namespace, "uid": job_uid},
    }


class JobEvents:
    """Records Events on ``namespace/job``; every method is safe to call and never raises."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        job: str,
        pod: str,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._namespace, self._job, self._pod = namespace, job, pod
        self._now, self._clock = now, clock
        self._uid: str | None = None
        self._failures = 0
        self._last_progress = float("-inf")
        self.recorded: list[tuple[str, str]] = []

    def step_ended(self, record: StepRecord) -> None:
        """A Normal Event for a step that ran (Warning when it failed or was interrupted)."""
        if record.status in (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED):
            return
        warning = record.status in (StepStatus.FAILED, StepStatus.INTERRUPTED)
        status = record.status.value.capitalize()
        note = record.message or f"{record.state} {record.status.value}"
        self._record("Warning" if warning else "Normal", f"{_camel(record.state)}{status}", record.state, note)

    def deploy_progress(self, progress: Mapping[str, Any]) -> None:
        """``DeployProgress 9/13 components installed``, when a component ended and the
        last one is ``PROGRESS_INTERVAL_SECONDS`` old."""
        if not progress.get("done") or self._clock() - self._last_progress < PROGRESS_INTERVAL_SECONDS:
            return
        if sum(1 for _, reason in self.recorded if reason == "DeployProgress") >= MAX_PROGRESS_EVENTS:
            return
        self._last_progress = self._clock()
        note = f"{progress['installed']}/{progress['total']} components installed"
        if progress.get("failed"):
            failed = [row["name"] for row in progress.get("components", []) if row.get("status") == "failed"]
            note += f", {progress['failed']} failed ({', '.join(failed)})"
        if progress.get("current"):
            note += f"; installing {progress['current']}"
        self._record("Normal", "DeployProgress", "deploy", note)

    def run_ended(self, report: RunReport, message: str) -> None:
        """The run's outcome: an Event, and the Job's outcome annotations."""
        kind, reason = _RUN_END.get(report.phase, ("Warning", "RunFailed"))
        self._record(kind, reason, "run", message, cap_exempt=True)
        annotations = {
            OUTCOME_ANNOTATION: report.phase.value,
            FAILED_COMPONENTS_ANNOTATION: ",".join(report.failed_components),
        }
        self._call("annotating", lambda: self._api.annotate_job(self._namespace, self._job, annotations))

    def verdict_changed(self, regressed: Sequence[str], recovered: Sequence[str], since: str) -> None:
        """A regression (Warning ``ValidationRegressed``) and a recovery (Normal
        ``ValidationRecovered``) against the previous verdict of the same recipe."""
        if regressed:
            note = f"checks that passed on {since} now fail: {', '.join(regressed)}"
            self._record("Warning", "ValidationRegressed", "validate", note, cap_exempt=True)
        if recovered:
            note = f"checks that failed on {since} now pass: {', '.join(recovered)}"
            self._record("Normal", "ValidationRecovered", "validate", note, cap_exempt=True)
        if regressed:
            self._on_cronjob(
                "Warning", "ValidationRegressed", f"checks that passed on {since} now fail: {', '.join(regressed)}"
            )

    def upgrade_checked(self, reason: str, note: str) -> None:
        """Warning ``UpgradeStopped`` / ``UpgradeNotAssessed`` / ``UpgradeUnknownComponents``:
        an upgrade check that stopped the install or could not judge all of it, naming the components."""
        self._record("Warning", reason, "upgrade-check", note, cap_exempt=True)

    def cluster_changed(self, changes: Sequence[str], since: str) -> None:
        """Normal ``ClusterChanged``: what the snapshot found different from the previous one."""
        if changes:
            note = f"since {since}: {'; '.join(changes)}"
            self._record("Normal", "ClusterChanged", "snapshot", note, cap_exempt=True)

    def _on_cronjob(self, kind: str, reason: str, note: str) -> None:
        """The same Event on the CronJob that started this Job (its ownerReference), if one did."""
        owner: list[tuple[str, str] | None] = []
        if not self._call(
            "reading the owner of", lambda: owner.append(self._api.get_job_owner(self._namespace, self._job))
        ):
            return
        if not owner or owner[0] is None:
            return
        name, uid = owner[0]
        body = job_event_body(
            namespace=self._namespace,
            job=name,
            job_uid=uid,
            pod=self._pod,
            kind=kind,
            reason=reason,
            action="Validate",
            note=note,
            now=self._now(),
        )
        body["regarding"]["kind"] = "CronJob"
        if self._call("recording an Event", lambda: self._api.create_job_event(self._namespace, body)):
            self.recorded.append((kind, reason))

    def _record(self, kind: str, reason: str, state: str, note: str, *, cap_exempt: bool = False) -> None:
        if len(self.recorded) >= MAX_EVENTS and not cap_exempt:
            return
        if self._uid is None and not self._call("reading", self._read_uid):
            return
        body = job_event_body(
            namespace=self._namespace,
            job=self._job,
            job_uid=self._uid or "",
            pod=self._pod,
            kind=kind,
            reason=reason,
            action=_camel(state),
            note=note,
            now=self._now(),
        )
        if self._call("recording an Event", lambda: self._api.create_job_event(self._namespace, body)):
            self.recorded.append((kind, reason))

    def _read_uid(self) -> None:
        uid = self._api.get_job_uid(self._namespace, self._job)
        if uid is None:
            raise LookupError(f"Job {self._namespace}/{self._job} not found")
        self._uid = uid

    def _call(self, what: str, call: Callable[[], object]) -> bool:
        if self._failures >= MAX_FAILURES:
            return False
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - advisory: the run's outcome is recorded elsewhere
            self._failures += 1
            stopped = {"then": "no more Events this run"} if self._failures >= MAX_FAILURES else {}
            log.warning("Job not updated", doing=what, job=f"{self._namespace}/{self._job}", reason=str(exc), **stopped)
            return False
        return True


# -- the Flux HelmRelease that rendered the Job ----------------------------------------


@dataclass(frozen=True)
class HelmReleaseRef:
    namespace: str
    name: str
    uid: str | None = None


def owning_helmrelease(job_labels: Mapping[str, str]) -> HelmReleaseRef | None:
    name, namespace = job_labels.get(FLUX_NAME_LABEL, ""), job_labels.get(FLUX_NAMESPACE_LABEL, "")
    return HelmReleaseRef(namespace, name) if name and namespace else None


def helmrelease_event_body(
    release: HelmReleaseRef,
    message: str,
    *,
    job: str,
    job_namespace: str,
    pod: str,
    now: datetime,
    reason: str = EVENT_REASON,
) -> dict[str, Any]:
    """A core/v1 Warning Event on the HelmRelease, related to the Job."""
    involved: dict[str, Any] = {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "name": release.name,
        "namespace": release.namespace,
    }
    if release.uid:
        involved["uid"] = release.uid  # kubectl describe selects events by uid
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # An Event lives in its object's namespace.
        "metadata": {"generateName": f"{release.name}.", "namespace": release.namespace},
        "involvedObject": involved,
        "type": "Warning",
        "reason": reason,
        "message": _bounded(message, MESSAGE_LIMIT),
        "source": {"component": REPORTING_CONTROLLER},
        "reportingComponent": REPORTING_CONTROLLER,
        "reportingInstance": pod or job,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "related": {"apiVersion": "batch/v1", "kind": "Job", "name": job, "namespace": job_namespace},
    }


def report_failure(
    api: KubeApi,
    *,
    job_namespace: str,
    job: str,
    pod: str,
    message: str,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    reason: str = EVENT_REASON,
) -> HelmReleaseRef | None:
    """Record ``message`` on the HelmRelease that rendered ``job``, if any.

    Returns the HelmRelease it was recorded on; None when the Job was not
    rendered by Flux, or when anything failed (logged as a warning).
    """
    try:
        labels = api.get_job_labels(job_namespace, job)
        release = owning_helmrelease(labels or {})
        if release is None:
            return None
        uid = api.get_helmrelease_uid(release.namespace, release.name)
        release = HelmReleaseRef(release.namespace, release.name, uid)
        api.create_event(
            release.namespace,
            helmrelease_event_body(
                release, message, job=job, job_namespace=job_namespace, pod=pod, now=now(), reason=reason
            ),
        )
    except Exception as exc:  # noqa: BLE001 - a courtesy: the failure itself is already recorded
        log.warning("failure not recorded as an Event on the HelmRelease", job=job, reason=str(exc))
        return None
    log.info("failure recorded as an Event on the HelmRelease", helmrelease=f"{release.namespace}/{release.name}")
    return release
