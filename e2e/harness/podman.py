"""Run a pod's container from the built aicr-runner image with podman, the way a
kubelet asks its container runtime to: the image's ENTRYPOINT/CMD unless the pod
overrides them, the pod's user and groups, a read-only root, no privilege
escalation, the capabilities the securityContext leaves, the pod's volumes at
their mountPaths, and the host's network (the API server and the registry listen
on the host's loopback, as a hostNetwork pod would reach them).

podman runs with runc and cgroupfs and explicit ulimits (tests/podman.py says
why). Container environment values never appear on the podman command line: each
variable is named with ``-e NAME`` and podman copies its value from its own
environment, so credentials from Secrets stay out of process listings."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from e2e.harness.sandbox import Identity, Mount
from tests.podman import PODMAN, RUN_LIMITS, podman_available

__all__ = [
    "PODMAN",
    "ContainerSpec",
    "PodSpecNotRunnable",
    "image_id",
    "kill",
    "podman_available",
    "remove",
    "run_argv",
]

#: Variables podman reads itself: these are given on the command line (they are
#: never credentials) so podman's own environment stays the host's.
_PODMAN_OWN_ENV = frozenset(
    {"PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"}
)


class PodSpecNotRunnable(ValueError):
    """The securityContext asks for something this runner does not do."""


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    name: str  # the podman container name (unique per pod and container)
    hostname: str
    identity: Identity
    security_context: Mapping[str, object]
    mounts: Sequence[Mount]
    env: Mapping[str, str]
    working_dir: str | None = None
    command: Sequence[str] | None = None  # replaces the image's ENTRYPOINT (and its CMD)
    args: Sequence[str] | None = None  # replaces the image's CMD


def _security_flags(sc: Mapping[str, object]) -> list[str]:
    if sc.get("privileged"):
        raise PodSpecNotRunnable("privileged containers")
    flags = []
    if sc.get("readOnlyRootFilesystem"):
        # No tmpfs at /tmp, /run, /var/tmp either: a pod gets only its volumes.
        flags += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    capabilities = sc.get("capabilities") or {}
    assert isinstance(capabilities, Mapping)
    for cap in capabilities.get("drop") or []:
        flags.append("--cap-drop=all" if cap == "ALL" else f"--cap-drop={cap}")
    for cap in capabilities.get("add") or []:
        flags.append(f"--cap-add={cap}")
    return flags


def _mount_flags(mounts: Sequence[Mount]) -> list[str]:
    flags = []
    for mount in mounts:
        if mount.source is None:
            flags += ["--tmpfs", f"{mount.target}:rw,U"]  # podman ignores mode=: give it to the user
        else:
            flags += ["--volume", f"{mount.source}:{mount.target}:{'rw' if mount.writable else 'ro'}"]
    return flags


def run_argv(spec: ContainerSpec) -> tuple[list[str], dict[str, str]]:
    """The ``podman run`` command line and the variables to add to podman's own
    environment (the container's values, copied in by ``-e NAME``)."""
    uid, gid = spec.identity.uid, spec.identity.gid
    argv = [
        *PODMAN,
        "run",
        "--rm",
        "--pull=never",
        f"--name={spec.name}",
        f"--hostname={spec.hostname}",
        "--network=host",
        *RUN_LIMITS,
        f"--user={uid}:{gid}",
        *(f"--group-add={g}" for g in spec.identity.groups if g != gid),
        *_security_flags(spec.security_context),
        *_mount_flags(spec.mounts),
    ]
    inherited: dict[str, str] = {}
    for name, value in spec.env.items():
        if name in _PODMAN_OWN_ENV:
            argv += ["--env", f"{name}={value}"]
        else:
            argv += ["--env", name]
            inherited[name] = value
    if spec.working_dir:
        argv.append(f"--workdir={spec.working_dir}")
    if spec.command is not None:
        # Kubernetes: command replaces ENTRYPOINT and drops CMD; args (if any) follow.
        argv += ["--entrypoint", spec.command[0], spec.image, *spec.command[1:], *(spec.args or [])]
    else:
        argv += [spec.image, *(spec.args or [])]
    return argv, inherited


def kill(name: str, signal: str) -> None:
    """Deliver ``signal`` (TERM, KILL) to the container's PID 1."""
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run([*PODMAN, "kill", f"--signal={signal}", name], capture_output=True, check=False, timeout=30)


def remove(name: str) -> None:
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run([*PODMAN, "rm", "--force", "--ignore", name], capture_output=True, check=False, timeout=60)


def image_id(image: str) -> str:
    proc = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()
