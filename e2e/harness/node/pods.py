"""What a test sees of the pods the real node runs: ``Kubelet.run_job`` follows
the Job controller's next pod from creation to its end and returns a ``JobRun``.

Nothing here runs a pod: kube-scheduler binds it and the kubelet runs it. This
class watches the Pod through the API (the final status comes from the watch,
so a pod removed right after it ended is still read), reads the container's log
file on the node (the CRI log the kubelet writes, held open, so its end is read
even when the pod is gone), and ends pods the way users do: ``kubectl delete
pod`` or the Eviction API.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from e2e.harness.kube import KubeError, ObjectWatch
from e2e.harness.node.model import ContainerRun, JobOutcome, JobRun, PodDeletion
from e2e.harness.node.node import RealNode

__all__ = ["Kubelet"]

#: Waiting reasons from which a container never starts without a change from outside.
STUCK_REASONS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
)
#: Pod events that mean the same before any container exists.
STUCK_EVENTS = ("FailedMount", "FailedCreatePodSandBox")


class _LogTail:
    """A container's CRI log file (``<time> <stream> <P|F> <text>``), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._partial = b""
        self.lines: list[tuple[str, str]] = []  # (stream, line) in order

    def read(self) -> list[str]:
        """New complete lines (any stream) since the last call."""
        if self._file is None:
            if not self.path.exists():
                return []
            self._file = self.path.open("rb")
        data = self._partial + self._file.read()
        *complete, self._partial = data.split(b"\n")
        fresh: list[str] = []
        pending: dict[str, str] = {}
        for raw in complete:
            parts = raw.decode(errors="replace").split(" ", 3)
            if len(parts) < 3:
                continue
            stream, tag, text = parts[1], parts[2], parts[3] if len(parts) > 3 else ""
            if tag == "P":
                pending[stream] = pending.get(stream, "") + text
                continue
            line = pending.pop(stream, "") + text
            self.lines.append((stream, line))
            fresh.append(line)
        return fresh

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def text(self, stream: str | None = None) -> str:
        return "".join(f"{line}\n" for s, line in self.lines if stream is None or s == stream)


def _parse_time(stamp: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


class Kubelet:
    """Follows the pods the real node runs (one image's view: ``image``)."""

    def __init__(self, node: RealNode, image: str) -> None:
        self.node = node
        self.plane = node.plane
        self.workdir = node.workdir
        self.image = image

    # -- the image ------------------------------------------------------------
    def image_values(self) -> dict[str, Any]:
        """Chart values that make the release's pods run this image."""
        repository, _, tag = self.image.rpartition(":")
        return {"image": {"repository": repository, "tag": tag}}

    # -- Jobs -----------------------------------------------------------------
    def find_job(self, release: str, namespace: str) -> dict[str, Any]:
        """The newest Job of a Helm release (by Helm's release annotation, else the
        app.kubernetes.io/instance label)."""
        jobs = self.plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        mine = [
            j
            for j in jobs
            if (j["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name") == release
            or (j["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == release
        ]
        if not mine:
            names = ", ".join(j["metadata"]["name"] for j in jobs) or "none"
            raise LookupError(f"no Job of release {release!r} in namespace {namespace!r} (Jobs there: {names})")
        mine.sort(key=lambda j: (j["metadata"]["creationTimestamp"], j["metadata"]["name"]))
        return dict(mine[-1])

    def _job(self, release: str, namespace: str, job_name: str | None) -> dict[str, Any]:
        if job_name:
            return self.plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job_name}")
        return self.find_job(release, namespace)

    def job_status(self, job: Mapping[str, Any]) -> tuple[str, str]:
        """("Complete" | "Failed", reason) once the Job controller has finished the Job, else ("", "")."""
        meta = job["metadata"]
        try:
            current = self.plane.admin.get(f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}")
        except KubeError as exc:
            if exc.status == 404:
                return "Deleted", ""
            raise
        for condition in (current.get("status") or {}).get("conditions") or []:
            if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                return str(condition["type"]), str(condition.get("reason", ""))
        return "", ""

    def next_pod(self, job: Mapping[str, Any], *, timeout: float = 60.0) -> dict[str, Any] | None:
        """The Job's oldest pod not reported yet, once the Job controller created
        it; None when the Job finished instead."""
        meta = job["metadata"]
        selector = f"batch.kubernetes.io/controller-uid={meta['uid']}"
        deadline = time.monotonic() + timeout
        while True:
            pods = self.plane.admin.get(f"/api/v1/namespaces/{meta['namespace']}/pods", labelSelector=selector)
            fresh = [p for p in pods["items"] if p["metadata"]["uid"] not in self.node.reported_pods]
            if fresh:
                fresh.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
                return dict(fresh[0])
            if self.job_status(job)[0]:
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no new pod of Job {meta['namespace']}/{meta['name']} after {timeout:.0f}s")
            time.sleep(0.1)

    def run_job(
        self,
        release: str,
        namespace: str,
        *,
        job_name: str | None = None,
        timeout: float = 600.0,
        terminate_when: Callable[[str], bool] | None = None,
        terminate_after: float | None = None,
        terminate_by: str = "delete",
    ) -> JobRun:
        """Follow the next pod the Job controller creates for the release's Job to its end.

        ``terminate_when`` (a predicate on output lines) or ``terminate_after``
        (seconds after the container started) end the pod through the API:
        ``terminate_by="delete"`` deletes it (``kubectl delete pod``), ``"evict"``
        uses the Eviction API (the API server adds the DisruptionTarget condition).
        The kubelet sends SIGTERM, and SIGKILL after the grace period.
        """
        job = self._job(release, namespace, job_name)
        pod = self.next_pod(job, timeout=min(timeout, 120.0))
        if pod is None:
            status, reason = self.job_status(job)
            raise RuntimeError(f"Job {namespace}/{job['metadata']['name']} is {status} ({reason}): no pod to run")
        return self.follow(
            pod,
            timeout=timeout,
            terminate_when=terminate_when,
            terminate_after=terminate_after,
            terminate_by=terminate_by,
        )

    def run_job_to_completion(
        self, release: str, namespace: str, *, job_name: str | None = None, timeout: float = 900.0
    ) -> JobOutcome:
        """Follow every pod of the Job until the Job controller marks it Complete or
        Failed; "Stuck" when a pod can never start (the Job would wait forever)."""
        job = self._job(release, namespace, job_name)
        deadline = time.monotonic() + timeout
        attempts: list[JobRun] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"Job {namespace}/{job['metadata']['name']} unfinished after {timeout:.0f}s")
            pod = self.next_pod(job, timeout=remaining)
            if pod is None:
                status, reason = self.wait_for_job_end(job, timeout=max(0.0, deadline - time.monotonic()))
                return JobOutcome(status, reason, tuple(attempts))
            run = self.follow(pod, timeout=remaining)
            attempts.append(run)
            if run.exit_code is None and run.deletion is None:
                return JobOutcome("Stuck", run.reason, tuple(attempts))

    def wait_for_job_end(self, job: Mapping[str, Any], *, timeout: float = 120.0) -> tuple[str, str]:
        """The Job's end as the Job controller records it: ("Complete" | "Failed",
        reason) once it has acted on the Job's last pod."""
        deadline = time.monotonic() + timeout
        while not (ended := self.job_status(job))[0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Job controller never finished Job {job['metadata']['name']}")
            time.sleep(0.1)
        return ended

    @contextlib.contextmanager
    def serving(self, namespace: str) -> Iterator[list[JobRun]]:
        """Follow every pod created in ``namespace`` while the block runs (for
        controllers that wait on their own, e.g. Flux's helm-controller). Yields
        the list of finished runs."""
        runs: list[JobRun] = []
        stop = threading.Event()
        failures: list[BaseException] = []

        def loop() -> None:
            try:
                while not stop.is_set():
                    pods = self.plane.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                    fresh = [p for p in pods if p["metadata"]["uid"] not in self.node.reported_pods]
                    if not fresh:
                        stop.wait(0.2)
                        continue
                    fresh.sort(key=lambda p: p["metadata"]["creationTimestamp"])
                    runs.append(self.follow(fresh[0], cancel=stop))
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)

        thread = threading.Thread(target=loop, name=f"follow-{namespace}", daemon=True)
        thread.start()
        try:
            yield runs
        finally:
            stop.set()
            thread.join(timeout=60)
        if failures:
            raise failures[0]

    # -- one pod --------------------------------------------------------------
    def follow(
        self,
        pod: Mapping[str, Any],
        *,
        timeout: float = 600.0,
        terminate_when: Callable[[str], bool] | None = None,
        terminate_after: float | None = None,
        terminate_by: str = "delete",
        cancel: threading.Event | None = None,
    ) -> JobRun:
        """Watch one pod to its end (terminated, stuck, or removed) and read its logs."""
        if terminate_by not in ("delete", "evict"):
            raise ValueError(f"terminate_by={terminate_by!r}: use 'delete' or 'evict'")
        meta = pod["metadata"]
        self.node.reported_pods.add(meta["uid"])
        follower = _Follower(self, dict(pod), terminate_when, terminate_after, terminate_by)
        try:
            return follower.run(time.monotonic() + timeout, cancel)
        finally:
            follower.close()

    def pod_volume(self, pod: Mapping[str, Any], volume: str) -> Path:
        """Where the kubelet keeps the pod's emptyDir ``volume`` on the node."""
        uid = str(pod["metadata"]["uid"])
        return self.node.root_dir / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / volume


class _Follower:
    def __init__(
        self,
        kubelet: Kubelet,
        pod: dict[str, Any],
        terminate_when: Callable[[str], bool] | None,
        terminate_after: float | None,
        terminate_by: str,
    ) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"
        self.terminate_when = terminate_when
        self.terminate_after = terminate_after
        self.terminate_by = terminate_by
        self.end_requested = False
        self.deletion: PodDeletion | None = None
        self.started_at: float | None = None
        self.exited_at: float | None = None
        self.tails: dict[str, _LogTail] = {}
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.watch = ObjectWatch(
            kubelet.plane.admin,
            f"/api/v1/namespaces/{self.namespace}/pods",
            self.name,
            lambda kind, obj: self.events.put((kind, obj)),
            resource_version=str(meta.get("resourceVersion", "")),
        )

    def close(self) -> None:
        self.watch.stop()
        for tail in self.tails.values():
            tail.close()

    def _tail(self, container: str) -> _LogTail:
        if container not in self.tails:
            directory = self.kubelet.node.logs_dir / f"{self.namespace}_{self.name}_{self.uid}" / container
            self.tails[container] = _LogTail(directory / "0.log")
        return self.tails[container]

    def _read_logs(self) -> None:
        names = [c["name"] for c in self.pod["spec"].get("initContainers") or []]
        names += [c["name"] for c in self.pod["spec"]["containers"]]
        for name in names:
            for line in self._tail(name).read():
                if self.terminate_when is not None and not self.end_requested and self.terminate_when(line):
                    self._request_end()

    def _request_end(self) -> None:
        self.end_requested = True
        admin = self.kubelet.plane.admin
        with contextlib.suppress(KubeError):
            if self.terminate_by == "evict":
                admin.create(
                    f"{self.path}/eviction",
                    {
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                    },
                )
            else:
                admin.delete(self.path)

    def _observe(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp") and self.deletion is None:
            disruption = next(
                (c.get("reason", "") for c in status.get("conditions") or [] if c["type"] == "DisruptionTarget"), ""
            )
            self.deletion = PodDeletion(
                grace_seconds=float(meta.get("deletionGracePeriodSeconds") or 0), disruption=disruption
            )
            self.deletion.sigterm_at = time.monotonic()
            if self.started_at is not None:
                self.deletion.sigterm_after = self.deletion.sigterm_at - self.started_at
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state and self.started_at is None:
                self.started_at = time.monotonic()
            if "terminated" in state and self.exited_at is None:
                self.exited_at = time.monotonic()

    def _stuck(self) -> str | None:
        status = self.pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_REASONS:
                return f"{waiting['reason']}: {waiting.get('message', '')}"
        for condition in status.get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return f"FailedScheduling: {condition.get('message', '')}"
        if not any(
            "terminated" in (cs.get("state") or {}) or "running" in (cs.get("state") or {})
            for cs in status.get("containerStatuses") or []
        ):
            events = self.kubelet.plane.admin.get(
                f"/api/v1/namespaces/{self.namespace}/events", fieldSelector=f"involvedObject.uid={self.uid}"
            )["items"]
            for event in events:
                if event.get("reason") in STUCK_EVENTS:
                    return f"{event['reason']}: {event.get('message', '')}"
        return None

    def _ended(self) -> bool:
        status = self.pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            return all("terminated" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or [])
        return False

    def run(self, deadline: float, cancel: threading.Event | None) -> JobRun:
        gone = False
        stuck: str | None = None
        last_stuck_check = 0.0
        while True:
            with contextlib.suppress(queue.Empty):
                kind, obj = self.events.get(timeout=0.1)
                if kind == "DELETED":
                    self._observe(obj)
                    gone = True
                elif obj:
                    self._observe(obj)
            self._read_logs()
            if (
                self.terminate_after is not None
                and not self.end_requested
                and self.started_at is not None
                and time.monotonic() - self.started_at >= self.terminate_after
            ):
                self._request_end()
            if (cancel is not None and cancel.is_set()) and not self.end_requested:
                self._request_end()
            if gone or self._ended():
                break
            if time.monotonic() - last_stuck_check > 1.0 and self.deletion is None:
                last_stuck_check = time.monotonic()
                stuck = self._stuck()
                if stuck is not None:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {self.namespace}/{self.name} still running: {self.pod.get('status')}")
        self._read_logs()
        return self._result(stuck)

    def _result(self, stuck: str | None) -> JobRun:
        status = self.pod.get("status") or {}
        owner: dict[str, Any] = next(
            (o for o in self.pod["metadata"].get("ownerReferences") or [] if o.get("controller")), {}
        )
        runs: list[ContainerRun] = []
        statuses = [(True, cs) for cs in status.get("initContainerStatuses") or []] + [
            (False, cs) for cs in status.get("containerStatuses") or []
        ]
        exit_code: int | None = None
        reason = stuck or ""
        message = ""
        output = ""
        for init, cs in statuses:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is None:
                continue
            tail = self._tail(cs["name"])
            run = ContainerRun(
                name=cs["name"],
                init=init,
                exit_code=int(terminated["exitCode"]),
                reason=str(terminated.get("reason", "")),
                output=tail.text(),
                stdout=tail.text("stdout"),
                stderr=tail.text("stderr"),
                termination_message=str(terminated.get("message", "")),
                seconds=_seconds(terminated),
            )
            runs.append(run)
            if init and run.exit_code == 0:
                continue
            exit_code, output, message = run.exit_code, run.output, run.termination_message
            reason = f"Init:{run.reason}" if init else run.reason
            if not init or run.exit_code != 0:
                break
        if status.get("reason") == "DeadlineExceeded":
            reason = "DeadlineExceeded"
        if self.deletion is not None and self.exited_at is not None and self.deletion.sigterm_at is not None:
            self.deletion.exited_after_sigterm = max(0.0, self.exited_at - self.deletion.sigterm_at)
            self.deletion.sigkill = (
                exit_code == 137 and self.deletion.exited_after_sigterm >= self.deletion.grace_seconds - 1
            )
        if not output and not runs:
            output = "".join(t.text() for t in self.tails.values())
        return JobRun(
            job_name=str(owner.get("name", "")),
            pod_name=self.name,
            exit_code=exit_code,
            output=output,
            termination_message=message,
            reason=reason,
            containers=tuple(runs),
            pod=self.pod,
            deletion=self.deletion,
        )


def _seconds(terminated: Mapping[str, Any]) -> float:
    started, finished = _parse_time(terminated.get("startedAt")), _parse_time(terminated.get("finishedAt"))
    return (finished - started).total_seconds() if started and finished else 0.0
