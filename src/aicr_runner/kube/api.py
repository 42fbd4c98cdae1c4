"""The Kubernetes API, behind a small interface.

ConfigMaps are written with server-side apply: ``PATCH`` with content type ``application/apply-patch+yaml``,
a field manager, and ``force`` so a re-run takes over fields a previous run owned. The request goes through
the client's generic ``call_api``: the generated ``patch_namespaced_config_map`` of the pinned major refuses
a ``_content_type`` override and would otherwise pick a merge-patch type. Bodies are plain dicts so the
client's major version can move without touching this code.

Every write goes through ``ClientKubeApi.request``, which retries what waiting can
fix (408, 429, 5xx, connection errors: an API server restarting or upgrading)
with back-off and jitter, honouring ``Retry-After``, within a wall-time budget
(``net.retry.BudgetedRetry``). Other 4xx answers fail at once with a hint; 409 becomes ``ApiConflictError`` for the
caller to decide (a Lease someone else holds).

The install Lease (``coordination.k8s.io/v1``) is read, created and replaced with
optimistic concurrency (``resourceVersion``), so two runs can never both take it:
the loser gets ``ApiConflictError`` and reads again.

When a run fails, the runner reads its own Job's labels and, if a Flux
HelmRelease rendered it, records a Warning Event on that HelmRelease
(``job_events.report_failure``). These calls take a short budget of their own: the pod is on
its way out and the failure is already recorded.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from aicr_runner import logs
from aicr_runner.errors import ApiConflictError, CaptureError, InterruptedRun, LeaseError, RunnerError
from aicr_runner.kube.configmaps import binary_of, configmap_body, data_of
from aicr_runner.net.deadline import bounded
from aicr_runner.net.retry import (
    RETRYABLE_STATUS,
    BudgetedRetry,
    OutOfBudget,
    RetryNote,
    Transient,
    WaitPolicy,
    parse_retry_after,
)

__all__ = ["FIELD_MANAGER", "ClientKubeApi", "KubeApi", "LeaseRecord", "configmap_body", "lease_body"]

log = logs.get_logger()

FIELD_MANAGER = "aicr-runner"
#: The Lease is the runner's, not Helm's or Argo CD's (neither tracks nor prunes it).
LEASE_LABELS = {"app.kubernetes.io/name": "nvidia-aicr", "app.kubernetes.io/managed-by": "aicr-runner"}
_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

#: What the API server's answer means for the operator, by HTTP status.
_STATUS_HINTS = {
    404: "the namespace does not exist",
    413: "the payload is too large",
    422: "the API server rejected the object",
}
#: For a 403: what the request tried, in the words of the RBAC rule it lacked.
_VERBS = {"GET": "read", "POST": "create", "PUT": "update", "PATCH": "write", "DELETE": "delete"}
_RESOURCES = {
    "configmaps": "ConfigMaps",
    "leases": "Leases",
    "events": "Events",
    "jobs": "Jobs",
    "helmreleases": "HelmReleases",
}
_WAIT_POLICY = WaitPolicy(initial=0.5, maximum=10.0, jitter=0.5)
#: Each call of the failure Event may retry this long: the failure is already
#: recorded, and the pod should not linger on its way out.
_EVENT_BUDGET_SECONDS = 15.0
#: Each Event or annotation on the runner's own Job may retry this long: they are
#: advisory, and the run (or the pod on its way out) must not wait on them.
_JOB_EVENT_BUDGET_SECONDS = 5.0
_JOB = "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
#: One request may take at most this long, wall-clock (within what is left of its
#: budget): a hung or dripping API server must not hold a call past its budget.
_REQUEST_TIMEOUT_SECONDS = 15.0
#: The connect part of it: a black-holed address fails fast enough to retry.
_CONNECT_TIMEOUT_SECONDS = 5.0
#: After SIGTERM a call may take at most this long (the final status, the Lease
#: handed back, the Events): the pod's grace period leaves the runner 15 s once
#: its children are done. Once one such call found the API silent, the rest fail at once.
AFTER_SHUTDOWN_SECONDS = 5.0


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease the runner uses. Times are UTC."""

    name: str
    holder: str = ""
    duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: Empty until the object exists; a replace sends it back (optimistic concurrency).
    resource_version: str = ""


def _micro_time(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if moment else None


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_body(namespace: str, lease: LeaseRecord) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": lease.name,
        "namespace": namespace,
        "labels": dict(LEASE_LABELS),
        "annotations": dict(lease.annotations),
    }
    if lease.resource_version:
        metadata["resourceVersion"] = lease.resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": lease.holder,
            "leaseDurationSeconds": lease.duration_seconds,
            "acquireTime": _micro_time(lease.acquire_time),
            "renewTime": _micro_time(lease.renew_time),
            "leaseTransitions": lease.transitions,
        },
    }


def lease_from_body(body: Mapping[str, Any]) -> LeaseRecord:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return LeaseRecord(
        name=str(metadata.get("name", "")),
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
        annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


class KubeApi(Protocol):
    def get_lease(self, namespace: str, name: str) -> LeaseRecord | None: ...

    def create_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        """Raises ApiConflictError when it already exists."""
        ...

    def replace_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        """Raises ApiConflictError when it changed since ``lease.resource_version``."""
        ...

    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None: ...

    def get_configmap_data(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's ``data``; None when it does not exist."""
        ...

    def get_configmap_payload(self, namespace: str, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]] | None:
        """The ConfigMap's ``data`` and ``binaryData`` (decoded), one read; None when it does not exist."""
        ...

    def get_job_labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The Job's labels; None when it does not exist."""
        ...

    def get_helmrelease_uid(self, namespace: str, name: str) -> str | None:
        """The uid of a Flux HelmRelease (``helm.toolkit.fluxcd.io/v2``); None when absent."""
        ...

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create a core/v1 Event (``job_events.helmrelease_event_body``)."""
        ...

    def get_job_uid(self, namespace: str, name: str) -> str | None:
        """The Job's uid (Events on it name it); None when it does not exist."""
        ...

    def get_job_owner(self, namespace: str, name: str) -> tuple[str, str] | None:
        """The name and uid of the CronJob that owns the Job (its controller); None when none does."""
        ...

    def create_job_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create an ``events.k8s.io/v1`` Event (``job_events.job_event_body``)."""
        ...

    def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the Job's (a JSON merge patch)."""
        ...


def cronjob_owner(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """The CronJob among an object's ownerReferences (its controller): name and uid."""
    for ref in metadata.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "CronJob" and ref.get("controller"):
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return None


class _Call(NamedTuple):
    """One API request, as ``ClientKubeApi.request`` was given it."""

    path: str
    method: str
    path_params: Mapping[str, str]
    query_params: Sequence[tuple[str, str]]
    content_type: str
    body: Any
    response_type: str | None


def _failure(exc: Any, *, what: str, method: str, path: str, error: type[RunnerError], missing_ok: bool) -> None:
    """What an API error (``ApiException``) means: 429 and 5xx are retryable, a 404
    of a read that may miss is None, 409 is ``ApiConflictError``, the rest ``error``
    with a hint."""
    status = exc.status or 0
    if status in RETRYABLE_STATUS:
        headers = exc.headers or {}
        raise Transient(
            f"HTTP {status} {exc.reason}", retry_after=parse_retry_after(headers.get("Retry-After"))
        ) from exc
    if status == 404 and missing_ok:
        return None
    if status == 409:
        raise ApiConflictError(f"{what} failed: HTTP 409 Conflict ({exc.body or exc.reason})") from exc
    hint = _forbidden_hint(method, path) if status == 403 else _STATUS_HINTS.get(status, "")
    said = f"{what} failed: HTTP {status} {exc.reason}" + (f" ({hint})" if hint else "")
    raise error(said, http_status=status) from exc


class _NoAnswer(RunnerError):
    """One request got no complete answer within its wall-clock bound."""


class ClientKubeApi:
    """The official client. In a pod it uses the ServiceAccount; elsewhere kubeconfig.

    Every request is bounded three ways: the client's socket timeouts (connect,
    read), a wall-clock bound on the whole request (a server that drips one byte
    at a time satisfies every read timeout), and ``interrupted``: a request (or a
    retry's wait) that began before SIGTERM stops when it arrives. A request that
    begins after SIGTERM gets at most ``AFTER_SHUTDOWN_SECONDS``.
    """

    def __init__(
        self,
        api_client: Any | None = None,
        *,
        write_budget_seconds: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> None:
        self._api_client = _default_client() if api_client is None else api_client
        self.write_budget_seconds = write_budget_seconds
        self._sleep = sleep
        self._clock = clock
        self._interrupted = interrupted
        #: Set when a request after SIGTERM found the API silent: the rest fail at once.
        self._silent_after_shutdown = ""
        #: Set when a call ran out of its budget; cleared when one gets through.
        self._exhausted = False

    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        body = configmap_body(namespace, name, data=data, binary_data=binary_data, labels=labels)
        self.request(
            f"writing ConfigMap {namespace}/{name}",
            "PATCH",
            "/api/v1/namespaces/{namespace}/configmaps/{name}",
            path_params={"namespace": namespace, "name": name},
            query_params=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
            body=body,
        )

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        path_params: Mapping[str, str],
        query_params: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
        body: Any = None,
        response_type: str | None = None,
        error: type[RunnerError] = CaptureError,
        missing_ok: bool = False,
        budget_seconds: float | None = None,
        budget_words: str = "",
    ) -> Any:
        """One API call, retried within ``write_budget_seconds``; every call goes through here.

        ``what`` starts every error message ("writing ConfigMap ns/name");
        ``error`` is the exception raised when it finally fails (its exit code
        is the run's). ``response_type="object"`` returns the decoded body.
        ``missing_ok``: a 404 returns None (a read of something that may not exist).
        ``budget_seconds`` shortens ``write_budget_seconds`` for this call (an
        advisory call's own short budget); nothing waits longer than the operator's budget.
        ``budget_words`` names the budget in the final error (default: "<n>s API write budget").
        """
        budget, abort = self._budget(what, budget_seconds, error)
        deadline = self._clock() + budget
        call = _Call(path, method, path_params, query_params, content_type, body, response_type)
        failed = functools.partial(_failure, what=what, method=method, path=path, error=error, missing_ok=missing_ok)
        kind = "read" if method == "GET" else "write"
        retry = BudgetedRetry(
            _WAIT_POLICY,
            deadline=deadline,
            clock=self._clock,
            sleep=lambda seconds: self._pause(seconds, abort, what),
            on_retry=functools.partial(_warn_retry, f"Kubernetes API {kind} retry", what),
        )
        try:
            answer = retry.call(lambda: self._attempt(call, deadline, failed, abort, what))
        except OutOfBudget as exc:
            self._exhausted = True
            if abort is _never:  # after SIGTERM: the API did not answer in time; do not wait on it again
                self._silent_after_shutdown = exc.last.reason
            words = budget_words or f"{budget:g}s API {kind} budget"
            said = f"{what} failed: gave up after {exc.attempts} attempt(s) within the {words}"
            raise error(f"{said}; last error: {exc.last.reason}", out_of_budget=True) from exc.last
        self._exhausted = False
        return answer

    def _budget(
        self, what: str, budget_seconds: float | None, error: type[RunnerError]
    ) -> tuple[float, Callable[[], bool]]:
        """The call's budget and what stops it early: SIGTERM, unless it had
        already arrived (then the budget is short, and nothing if the API was
        found silent since). After a call ran out of its budget, until a call
        gets through, each call gets at most one request's time."""
        budget = min(self.write_budget_seconds, budget_seconds or self.write_budget_seconds)
        if self._exhausted:
            # The API is down: each call waiting out its whole budget would make a run
            # take that budget once per call (tens of minutes by default).
            budget = min(budget, _REQUEST_TIMEOUT_SECONDS)
        if not self._interrupted():
            return budget, self._interrupted
        if self._silent_after_shutdown:
            raise error(
                f"{what} failed: not tried, an API call already ran out of time after the shutdown was requested "
                f"({self._silent_after_shutdown})"
            )
        return min(budget, AFTER_SHUTDOWN_SECONDS), _never

    def _pause(self, seconds: float, abort: Callable[[], bool], what: str) -> None:
        """A retry's wait, cut short by SIGTERM."""
        end = self._clock() + seconds
        while (left := end - self._clock()) > 0:
            if abort():
                raise InterruptedRun(f"interrupted: a shutdown was requested during {what}; it was stopped")
            self._sleep(min(left, 0.1))

    def _attempt(
        self, call: _Call, deadline: float, failed: Callable[[Any], Any], abort: Callable[[], bool], what: str
    ) -> Any:
        """One try, bounded by what is left of the budget (socket timeouts and the
        wall clock): no answer or a connection error is retryable; an API error is
        ``failed``'s to sort out."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        limit = max(0.1, min(_REQUEST_TIMEOUT_SECONDS, deadline - self._clock()))
        # The tuple form: the client's REST layer (kubernetes.client.rest) ignores a float timeout.
        timeout = (min(_CONNECT_TIMEOUT_SECONDS, limit), limit)
        try:
            return bounded(
                lambda _cancellation: self._call_api(call, timeout),
                budget_seconds=limit,
                interrupted=abort,
                over_budget=lambda: _NoAnswer(f"no complete answer within {limit:.3g}s"),
                what=what,
            )
        except _NoAnswer as exc:
            raise Transient(exc.message) from exc
        except ApiException as exc:
            return failed(exc)
        except (HTTPError, OSError) as exc:
            raise Transient(f"{type(exc).__name__}: {exc}") from exc

    def _call_api(self, call: _Call, timeout: tuple[float, float]) -> Any:
        return self._api_client.call_api(
            call.path,
            call.method,
            path_params=dict(call.path_params),
            query_params=list(call.query_params),
            header_params={"Content-Type": call.content_type, "Accept": "application/json"},
            body=call.body,
            auth_settings=["BearerToken"],
            # None: read (keeps the pooled connection usable), no model decode.
            response_type=call.response_type,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )

    # -- the install Lease -------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        body = self.request(
            f"reading Lease {namespace}/{name}",
            "GET",
            _LEASES + "/{name}",
            path_params={"namespace": namespace, "name": name},
            response_type="object",
            error=LeaseError,
            missing_ok=True,
        )
        return None if body is None else lease_from_body(body)

    def create_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        body = self.request(
            f"creating Lease {namespace}/{lease.name}",
            "POST",
            _LEASES,
            path_params={"namespace": namespace},
            body=lease_body(namespace, lease),
            response_type="object",
            error=LeaseError,
        )
        return lease_from_body(body or {})

    def replace_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        body = self.request(
            f"updating Lease {namespace}/{lease.name}",
            "PUT",
            _LEASES + "/{name}",
            path_params={"namespace": namespace, "name": lease.name},
            body=lease_body(namespace, lease),
            response_type="object",
            error=LeaseError,
        )
        return lease_from_body(body or {})

    def get_configmap_data(self, namespace: str, name: str) -> Mapping[str, str] | None:
        body = self._read_configmap(namespace, name)
        return None if body is None else data_of(body)

    def get_configmap_payload(self, namespace: str, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]] | None:
        body = self._read_configmap(namespace, name)
        return None if body is None else (data_of(body), binary_of(body, f"ConfigMap {namespace}/{name}"))

    def _read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        body: dict[str, Any] | None = self.request(
            f"reading ConfigMap {namespace}/{name}",
            "GET",
            "/api/v1/namespaces/{namespace}/configmaps/{name}",
            path_params={"namespace": namespace, "name": name},
            response_type="object",
            error=CaptureError,
            missing_ok=True,
        )
        return body

    # -- the failure Event on the delivery tool's object ------------------------------

    def get_job_labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        metadata = self._read_metadata("Job", _JOB, namespace, name)
        if metadata is None:
            return None
        return {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}

    def get_helmrelease_uid(self, namespace: str, name: str) -> str | None:
        path = "/apis/helm.toolkit.fluxcd.io/v2/namespaces/{namespace}/helmreleases/{name}"
        metadata = self._read_metadata("HelmRelease", path, namespace, name)
        return None if metadata is None else str(metadata.get("uid") or "") or None

    def _read_metadata(
        self, kind: str, path: str, namespace: str, name: str, *, budget_seconds: float = _EVENT_BUDGET_SECONDS
    ) -> dict[str, Any] | None:
        """An object's metadata for an Event (None when it does not exist), within
        the Event's short budget."""
        body = self.request(
            f"reading {kind} {namespace}/{name}",
            "GET",
            path,
            path_params={"namespace": namespace, "name": name},
            response_type="object",
            missing_ok=True,
            budget_seconds=budget_seconds,
        )
        return None if body is None else dict(body.get("metadata") or {})

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.request(
            f"creating Event in {namespace}",
            "POST",
            "/api/v1/namespaces/{namespace}/events",
            path_params={"namespace": namespace},
            body=dict(body),
            budget_seconds=_EVENT_BUDGET_SECONDS,
        )

    # -- Events and outcome annotations on the runner's own Job (job_events) ----------

    def get_job_uid(self, namespace: str, name: str) -> str | None:
        metadata = self._read_metadata("Job", _JOB, namespace, name, budget_seconds=_JOB_EVENT_BUDGET_SECONDS)
        return None if metadata is None else str(metadata.get("uid") or "") or None

    def get_job_owner(self, namespace: str, name: str) -> tuple[str, str] | None:
        metadata = self._read_metadata("Job", _JOB, namespace, name, budget_seconds=_JOB_EVENT_BUDGET_SECONDS)
        return cronjob_owner(metadata or {})

    def create_job_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.request(
            f"creating Event in {namespace}",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            path_params={"namespace": namespace},
            body=dict(body),
            budget_seconds=_JOB_EVENT_BUDGET_SECONDS,
        )

    def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.request(
            f"annotating Job {namespace}/{name}",
            "PATCH",
            _JOB,
            path_params={"namespace": namespace, "name": name},
            query_params=[("fieldManager", FIELD_MANAGER)],
            content_type="application/merge-patch+json",
            body={"metadata": {"annotations": dict(annotations)}},
            budget_seconds=_JOB_EVENT_BUDGET_SECONDS,
        )


def _warn_retry(event: str, what: str, note: RetryNote) -> None:
    log.warning(event, what=what, attempt=note.attempt, reason=note.reason, wait=round(note.wait, 3))


def _never() -> bool:
    return False


def _default_client() -> Any:
    """The in-cluster client (the ServiceAccount), else the kubeconfig's."""
    from kubernetes import client, config  # imported lazily: plan never needs it

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as exc:
            raise CaptureError(
                "no Kubernetes credentials: not running in a pod and no usable kubeconfig "
                f"({exc}); use 'aicr-runner plan' for a local dry run"
            ) from exc
    configuration = client.Configuration.get_default_copy()
    # One try per runner attempt: urllib3's own retries (3 by default) would
    # log three lines per failed attempt and spend the write budget unseen.
    configuration.retries = False
    return client.ApiClient(configuration)


def _forbidden_hint(method: str, path: str) -> str:
    """Name the RBAC the ServiceAccount lacks, from the request itself (a 403 on a
    Lease must not send the operator to look at ConfigMap rights)."""
    parts = path.split("/")
    resource = next((part for part in reversed(parts) if part in _RESOURCES), "")
    what = _RESOURCES.get(resource, "this resource")
    return f"the Job's ServiceAccount may not {_VERBS.get(method, method.lower())} {what} in this namespace"
