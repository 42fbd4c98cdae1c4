"""Why a run failed, told to the delivery tool that owns the Job.

Flux's helm-controller waits for the Job and, when it fails, reports only
"Job Failed" on the HelmRelease: the runner's termination message stays on the
pod. So a failed run reads its own Job; when Flux rendered it (helm-controller
labels every object it renders with ``helm.toolkit.fluxcd.io/name`` and
``helm.toolkit.fluxcd.io/namespace``), the runner records a Warning Event on
that HelmRelease carrying the termination message (redacted, bounded).
``kubectl describe helmrelease`` and ``flux events`` then show why.

A Failed run records one, and so does a run that exited 0 (which Flux shows
Ready) with failed components or with a validation that ran no check; an
Interrupted run (exit 143: its Job replaced on upgrade, or the pod evicted) did
not fail the install, and the next run takes over. This is a courtesy on the
way out: it runs after the verdict and run status are captured and the
termination message is written, never changes the exit code,
and a failure here is logged and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aicr_runner import logs
from aicr_runner.kube import KubeApi

__all__ = [
    "COMPONENTS_FAILED_REASON",
    "EVENT_REASON",
    "FLUX_NAMESPACE_LABEL",
    "FLUX_NAME_LABEL",
    "INCONCLUSIVE_REASON",
    "HelmReleaseRef",
    "event_body",
    "report_failure",
]

FLUX_NAME_LABEL = "helm.toolkit.fluxcd.io/name"
FLUX_NAMESPACE_LABEL = "helm.toolkit.fluxcd.io/namespace"
EVENT_REASON = "AicrRunFailed"
#: A run that exited 0 with failed components (--best-effort): Flux shows it Ready.
COMPONENTS_FAILED_REASON = "AicrRunSucceededWithFailures"
#: A run that exited 0 although validation ran no check (no validate.failOnError).
INCONCLUSIVE_REASON = "AicrRunSucceededInconclusive"
#: events.k8s.io bounds a note to 1 KiB; a core/v1 message is kept to the same.
MESSAGE_LIMIT = 1024
_COMPONENT = "aicr-runner"


@dataclass(frozen=True)
class HelmReleaseRef:
    namespace: str
    name: str
    uid: str | None = None


def owning_helmrelease(job_labels: Mapping[str, str]) -> HelmReleaseRef | None:
    name, namespace = job_labels.get(FLUX_NAME_LABEL, ""), job_labels.get(FLUX_NAMESPACE_LABEL, "")
    return HelmReleaseRef(namespace, name) if name and namespace else None


def bounded(message: str) -> str:
    text = logs.redact(message)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def event_body(
    release: HelmReleaseRef,
    message: str,
    *,
    job: str,
    job_namespace: str,
    pod: str,
    now: datetime,
    reason: str = EVENT_REASON,
) -> dict[str, Any]:
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
        "message": bounded(message),
        "source": {"component": _COMPONENT},
        "reportingComponent": _COMPONENT,
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
    log = logs.get_logger()
    try:
        labels = api.get_job_labels(job_namespace, job)
        release = owning_helmrelease(labels or {})
        if release is None:
            return None
        uid = api.get_helmrelease_uid(release.namespace, release.name)
        release = HelmReleaseRef(release.namespace, release.name, uid)
        api.create_event(
            release.namespace,
            event_body(release, message, job=job, job_namespace=job_namespace, pod=pod, now=now(), reason=reason),
        )
    except Exception as exc:  # noqa: BLE001 - a courtesy: the failure itself is already recorded
        log.warning("failure not recorded as an Event on the HelmRelease", job=job, reason=str(exc))
        return None
    log.info("failure recorded as an Event on the HelmRelease", helmrelease=f"{release.namespace}/{release.name}")
    return release
