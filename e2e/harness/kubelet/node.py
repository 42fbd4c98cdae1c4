"""The Kubelet: registers the Node, runs a Job's pods (one at a time, or a background loop)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.harness import podman
from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import KubeError
from e2e.harness.kubelet.jobs import _JobsMixin
from e2e.harness.kubelet.launch import _LaunchMixin
from e2e.harness.kubelet.model import (
    FAKE_AICR_PACKAGE,
    NODE_NAME,
    ContainerRun,
    JobOutcome,
    JobRun,
    PodSpecUnsupported,
    _PodStartFailure,
    _ts,
)
from e2e.harness.kubelet.spec import _SpecMixin
from e2e.harness.kubelet.status import _PodLifecycle, _StatusMixin
from e2e.harness.sandbox import sandbox_mode
from e2e.tools import REPO_ROOT, TOOLS_BIN
from tests.fake_aicr import PACKAGE_DIR as FAKE_AICR_SOURCE
from tests.podman import built_image


class Kubelet(_JobsMixin, _SpecMixin, _LaunchMixin, _StatusMixin):
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
                            "message": "stand-in kubelet (e2e/harness/kubelet)",
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
