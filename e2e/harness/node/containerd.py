"""containerd for the e2e node: Debian's containerd with a private root, state
directory and socket, so it touches nothing of the machine's own containers.

Two settings make it run here (../real-kubelet facts in e2e/README.md):
``restrict_oom_score_adj`` (root lacks CAP_SYS_RESOURCE, so runc cannot set the
negative oom_score_adj the kubelet asks for on sandboxes) and a sandbox image
built locally (images.py; no public registry is reachable). Plain-HTTP
registries (the harness's own) are named in ``certs.d``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from e2e.harness.procs import ManagedProcess, StartupError

__all__ = ["Containerd", "shims_of", "start_containerd"]

CNI_BIN_DIR = "/usr/lib/cni"
NAMESPACE = "k8s.io"


@dataclass
class Containerd:
    process: ManagedProcess
    root: Path
    state: Path
    socket: Path
    certs_dir: Path
    #: images imported so far (a derived image asked for again is not imported again)
    loaded: set[str] = field(default_factory=set)

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def ctr(self, *args: str, check: bool = True) -> str:
        argv = ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *args]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} (exit {proc.returncode}): {proc.stderr.decode(errors='replace')}")
        return proc.stdout.decode(errors="replace")

    def plain_http_registry(self, host: str) -> None:
        """Let the node pull from ``host`` (``ip:port``) over plain HTTP."""
        directory = self.certs_dir / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n[host."http://{host}"]\n  capabilities = ["pull", "resolve"]\n'
        )

    def restart(self, while_down: Callable[[], None] = lambda: None, *, timeout: float = 60.0) -> None:
        """Stop containerd alone (SIGTERM, as ``systemctl restart containerd`` does:
        its shims, and the containers they hold, live on), call ``while_down``, then
        start it again with the same config and return once it serves. Call from
        the main thread (the new process dies with the thread that started it)."""
        self.process.stop()
        while_down()
        self.process = ManagedProcess(self.process.name, self.process.argv, self.process.log_path)
        _wait_serving(self, timeout)

    def stop(self) -> None:
        """Kill every container task, stop containerd, then its shims (they run in
        their own sessions and outlive containerd otherwise)."""
        if self.process.alive():
            for task in self.ctr("tasks", "list", "-q", check=False).split():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        self.process.stop()
        for pid in shims_of(self.socket):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def shims_of(socket: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _config(workdir: Path, sandbox_image: str, cni_conf_dir: Path, certs_dir: Path) -> str:
    socket = workdir / "containerd.sock"
    return f"""version = 2
root = "{workdir / "root"}"
state = "{workdir / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{workdir / "containerd.ttrpc.sock"}"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {json.dumps(sandbox_image)}
  restrict_oom_score_adj = true
  # Pod network namespaces under the private state directory, not /var/run/netns:
  # the node's stop unmounts them with the rest, and their veths go with them.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs_dir}"
"""


def write_cni_config(directory: Path, bridge: str, subnet: str, gateway: str) -> None:
    """A bridge + host-local pod network on the node's own bridge (no kube-proxy:
    the one Service pods use is DNATed by the host, see host.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "10-aicr-e2e.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "aicr-e2e",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": bridge,
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(directory / "ipam"),
                        },
                    }
                ],
            },
            indent=2,
        )
    )


def start_containerd(
    workdir: Path, *, sandbox_image: str, bridge: str, subnet: str, gateway: str, timeout: float = 60.0
) -> Containerd:
    workdir.mkdir(parents=True, exist_ok=True)
    cni_dir = workdir / "cni"
    certs_dir = workdir / "certs.d"
    certs_dir.mkdir(exist_ok=True)
    write_cni_config(cni_dir, bridge, subnet, gateway)
    config = workdir / "config.toml"
    config.write_text(_config(workdir, sandbox_image, cni_dir, certs_dir))
    proc = ManagedProcess("containerd", ["containerd", "--config", config], workdir / "containerd.log")
    runtime = Containerd(proc, workdir / "root", workdir / "state", workdir / "containerd.sock", certs_dir)

    _wait_serving(runtime, timeout)
    return runtime


def _wait_serving(runtime: Containerd, timeout: float) -> None:
    def serving() -> bool | None:
        runtime.ctr("version")  # raises until the socket answers
        return True

    try:
        runtime.process.wait_ready(serving, timeout=timeout, what="containerd")
    except StartupError:
        runtime.process.stop()
        raise
