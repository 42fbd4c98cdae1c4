"""The e2e node: containerd, a real kubelet and a real kube-scheduler, built from
the same Kubernetes module and version as the API server (tools/versions.env).

``start_node(plane, host, workdir)`` brings it up and returns once the Node is
Ready and untainted (the node-lifecycle controller lifted
``node.kubernetes.io/not-ready``): the readiness the scheduler itself waits for.
``RealNode.stop()`` stops the processes (the containers with containerd), unmounts
the kubelet's volumes and removes its cgroups; the host's own changes are undone
by ``HostNetwork.teardown()`` (the cgroup root again, should the node have failed
to stop).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import KubeError
from e2e.harness.node.containerd import Containerd, start_containerd
from e2e.harness.node.host import HostNetwork, HostSetupError, IsolationCheck
from e2e.harness.node.images import write_pause_archive
from e2e.harness.procs import ManagedProcess, free_port
from e2e.harness.tools import tool

__all__ = ["NODE_NAME", "PAUSE_IMAGE", "RealNode", "start_node"]

NODE_NAME = "e2e-node"
PAUSE_IMAGE = "localhost/aicr-e2e-pause:1"


@dataclass
class RealNode:
    plane: ControlPlane
    host: HostNetwork
    workdir: Path
    runtime: Containerd
    processes: list[ManagedProcess] = field(default_factory=list)
    #: seconds from the first process started to the Node Ready and untainted
    startup_seconds: float = 0.0
    #: UIDs of the pods a ``Kubelet`` has followed (``run_job`` takes the Job's next one)
    reported_pods: set[str] = field(default_factory=set)
    #: the slot's rules proved from this host's network namespace, before any pod ran
    isolation: IsolationCheck | None = None

    @property
    def name(self) -> str:
        return NODE_NAME

    @property
    def root_dir(self) -> Path:
        """The kubelet's root: pods' volumes are under ``pods/<uid>/volumes``."""
        return self.workdir / "kubelet"

    @property
    def logs_dir(self) -> Path:
        """Container logs, ``<namespace>_<pod>_<uid>/<container>/<restart>.log`` (CRI format)."""
        return self.workdir / "pod-logs"

    def process(self, name: str) -> ManagedProcess:
        return next(p for p in self.processes if p.name == name)

    def restart_kubelet(self, while_down: Callable[[], None] = lambda: None, *, timeout: float = 120.0) -> float:
        """Stop the kubelet (SIGTERM, as ``systemctl restart kubelet`` does: the
        containers run on under containerd), call ``while_down``, start it again
        with the same flags and return once the new kubelet has reported the Node
        Ready (a heartbeat later than its start). Returns the seconds from the stop
        to that heartbeat. Call from the main thread (the new process dies with
        the thread that started it)."""
        old = self.process("kubelet")
        stopped = time.monotonic()
        old.stop()
        while_down()
        started = dt.datetime.now(dt.UTC)
        self.processes[self.processes.index(old)] = ManagedProcess(old.name, old.argv, old.log_path)
        self.wait_ready_since(started, timeout=timeout)
        return time.monotonic() - stopped

    def wait_ready_since(self, since: dt.datetime, *, timeout: float = 120.0) -> None:
        """Until the kubelet has reported the Node Ready, schedulable, by a
        heartbeat later than ``since`` (after a fault: the node is back)."""
        self.process("kubelet").wait_ready(
            lambda: _ready_since(self.plane, since),
            timeout=timeout,
            what=f"a Ready heartbeat of the node after {since.isoformat()}",
            interval=0.1,
            tail_lines=60,
        )

    def stop(self) -> None:
        """Stop the scheduler, the kubelet and containerd, then clean what the
        kubelet left on the host (mounts, cgroups)."""
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        self.runtime.stop()
        _unmount_under(self.workdir)
        self.host.remove_cgroup_root()


def _unmount_under(directory: Path) -> None:
    prefix = str(directory.resolve())
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def _kubelet_config(node_dir: Path, host: HostNetwork, plane: ControlPlane, runtime: Containerd) -> tuple[Path, int]:
    assert plane.ca is not None
    serving_cert, serving_key = plane.ca.serving([host.gateway, NODE_NAME]).write(node_dir, "kubelet-serving")
    port = free_port()
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The machine has hybrid cgroups (v1 controllers): from 1.35 the kubelet
        # refuses them unless told to only warn.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": host.cgroup_root,
        "failSwapOn": False,
        "address": host.gateway,
        "port": port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "readOnlyPort": 0,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(plane.ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": runtime.endpoint,
        "podLogsDir": str(node_dir / "pod-logs"),
        # A whole deploy's output in one file: tests read it after the pod is gone.
        "containerLogMaxSize": "1Gi",
        "serializeImagePulls": False,
        # The test images are imported, not pulled: never garbage-collect them, and
        # never evict for a disk the other tests fill.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "staticPodPath": "",
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "shutdownGracePeriod": "0s",
    }
    path = node_dir / "kubelet-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def _bind_node_role(plane: ControlPlane) -> None:
    """The kubelet's identity gets the ``system:node`` ClusterRole (RBAC only: a
    test cluster needs no Node authorizer)."""
    with contextlib.suppress(KubeError):
        plane.admin.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "e2e-node"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{NODE_NAME}"}
                ],
            },
        )


def _node_schedulable(plane: ControlPlane) -> bool | None:
    node = plane.admin.get(f"/api/v1/nodes/{NODE_NAME}")
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions") or []
    )
    tainted = any(t.get("key", "").startswith("node.kubernetes.io/") for t in node["spec"].get("taints") or [])
    return True if ready and not tainted else None


def _ready_since(plane: ControlPlane, since: dt.datetime) -> bool | None:
    """The Node is Ready and schedulable, by a heartbeat later than ``since``."""
    node = plane.admin.get(f"/api/v1/nodes/{NODE_NAME}")
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            beat = dt.datetime.fromisoformat(condition["lastHeartbeatTime"].replace("Z", "+00:00"))
            return True if beat > since and _node_schedulable(plane) else None
    return None


def start_node(plane: ControlPlane, host: HostNetwork, workdir: Path, *, timeout: float = 120.0) -> RealNode:
    if plane.service_cidr != host.service_cidr:  # before any host change
        raise HostSetupError(
            f"the API server's Service range {plane.service_cidr} is not slot {host.slot}'s {host.service_cidr}:"
            " start the control plane with service_cidr=host.service_cidr"
        )
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    host.record_sysctls()
    host.share_root_mount()
    host.remove_cgroup_root()  # a crashed session's leftover
    host.make_cgroup_root()
    host.route_service(plane.port)
    isolation = host.check_isolation(plane.ca_file)  # before any pod, hostNetwork ones included
    pause = write_pause_archive(workdir / "pause.tar", tool("pause"), PAUSE_IMAGE)
    runtime = start_containerd(
        workdir / "containerd",
        sandbox_image=PAUSE_IMAGE,
        bridge=host.bridge,
        subnet=host.subnet,
        gateway=host.gateway,
    )
    node = RealNode(plane, host, workdir, runtime, isolation=isolation)
    try:
        runtime.ctr("images", "import", str(pause))
        _bind_node_role(plane)
        config, _ = _kubelet_config(workdir, host, plane, runtime)
        kubeconfig = plane.cert_kubeconfig(workdir / "kubelet.kubeconfig", f"system:node:{NODE_NAME}", ["system:nodes"])
        node.processes.append(
            ManagedProcess(
                "kubelet",
                [
                    tool("kubelet"),
                    f"--config={config}",
                    f"--kubeconfig={kubeconfig}",
                    f"--root-dir={node.root_dir}",
                    f"--hostname-override={NODE_NAME}",
                    f"--node-ip={host.gateway}",
                    "--v=2",
                ],
                workdir / "kubelet.log",
            )
        )
        scheduler_kubeconfig = plane.cert_kubeconfig(workdir / "kube-scheduler.kubeconfig", "system:kube-scheduler")
        node.processes.append(
            ManagedProcess(
                "kube-scheduler",
                [
                    tool("kube-scheduler"),
                    f"--kubeconfig={scheduler_kubeconfig}",
                    f"--authentication-kubeconfig={scheduler_kubeconfig}",
                    f"--authorization-kubeconfig={scheduler_kubeconfig}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--v=1",
                ],
                workdir / "kube-scheduler.log",
            )
        )
        node.process("kubelet").wait_ready(
            lambda: _node_schedulable(plane),
            timeout=timeout,
            what="the e2e node Ready and untainted",
            interval=0.1,
            tail_lines=60,
        )
    except BaseException:
        node.stop()
        raise
    node.startup_seconds = time.monotonic() - started
    return node
