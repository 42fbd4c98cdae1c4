"""A stand-in kubelet: runs the pods the real Job controller creates.

kube-controller-manager (controllers.py) creates a Job's pods; there is no
scheduler. The stand-in registers the Node ``e2e-node``, and
``Kubelet.run_job(release, namespace)`` finds the Job a Helm release created,
waits for the Job controller's next pod, binds it to the node (the Binding
subresource, as the scheduler would), materialises the pod's volumes (emptyDir,
secret, configMap, projected: serviceAccountToken / configMap / secret /
downwardAPI, downwardAPI), resolves each container's
environment like the kubelet (envFrom, env with $(VAR) expansion, valueFrom
secretKeyRef / configMapKeyRef / fieldRef, the KUBERNETES_SERVICE_* variables),
runs the init containers then the container, collects exit code, output and
termination message, and writes the pod status back to the API server (phase,
each container's ``state.terminated`` with exitCode, reason and message, the
image's ID). It watches the Pod object while the container runs: once
the pod is deleted (by a test, the Eviction API, or the garbage collector after
Helm deleted its Job) it sends SIGTERM, then SIGKILL after the deletion's grace
period, reports the final status and completes the deletion, like a kubelet.
Counting failures, backoffLimit, podFailurePolicy, activeDeadlineSeconds and the
Job's conditions are the real Job controller's.

The container runs (see sandbox.py for the choice):
* "podman": from the image scripts/build-image.sh builds from the Dockerfile
  (e2e/harness/podman.py), the real thing;
* "bwrap" / "rewrite": fallbacks where podman is missing: this checkout stands in
  for the image (the container command ``aicr-runner`` is the venv's script).

What it does not do: pull images, enforce resource limits, restart containers,
or run more than one regular container.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from base64 import b64decode
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.harness import podman
from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import KubeError
from e2e.harness.procs import set_pdeathsig
from e2e.harness.sandbox import Identity, Mount, bwrap_argv, rewrite_paths, sandbox_mode
from e2e.tools import REPO_ROOT, TOOLS_BIN
from tests.fake_aicr import PACKAGE_DIR as FAKE_AICR_SOURCE
from tests.podman import built_image

__all__ = [
    "FAKE_AICR_PACKAGE",
    "FAKE_AICR_PATH",
    "ContainerRun",
    "JobOutcome",
    "JobRun",
    "Kubelet",
    "PodDeletion",
    "PodSpecUnsupported",
    "expand",
]

NODE_NAME = "e2e-node"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Where scenarios put the fake aicr in the image (chart value aicrBinary.path).
FAKE_AICR_PATH = "/usr/local/bin/aicr"
#: podman mode: where every pod finds the fake aicr's package (its launcher runs
#: it with the image's Python), mounted read-only like an image file.
FAKE_AICR_PACKAGE = "/opt/fake-aicr/fake_aicr"
#: The kubelet keeps at most this much of a termination message file...
MAX_TERMINATION_MESSAGE = 4096
#: ...and, under FallbackToLogsOnError, the last 80 lines / 2 KiB of the log.
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


class PodSpecUnsupported(NotImplementedError):
    """The pod uses something this stand-in kubelet does not implement."""


class _PodStartFailure(Exception):
    """The container cannot start (the kubelet would report a waiting reason)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ContainerRun:
    name: str
    init: bool
    exit_code: int | None  # None: the container never started
    reason: str  # Completed, Error, DeadlineExceeded, CreateContainerConfigError...
    output: str  # stdout and stderr, interleaved by line (what `kubectl logs` shows)
    stdout: str
    stderr: str
    termination_message: str
    detail: str = ""  # why it never started (the kubelet's waiting message)
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class PodDeletion:
    """What the kubelet saw of a pod's deletion and did about it."""

    grace_seconds: float  # the deletion's grace period (deletionGracePeriodSeconds)
    disruption: str = ""  # the DisruptionTarget condition's reason, when the API server set one
    sigterm_after: float | None = None  # seconds from the container's start to SIGTERM
    sigterm_at: float | None = None  # when SIGTERM was sent (time.monotonic())
    exited_after_sigterm: float | None = None  # seconds from SIGTERM to the container's exit
    sigkill: bool = False  # the grace period ran out


@dataclass(frozen=True)
class JobRun:
    job_name: str
    pod_name: str
    exit_code: int | None  # the container's; an init container's if that failed first
    output: str
    termination_message: str
    reason: str
    containers: tuple[ContainerRun, ...] = ()
    sandbox: str = ""
    pod: Mapping[str, Any] = field(default_factory=dict)
    deletion: PodDeletion | None = None  # set when the pod was deleted while it ran

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    def container(self, name: str) -> ContainerRun:
        for run in self.containers:
            if run.name == name:
                return run
        raise KeyError(f"no container {name!r} ran in pod {self.pod_name}")

    def describe(self) -> str:
        """A multi-line summary for assertion messages."""
        lines = [
            f"job {self.job_name} pod {self.pod_name}: exit={self.exit_code} reason={self.reason} "
            f"sandbox={self.sandbox}" + (f" deletion={self.deletion}" if self.deletion else "")
        ]
        for run in self.containers:
            lines.append(
                f"--- {'init ' if run.init else ''}container {run.name}: exit={run.exit_code} reason={run.reason}"
            )
            lines.append(run.output.rstrip())
            if run.termination_message:
                lines.append(f"--- termination message:\n{run.termination_message}")
        return "\n".join(lines)


@dataclass(frozen=True)
class JobOutcome:
    """The Job's end, as the real Job controller recorded it, and the pods run."""

    status: str  # the Job's condition: "Complete" or "Failed"; "Stuck": a pod can never start
    reason: str  # the condition's reason ("CompletionsReached", "PodFailurePolicy", "BackoffLimitExceeded",
    # "DeadlineExceeded"...), or the stuck pod's
    attempts: tuple[JobRun, ...]

    @property
    def last(self) -> JobRun:
        return self.attempts[-1]

    def describe(self) -> str:
        head = f"job outcome: {self.status} {self.reason} after {len(self.attempts)} pod(s)"
        return "\n".join([head, *(a.describe() for a in self.attempts)])


# --------------------------------------------------------------------------------------
# $(VAR) expansion, exactly as k8s.io/kubernetes/third_party/forked/golang/expansion


def expand(value: str, *contexts: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` from the first context that has it; ``$$`` escapes; unknown
    references stay as written."""

    def mapping(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return f"$({name})"

    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            rest = value[cursor + 1 :]
            if rest[0] == "$":
                read, is_var, advance = "$", False, 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, is_var, advance = "$(", False, 1
                else:
                    read, is_var, advance = rest[1:close], True, close + 1
            else:
                read, is_var, advance = "$" + rest[0], False, 1
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


# --------------------------------------------------------------------------------------


class Kubelet:
    """Runs the pods of Jobs in the test API server on this machine."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        commands: Mapping[str, str | Path] | None = None,
        image_env: Mapping[str, str] | None = None,
        image_entrypoint: Sequence[str] = ("aicr-runner",),
        image_cmd: Sequence[str] = ("run",),
        image_user: tuple[int, int] = (65532, 65532),
        image_workdir: str = "/work",
        image_dirs: Sequence[str] = ("/work", "/home/aicr"),
        image_init: bool = True,
        image_files: Mapping[str, str | Path] | None = None,
        sandbox: str | None = None,
        image: str | None = None,
    ) -> None:
        self.plane = plane
        self.workdir = workdir
        venv_bin = REPO_ROOT / ".venv" / "bin"
        #: container command -> host program ("the image's" binaries)
        self.commands: dict[str, str] = {"aicr-runner": str(venv_bin / "aicr-runner")}
        self.commands.update({k: str(v) for k, v in (commands or {}).items()})
        # The defaults mirror the Dockerfile: ENV, USER 65532:65532, WORKDIR /work,
        # ENTRYPOINT ["tini", "--", "aicr-runner"], CMD ["run"]; the venv and the
        # pinned tools stand in for /opt/venv and /usr/local/bin.
        self.image_env = dict(
            image_env
            or {
                "PATH": os.pathsep.join(
                    [
                        str(venv_bin),
                        str(TOOLS_BIN),
                        "/usr/local/bin",
                        "/usr/sbin",
                        "/usr/bin",
                        "/sbin",
                        "/bin",
                    ]
                ),
                "HOME": "/home/aicr",
                "TMPDIR": "/tmp",
                "XDG_CACHE_HOME": "/home/aicr/.cache",
                "HELM_CACHE_HOME": "/home/aicr/.cache/helm",
                "HELM_CONFIG_HOME": "/home/aicr/.config/helm",
                "HELM_DATA_HOME": "/home/aicr/.local/share/helm",
                "KUBECACHEDIR": "/home/aicr/.kube/cache",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
                "AICR_RUNNER_WORK_DIR": "/work",
            }
        )
        self.image_entrypoint = list(image_entrypoint)
        self.image_cmd = list(image_cmd)
        self.image_user = image_user
        self.image_workdir = image_workdir
        #: directories the image has (empty, read-only under readOnlyRootFilesystem)
        self.image_dirs = list(image_dirs)
        #: the image's entrypoint runs under an init (tini): the process is PID 2 and
        #: gets SIGTERM even without a handler; False: the process itself is PID 1.
        self.image_init = image_init
        #: container path -> host file or directory the image provides there (read-only),
        #: e.g. {"/usr/local/bin/aicr": fake_aicr_launcher}
        self.image_files = {k: Path(v) for k, v in (image_files or {}).items()}
        self.sandbox = sandbox or sandbox_mode()
        #: host paths the container must reach: the Python runtime of the venv,
        #: and the pinned tools on PATH (.tools may be a link out of the checkout)
        self.expose = [os.path.realpath(sys.base_prefix), os.path.realpath(TOOLS_BIN)]
        #: podman mode: the image (built by scripts/build-image.sh unless given); its
        #: ENV, USER, WORKDIR, ENTRYPOINT and CMD apply, not the image_* stand-ins above.
        self.image = ""
        self.image_id = ""
        if self.sandbox == "podman":
            self.image = image or built_image()
            self.image_id = podman.image_id(self.image)
            # Test tools the scenarios name by host path (FAKE_AICR_ORAS) and the fake
            # aicr's package: read-only, as if the image carried them.
            self.image_files = {
                str(TOOLS_BIN): TOOLS_BIN,
                FAKE_AICR_PACKAGE: FAKE_AICR_SOURCE,
                **self.image_files,
            }
        self.register_node()

    # -- the Node -------------------------------------------------------------
    def register_node(self) -> None:
        """Register this machine as the Node ``e2e-node`` (once; Ready), as a kubelet does."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE_NAME,
                "labels": {
                    "kubernetes.io/hostname": NODE_NAME,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }
        try:
            self.plane.admin.create("/api/v1/nodes", node)
        except KubeError as exc:
            if exc.status != 409:
                raise
        now = _ts(dt.datetime.now(dt.UTC))
        self.plane.admin.merge_patch(
            f"/api/v1/nodes/{NODE_NAME}/status",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "stand-in kubelet (e2e/harness/kubelet.py)",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": NODE_NAME},
                    ],
                    "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                    "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                }
            },
        )

    # -- finding the Job and its pods -----------------------------------------
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
        """("Complete" | "Failed", reason) once the Job controller has finished the
        Job, else ("", "")."""
        meta = job["metadata"]
        current = self.plane.admin.get(f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}")
        for condition in (current.get("status") or {}).get("conditions") or []:
            if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                return str(condition["type"]), str(condition.get("reason", ""))
        return "", ""

    def _job_events(self, job: Mapping[str, Any]) -> str:
        meta = job["metadata"]
        events = self.plane.admin.get(
            f"/api/v1/namespaces/{meta['namespace']}/events", fieldSelector=f"involvedObject.uid={meta['uid']}"
        )["items"]
        return "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events) or "none"

    def _pods_to_run(self, namespace: str, selector: str | None) -> list[dict[str, Any]]:
        """Pods no node has taken yet, oldest first."""
        query = {"fieldSelector": "spec.nodeName="}
        if selector:
            query["labelSelector"] = selector
        pods = self.plane.admin.get(f"/api/v1/namespaces/{namespace}/pods", **query)["items"]
        waiting = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        waiting.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        return waiting

    def _bind(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """Bind the pod to this node (what the scheduler does); None if another
        runner took it first."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        try:
            self.plane.admin.create(
                f"{path}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": meta["name"], "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
                },
            )
        except KubeError as exc:
            if exc.status in (404, 409):
                return None
            raise
        return self.plane.admin.get(path)

    def claim_pod(self, job: Mapping[str, Any], *, timeout: float = 60.0) -> dict[str, Any] | None:
        """Wait for the Job controller's next pod of ``job`` and bind it here.
        None when the Job finished instead."""
        meta = job["metadata"]
        selector = f"batch.kubernetes.io/controller-uid={meta['uid']}"
        deadline = time.monotonic() + timeout
        while True:
            for candidate in self._pods_to_run(meta["namespace"], selector):
                pod = self._bind(candidate)
                if pod is not None:
                    return pod
            if self.job_status(job)[0]:
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Job {meta['namespace']}/{meta['name']}: no pod to run after {timeout:.0f}s "
                    f"(the Job's events: {self._job_events(job)})"
                )
            time.sleep(0.1)

    # -- running Jobs ---------------------------------------------------------
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
        """Run the next pod the Job controller creates for the release's Job.

        ``terminate_when`` (a predicate on output lines) or ``terminate_after``
        (seconds) end the pod through the API: ``terminate_by="delete"`` deletes it
        (what ``kubectl delete pod`` does), ``"evict"`` evicts it (the Eviction API:
        the API server adds the DisruptionTarget condition, then deletes it). The
        kubelet sees the deletion, sends SIGTERM, and SIGKILL after the grace period.
        """
        job = self._job(release, namespace, job_name)
        pod = self.claim_pod(job)
        if pod is None:
            status, reason = self.job_status(job)
            raise RuntimeError(f"Job {namespace}/{job['metadata']['name']} is {status} ({reason}): no pod to run")
        return self.run_pod(
            pod,
            timeout=timeout,
            terminate_when=terminate_when,
            terminate_after=terminate_after,
            terminate_by=terminate_by,
        )

    def run_job_to_completion(
        self,
        release: str,
        namespace: str,
        *,
        job_name: str | None = None,
        timeout: float = 900.0,
    ) -> JobOutcome:
        """Run every pod the Job controller creates until it marks the Job Complete
        or Failed; "Stuck" when a pod can never start (the Job would wait forever)."""
        job = self._job(release, namespace, job_name)
        deadline = time.monotonic() + timeout
        attempts: list[JobRun] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"Job {namespace}/{job['metadata']['name']} unfinished after {timeout:.0f}s")
            pod = self.claim_pod(job, timeout=remaining)
            if pod is None:
                status, reason = self.job_status(job)
                return JobOutcome(status, reason, tuple(attempts))
            run = self.run_pod(pod, timeout=remaining)
            attempts.append(run)
            if run.exit_code is None:
                return JobOutcome("Stuck", run.reason, tuple(attempts))

    @contextlib.contextmanager
    def serving(self, namespace: str) -> Iterator[list[JobRun]]:
        """Run every pod created in ``namespace`` while the block runs, one at a time
        in a background thread (what a kubelet does for a controller that waits on
        its own, e.g. Flux's helm-controller). Yields the list of finished runs."""
        runs: list[JobRun] = []
        stop = threading.Event()
        failures: list[BaseException] = []

        def loop() -> None:
            try:
                while not stop.is_set():
                    pod = next(
                        (bound for p in self._pods_to_run(namespace, None) if (bound := self._bind(p)) is not None),
                        None,
                    )
                    if pod is None:
                        stop.wait(0.2)
                        continue
                    runs.append(self.run_pod(pod, cancel=stop))
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)

        thread = threading.Thread(target=loop, name=f"kubelet-{namespace}", daemon=True)
        thread.start()
        try:
            yield runs
        finally:
            stop.set()
            thread.join(timeout=60)
        if failures:
            raise failures[0]

    # -- the pod --------------------------------------------------------------
    def run_pod(
        self,
        pod: Mapping[str, Any],
        *,
        timeout: float = 600.0,
        terminate_when: Callable[[str], bool] | None = None,
        terminate_after: float | None = None,
        terminate_by: str = "delete",
        cancel: threading.Event | None = None,
    ) -> JobRun:
        """Run a pod bound to this node to its end and report its status."""
        meta = pod["metadata"]
        namespace, pod_name = meta["namespace"], meta["name"]
        owner: Mapping[str, Any] = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
        job_name = str(owner.get("name", ""))
        self._check_supported(pod["spec"])
        if terminate_by not in ("delete", "evict"):
            raise ValueError(f"terminate_by={terminate_by!r}: use 'delete' or 'evict'")

        pod_dir = self.workdir / "pods" / pod_name
        pod_dir.mkdir(parents=True)
        pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod_name}"
        started = dt.datetime.now(dt.UTC)
        self._patch_status(
            pod_path,
            {"phase": "Pending", "startTime": _ts(started), "hostIP": "127.0.0.1", "podIP": "127.0.0.1"},
        )
        runs: list[ContainerRun] = []
        try:
            volumes = self._materialise_volumes(pod, pod_dir)
        except _PodStartFailure as exc:
            self._patch_status(
                pod_path,
                {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodReadyToStartContainers",
                            "status": "False",
                            "reason": exc.reason,
                            "message": exc.message,
                        }
                    ],
                },
            )
            return JobRun(
                job_name,
                pod_name,
                None,
                "",
                "",
                f"{exc.reason}: {exc.message}",
                sandbox=self.sandbox,
                pod=pod,
            )

        deadline = time.monotonic() + timeout
        active = pod["spec"].get("activeDeadlineSeconds")
        if active is not None:
            deadline = min(deadline, time.monotonic() + float(active))
        lifecycle = _PodLifecycle(self.plane, pod_path, terminate_by, cancel)
        exit_code: int | None = None
        reason = ""
        output = ""
        message = ""
        for init, container in [(True, c) for c in pod["spec"].get("initContainers") or []] + [
            (False, c) for c in pod["spec"]["containers"]
        ]:
            if lifecycle.poll() is not None:
                break  # deleted before this container started: it never runs
            self._patch_status(pod_path, {"phase": "Pending" if init else "Running"})
            run = self._run_container(
                pod,
                container,
                init=init,
                volumes=volumes,
                pod_dir=pod_dir,
                deadline=deadline,
                lifecycle=lifecycle,
                terminate_when=None if init else terminate_when,
                terminate_after=None if init else terminate_after,
            )
            runs.append(run)
            exit_code, output, message = run.exit_code, run.output, run.termination_message
            reason = run.reason if not init else f"Init:{run.reason}"
            if run.detail:
                reason = f"{reason}: {run.detail}"
            if run.exit_code != 0:
                break
        else:
            reason = runs[-1].reason if runs else "Completed"

        phase = "Succeeded" if exit_code == 0 else ("Failed" if exit_code is not None else "Pending")
        if lifecycle.deletion is not None and exit_code is None:
            phase = "Failed"  # deleted before it ran: the kubelet fails it
        self._patch_status(pod_path, self._final_status(pod, runs, phase, self.image_id))
        if lifecycle.deletion is not None:
            lifecycle.finish_deletion()
        return JobRun(
            job_name=job_name,
            pod_name=pod_name,
            exit_code=exit_code,
            output=output,
            termination_message=message,
            reason=reason,
            containers=tuple(runs),
            sandbox=self.sandbox,
            pod=pod,
            deletion=lifecycle.deletion,
        )

    @staticmethod
    def _check_supported(spec: Mapping[str, Any]) -> None:
        if len(spec.get("containers") or []) != 1:
            raise PodSpecUnsupported("exactly one regular container is supported")
        for c in spec.get("initContainers") or []:
            if c.get("restartPolicy") == "Always":
                raise PodSpecUnsupported(f"sidecar init container {c['name']!r}")

    def _patch_status(self, pod_path: str, status: Mapping[str, Any]) -> None:
        # A strategic merge, as the kubelet's status manager does: conditions merge
        # by type, so the API server's DisruptionTarget stays next to ours.
        self.plane.admin.request(
            "PATCH",
            f"{pod_path}/status",
            {"status": dict(status)},
            content_type="application/strategic-merge-patch+json",
        )

    @staticmethod
    def _final_status(
        pod: Mapping[str, Any], runs: Sequence[ContainerRun], phase: str, image_id: str = ""
    ) -> dict[str, Any]:
        images = {
            c["name"]: c.get("image", "") for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
        }

        def status(run: ContainerRun) -> dict[str, Any]:
            state: dict[str, Any]
            if run.exit_code is None:
                state = {"waiting": {"reason": run.reason, "message": run.detail}}
            else:
                state = {
                    "terminated": {
                        "exitCode": run.exit_code,
                        "reason": run.reason,
                        **({"message": run.termination_message} if run.termination_message else {}),
                    }
                }
            return {
                "name": run.name,
                "image": images.get(run.name, ""),
                "imageID": image_id,
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": state,
            }

        return {
            "phase": phase,
            "initContainerStatuses": [status(r) for r in runs if r.init],
            "containerStatuses": [status(r) for r in runs if not r.init],
        }

    # -- volumes --------------------------------------------------------------
    def _materialise_volumes(self, pod: Mapping[str, Any], pod_dir: Path) -> dict[str, tuple[Path, bool]]:
        """volume name -> (host directory, read-only by kind)."""
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        out: dict[str, tuple[Path, bool]] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            path = pod_dir / "volumes" / name
            path.mkdir(parents=True)
            if "emptyDir" in volume:
                path.chmod(0o777)  # the kubelet creates emptyDirs world-writable
                out[name] = (path, False)
                self._own(path, fs_group, read_only=False)
                continue
            files: dict[str, tuple[bytes, int]]
            if "secret" in volume:
                src = volume["secret"]
                files = self._source_files(pod, "secret", src["secretName"], src, src.get("defaultMode", 0o644))
            elif "configMap" in volume:
                src = volume["configMap"]
                files = self._source_files(pod, "configMap", src["name"], src, src.get("defaultMode", 0o644))
            elif "projected" in volume:
                files = self._projected_files(pod, volume["projected"])
            elif "downwardAPI" in volume:
                src = volume["downwardAPI"]
                files = self._downward_files(pod, src.get("items") or [], src.get("defaultMode", 0o644))
            else:
                kind = next(k for k in volume if k != "name")
                raise PodSpecUnsupported(f"volume {name!r} of type {kind}")
            _atomic_write(path, files)
            self._own(path, fs_group, read_only=True)
            out[name] = (path, True)
        return out

    @staticmethod
    def _own(path: Path, fs_group: int | None, *, read_only: bool) -> None:
        """What the kubelet's SetVolumeOwnership does for an fsGroup."""
        if fs_group is None or os.geteuid() != 0:
            return
        mask = 0o440 if read_only else 0o660
        for root, dirs, files in os.walk(path):
            for entry in [root, *[os.path.join(root, f) for f in files + dirs]]:
                if os.path.islink(entry):
                    continue
                os.chown(entry, 0, fs_group)
                mode = os.stat(entry).st_mode & 0o7777
                extra = mask | (0o2110 if os.path.isdir(entry) else 0)
                os.chmod(entry, mode | extra)

    def _get_object(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        plural = "secrets" if kind == "secret" else "configmaps"
        try:
            return self.plane.admin.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def _data(kind: str, obj: Mapping[str, Any]) -> dict[str, bytes]:
        if kind == "secret":
            return {k: b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return data

    def _source_files(
        self, pod: Mapping[str, Any], kind: str, name: str, src: Mapping[str, Any], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        obj = self._get_object(pod["metadata"]["namespace"], kind, name)
        if obj is None:
            if src.get("optional"):
                return {}
            raise _PodStartFailure("FailedMount", f'{kind} "{name}" not found')
        data = self._data(kind, obj)
        items = src.get("items")
        if not items:
            return {k: (v, default_mode) for k, v in data.items()}
        files = {}
        for item in items:
            if item["key"] not in data:
                if src.get("optional"):
                    continue
                raise _PodStartFailure("FailedMount", f'{kind} "{name}": key "{item["key"]}" not found')
            files[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
        return files

    def _projected_files(self, pod: Mapping[str, Any], projected: Mapping[str, Any]) -> dict[str, tuple[bytes, int]]:
        default_mode = projected.get("defaultMode", 0o644)
        files: dict[str, tuple[bytes, int]] = {}
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = self._pod_token(
                    pod,
                    sat.get("expirationSeconds", 3600),
                    [sat["audience"]] if sat.get("audience") else None,
                )
                files[sat["path"]] = (token.encode(), default_mode)
            elif "secret" in source or "configMap" in source:
                kind = "secret" if "secret" in source else "configMap"
                src = source[kind]
                files.update(self._source_files(pod, kind, src["name"], src, default_mode))
            elif "downwardAPI" in source:
                files.update(self._downward_files(pod, source["downwardAPI"].get("items") or [], default_mode))
            else:
                raise PodSpecUnsupported(f"projected source {next(iter(source))}")
        return files

    def _downward_files(
        self, pod: Mapping[str, Any], items: Sequence[Mapping[str, Any]], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        files = {}
        for item in items:
            if "fieldRef" not in item:
                raise PodSpecUnsupported("downwardAPI resourceFieldRef")
            value = _field_value(pod, item["fieldRef"]["fieldPath"], volume=True)
            files[item["path"]] = (value.encode(), item.get("mode", default_mode))
        return files

    def _pod_token(self, pod: Mapping[str, Any], seconds: int, audiences: list[str] | None) -> str:
        """A token bound to the Pod object, like the kubelet requests."""
        meta = pod["metadata"]
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if audiences:
            spec["audiences"] = audiences
        sa = pod["spec"].get("serviceAccountName") or "default"
        review = self.plane.admin.create(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(review["status"]["token"])

    # -- environment ----------------------------------------------------------
    def service_env(self) -> dict[str, str]:
        """The variables every container gets for the ``kubernetes`` Service."""
        host, port = self.plane.host, str(self.plane.port)
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
        }

    def container_env(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet computes it (image env not included)."""
        namespace = pod["metadata"]["namespace"]
        service = self.service_env()
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind = "configMap" if "configMapRef" in source else "secret"
            ref = source["configMapRef" if kind == "configMap" else "secretRef"]
            obj = self._get_object(namespace, kind, ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise _PodStartFailure("CreateContainerConfigError", f'{kind} "{ref["name"]}" not found')
            for key, value in self._data(kind, obj).items():
                env[source.get("prefix", "") + key] = value.decode()
        for var in container.get("env") or []:
            name = var["name"]
            if "valueFrom" not in var:
                env[name] = expand(var.get("value", ""), env, service)
                continue
            value_from = var["valueFrom"]
            if "fieldRef" in value_from:
                env[name] = _field_value(pod, value_from["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in value_from or "configMapKeyRef" in value_from:
                kind = "secret" if "secretKeyRef" in value_from else "configMap"
                ref = value_from["secretKeyRef" if kind == "secret" else "configMapKeyRef"]
                obj = self._get_object(namespace, kind, ref["name"])
                data = self._data(kind, obj) if obj is not None else None
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        continue
                    what = (
                        f'{kind} "{ref["name"]}" not found'
                        if data is None
                        else (f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
                    )
                    raise _PodStartFailure("CreateContainerConfigError", what)
                env[name] = data[ref["key"]].decode()
            else:
                raise PodSpecUnsupported(f"env {name}: valueFrom {next(iter(value_from))}")
        for key, service_value in service.items():
            env.setdefault(key, service_value)
        return env

    # -- running a container --------------------------------------------------
    def _identity(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[Identity, bool]:
        psc = pod["spec"].get("securityContext") or {}
        csc = container.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser", self.image_user[0]))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", self.image_user[1]))
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot", False))
        if non_root and uid == 0:
            raise _PodStartFailure(
                "CreateContainerConfigError", "container has runAsNonRoot and image will run as root"
            )
        groups = [gid]
        for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])]:
            if g is not None and g not in groups:
                groups.append(g)
        return Identity(int(uid), int(gid), tuple(int(g) for g in groups)), bool(csc.get("readOnlyRootFilesystem"))

    def _run_container(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        init: bool,
        volumes: Mapping[str, tuple[Path, bool]],
        pod_dir: Path,
        deadline: float,
        lifecycle: _PodLifecycle,
        terminate_when: Callable[[str], bool] | None,
        terminate_after: float | None,
    ) -> ContainerRun:
        name = container["name"]
        try:
            env = self.container_env(pod, container)
            identity, read_only_root = self._identity(pod, container)
        except _PodStartFailure as exc:
            return ContainerRun(name, init, None, exc.reason, "", "", "", "", detail=exc.message)
        # Kubernetes: command replaces ENTRYPOINT (and drops CMD); args replaces CMD.
        if container.get("command"):
            argv = [*container["command"], *(container.get("args") or [])]
        else:
            argv = [*self.image_entrypoint, *(container.get("args") or self.image_cmd)]
        argv = [expand(a, env) for a in argv]
        argv[0] = self.commands.get(argv[0], argv[0])
        cwd = container.get("workingDir") or self.image_workdir
        full_env = {**self.image_env, **env, "HOSTNAME": pod["metadata"]["name"]}
        term_file = pod_dir / f"{name}.termination-log"
        term_file.touch()
        term_file.chmod(0o666)
        mounts = [Mount(path, source) for path, source in self.image_files.items()]
        mounts += self._mounts(container, volumes, term_file)
        if self.sandbox != "podman":  # the checkout standing in for the image needs these
            mounts += self._image_paths_under_volumes(mounts)
            mounts += self._image_dirs(mounts, pod_dir)

        started = time.monotonic()
        kill_container: Callable[[str], None] | None = None
        if self.sandbox == "podman":
            container_name = f"{pod['metadata']['name']}-{name}"
            proc = self._start_in_podman(
                pod,
                container,
                env=env,
                identity=identity,
                mounts=mounts,
                container_name=container_name,
                pod_dir=pod_dir,
            )

            def container_pid() -> int | None:
                return None

            def kill_container(signal_name: str) -> None:
                podman.kill(container_name, signal_name)
        elif self.sandbox == "bwrap":
            read_fd, info_fd = os.pipe()
            cmd = bwrap_argv(
                argv,
                mounts,
                identity=identity,
                hostname=pod["metadata"]["name"][:63],
                cwd=cwd,
                read_only_root=read_only_root,
                expose=self.expose,
                info_fd=info_fd,
                as_pid_1=not self.image_init,
            )
            try:
                proc = _spawn(cmd, full_env, "/", pass_fds=(info_fd,))
            finally:
                os.close(info_fd)
            sandbox_pid = _read_child_pid(read_fd, proc)
            os.close(read_fd)

            def container_pid() -> int | None:
                if sandbox_pid is None:
                    return None
                return sandbox_pid if not self.image_init else _first_child(sandbox_pid)
        else:
            mapping = {m.target: str(m.source) for m in mounts if m.source is not None}
            full_env = {k: rewrite_paths(v, mapping) for k, v in full_env.items()}
            full_env.update(self._rewrite_extra_env(env, mounts, term_file, pod_dir / f"{name}.kubeconfig"))
            cmd = [rewrite_paths(a, mapping) for a in argv]
            host_cwd = rewrite_paths(cwd, mapping)
            proc = _spawn(cmd, full_env, host_cwd if os.path.isdir(host_cwd) else str(pod_dir))

            def container_pid() -> int | None:
                return proc.pid

        watch = _Watch(proc, container_pid, pod_dir / f"{name}.log", terminate_when, kill_container=kill_container)
        reason_override = watch.wait(
            deadline=deadline,
            terminate_at=None if terminate_after is None else started + terminate_after,
            grace=float(pod["spec"].get("terminationGracePeriodSeconds", 30)),
            lifecycle=lifecycle,
            started=started,
        )
        if self.sandbox == "podman" and reason_override:
            podman.remove(container_name)  # --rm does not cover a container podman lost track of
        code = proc.returncode
        if code < 0:
            code = 128 - code  # killed by a signal, reported like a shell / the kubelet
        output = "".join(watch.merged)

        message = term_file.read_bytes()[:MAX_TERMINATION_MESSAGE].decode(errors="replace")
        policy = container.get("terminationMessagePolicy", "File")
        if not message and code != 0 and policy == "FallbackToLogsOnError":
            tail = "".join(watch.merged[-FALLBACK_LOG_LINES:]).encode()[-FALLBACK_LOG_BYTES:]
            message = tail.decode(errors="replace")
        reason = "Completed" if code == 0 else "Error"
        if reason_override == "DeadlineExceeded":
            reason = reason_override
        return ContainerRun(
            name=name,
            init=init,
            exit_code=code,
            reason=reason,
            output=output,
            stdout="".join(watch.streams["stdout"]),
            stderr="".join(watch.streams["stderr"]),
            termination_message=message,
            argv=tuple(argv),
            env=env,
            seconds=time.monotonic() - started,
        )

    def _start_in_podman(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        env: Mapping[str, str],
        identity: Identity,
        mounts: Sequence[Mount],
        container_name: str,
        pod_dir: Path,
    ) -> subprocess.Popen[bytes]:
        """``podman run`` of the container from the built image (see podman.py)."""
        spec = podman.ContainerSpec(
            image=self.image,
            name=container_name,
            hostname=pod["metadata"]["name"][:63],
            identity=identity,
            security_context=container.get("securityContext") or {},
            mounts=mounts,
            env={**env, "HOSTNAME": pod["metadata"]["name"]},
            working_dir=container.get("workingDir"),
            command=[expand(a, env) for a in container["command"]] if container.get("command") else None,
            args=[expand(a, env) for a in container["args"]] if container.get("args") else None,
        )
        try:
            cmd, inherited = podman.run_argv(spec)
        except podman.PodSpecNotRunnable as exc:
            raise PodSpecUnsupported(str(exc)) from exc
        return _spawn(cmd, {**os.environ, **inherited}, str(pod_dir))

    def _image_dirs(self, mounts: Sequence[Mount], pod_dir: Path) -> list[Mount]:
        """Image directories the host lacks: an empty read-only directory there."""
        extra = []
        for i, path in enumerate(self.image_dirs):
            if os.path.lexists(path) or any(m.target == path for m in mounts):
                continue
            empty = pod_dir / "image-dirs" / str(i)
            empty.mkdir(parents=True, exist_ok=True)
            empty.chmod(0o755)
            extra.append(Mount(path, empty))
        return extra

    def _image_paths_under_volumes(self, mounts: Sequence[Mount]) -> list[Mount]:
        """The "image" here is this checkout and its Python. When a volume is mounted
        over a directory that holds them (the chart mounts an emptyDir at /work; a
        checkout may live under /work), bind them back on top, read-only, so the
        program still starts. The volume then shows one extra directory."""
        needed = [str(REPO_ROOT), *self.expose]
        extra: list[Mount] = []
        for path in needed:
            for mount in mounts:
                if mount.target == path:
                    raise PodSpecUnsupported(f"a volume is mounted at {path}, which holds the image's files")
                if path.startswith(mount.target.rstrip("/") + "/"):
                    extra.append(Mount(path, Path(path)))
                    break
        return extra

    def _rewrite_extra_env(
        self, env: Mapping[str, str], mounts: Sequence[Mount], term_file: Path, kubeconfig: Path
    ) -> dict[str, str]:
        """Without a sandbox, paths compiled into programs cannot be redirected; give
        the process what it needs to find them another way (see e2e/README.md)."""
        extra: dict[str, str] = {}
        sa = next((m for m in mounts if m.target == SERVICE_ACCOUNT_DIR and m.source), None)
        if sa is not None and sa.source is not None and "KUBECONFIG" not in env:
            token = (sa.source / "token").read_text()
            extra["KUBECONFIG"] = str(self.plane.write_kubeconfig(kubeconfig, token=token))
        if "AICR_RUNNER_TERMINATION_MESSAGE_PATH" not in env:  # the runtime's own setting
            extra["AICR_RUNNER_TERMINATION_MESSAGE_PATH"] = str(term_file)
        return extra

    @staticmethod
    def _mounts(container: Mapping[str, Any], volumes: Mapping[str, tuple[Path, bool]], term_file: Path) -> list[Mount]:
        term_path = container.get("terminationMessagePath") or "/dev/termination-log"
        mounts = [Mount(term_path, term_file, writable=True)]
        for vm in container.get("volumeMounts") or []:
            source, kind_ro = volumes[vm["name"]]
            if vm.get("subPath"):
                source = source / vm["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append(Mount(vm["mountPath"], source, writable=not (kind_ro or vm.get("readOnly"))))
        return mounts


def _spawn(
    cmd: Sequence[str], env: Mapping[str, str], cwd: str, *, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(cmd),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        start_new_session=True,
        preexec_fn=set_pdeathsig,  # noqa: PLW1509 - run from the main thread
    )


class _Watch:
    """Collects a container's output line by line and delivers SIGTERM/SIGKILL."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        container_pid: Callable[[], int | None],
        log_path: Path,
        terminate_when: Callable[[str], bool] | None,
        *,
        kill_container: Callable[[str], None] | None = None,
    ) -> None:
        self.proc = proc
        self._container_pid = container_pid
        #: signals the container through its runtime (podman) instead of by PID
        self._kill_container = kill_container
        self._killed = False
        self.merged: list[str] = []
        self.streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._lock = threading.Lock()
        self._terminate_when = terminate_when
        self._sigterm = threading.Event()
        self._log = log_path.open("a")
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump(self, stream: Any, key: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            with self._lock:
                self.merged.append(line)
                self.streams[key].append(line)
                self._log.write(line)
                self._log.flush()
            if self._terminate_when is not None and not self._sigterm.is_set() and self._terminate_when(line):
                self._sigterm.set()
        stream.close()

    def wait(
        self,
        *,
        deadline: float,
        terminate_at: float | None,
        grace: float,
        lifecycle: _PodLifecycle,
        started: float,
    ) -> str:
        """Wait for the exit; returns "DeadlineExceeded" (the pod's
        activeDeadlineSeconds or the harness timeout), "Deleted" or ""."""
        reason = ""
        end_requested = False
        term_sent_at: float | None = None
        while self.proc.poll() is None:
            now = time.monotonic()
            if not end_requested and (self._sigterm.is_set() or (terminate_at is not None and now >= terminate_at)):
                lifecycle.request_end()
                end_requested = True
            if lifecycle.cancelled:
                self._kill()
            elif term_sent_at is None:
                if now >= deadline:
                    reason = "DeadlineExceeded"
                elif (deletion := lifecycle.poll()) is not None:
                    reason, grace = "Deleted", deletion.grace_seconds
                    deletion.sigterm_after, deletion.sigterm_at = now - started, now
                if reason:  # like the kubelet: SIGTERM to the container's process only
                    self._terminate()
                    term_sent_at = now
            elif now - term_sent_at >= grace:
                if lifecycle.deletion is not None:
                    lifecycle.deletion.sigkill = True
                self._kill()
            time.sleep(0.02)
        if term_sent_at is not None and lifecycle.deletion is not None:
            lifecycle.deletion.exited_after_sigterm = time.monotonic() - term_sent_at
        for t in self._threads:
            t.join(timeout=10)
        self._log.close()
        return reason

    def _terminate(self) -> None:
        if self._kill_container is not None:
            self._kill_container("TERM")
            return
        pid = self._container_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _kill(self) -> None:
        if self._kill_container is not None and not self._killed:
            self._killed = True  # once: podman kill is a process of its own
            self._kill_container("KILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class _PodLifecycle:
    """The Pod object while its containers run: ends it through the API when a
    test asks, and notices its deletion (polled: one GET every POLL seconds)."""

    POLL = 0.2

    def __init__(self, plane: ControlPlane, pod_path: str, end_by: str, cancel: threading.Event | None) -> None:
        self.plane = plane
        self.pod_path = pod_path
        self.end_by = end_by
        self._cancel = cancel
        self._next_poll = 0.0
        self.deletion: PodDeletion | None = None

    @property
    def cancelled(self) -> bool:
        """The harness is shutting down: kill without a grace period."""
        return self._cancel is not None and self._cancel.is_set()

    def request_end(self) -> None:
        """Delete the pod (its own grace period) or evict it, through the API."""
        if self.end_by == "evict":
            name = self.pod_path.rsplit("/", 1)[1]
            self.plane.admin.create(
                f"{self.pod_path}/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}},
            )
        else:
            self.plane.admin.delete(self.pod_path)

    def poll(self) -> PodDeletion | None:
        """The deletion, once the Pod object carries a deletionTimestamp."""
        if self.deletion is not None:
            return self.deletion
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + self.POLL
        try:
            pod = self.plane.admin.get(self.pod_path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            self.deletion = PodDeletion(grace_seconds=0.0)
            return self.deletion
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return None
        disruption = next(
            (
                str(c.get("reason", ""))
                for c in (pod.get("status") or {}).get("conditions") or []
                if c["type"] == "DisruptionTarget" and c["status"] == "True"
            ),
            "",
        )
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        self.deletion = PodDeletion(grace_seconds=grace, disruption=disruption)
        return self.deletion

    def finish_deletion(self) -> None:
        """The containers are gone: remove the Pod object (grace 0), as the kubelet
        does; finalizers (the Job controller's) keep it until they are lifted."""
        with contextlib.suppress(KubeError):
            self.plane.admin.request("DELETE", self.pod_path, {"gracePeriodSeconds": 0})


def _read_child_pid(fd: int, proc: subprocess.Popen[bytes]) -> int | None:
    """bwrap --info-fd reports the sandboxed process's PID in our namespace."""
    data = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])
        elif proc.poll() is not None:
            break
    return None


def _first_child(pid: int) -> int | None:
    """The oldest child of ``pid`` (the process under the sandbox's init)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat_line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat_line.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            children.append((int(fields[19]), int(entry)))  # starttime
    return min(children)[1] if children else None


def _field_value(pod: Mapping[str, Any], path: str, *, volume: bool = False) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": NODE_NAME,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    for kind in ("labels", "annotations"):
        prefix = f"metadata.{kind}"
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(prefix) + 2 : -2], ""))
        if path == prefix and volume:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(kind) or {}).items()))
    raise PodSpecUnsupported(f"fieldRef {path}")


def _ts(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _atomic_write(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> None:
    """The kubelet's AtomicWriter layout: files in a timestamped directory, ``..data``
    pointing at it, and a top-level symlink per first path component."""
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = directory / stamp
    payload.mkdir(mode=0o755)
    payload.chmod(0o755)
    tops: set[str] = set()
    for rel, (content, mode) in files.items():
        target = payload / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
        tops.add(rel.split("/", 1)[0])
    (directory / "..data").symlink_to(stamp)
    for top in sorted(tops):
        (directory / top).symlink_to(f"..data/{top}")
    directory.chmod(0o1777)  # the kubelet's volume tmpfs: drwxrwxrwt
