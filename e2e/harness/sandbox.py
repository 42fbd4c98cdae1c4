"""Run a container's process locally, as close to a pod as this machine allows.

Preferred ("podman"): the built image itself, run by podman (e2e/harness/podman.py).
The modes below run this checkout instead, where podman is missing.

Fallback ("bwrap"): bubblewrap builds a private mount namespace: the host's
directories read-only (the image stand-in), the pod's volumes mounted at their
mountPaths, an empty /tmp, a fresh /dev and /proc, a private PID namespace where
the process is PID 1 (so SIGTERM reaches it only if it handles it, like a
container), its own hostname, and the pod's uid/gid:

* as root: bwrap (no user namespace) keeps CAP_SETUID/CAP_SETGID only, and
  ``setpriv`` switches to the real uid/gid/supplementary groups (fsGroup) with
  every capability dropped and no_new_privs set;
* as an ordinary user: ``bwrap --unshare-user --uid --gid`` (no supplementary
  groups can be set in an unprivileged user namespace).

Last resort ("rewrite"): no sandbox; the process runs directly and every mountPath
found in its environment, arguments or working directory is rewritten to the
host directory that backs it. Paths compiled into programs (the in-cluster
ServiceAccount directory) cannot be rewritten; see e2e/README.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.tools import REPO_ROOT, BootstrapError, tool

__all__ = ["MODES", "Identity", "Mount", "bwrap_argv", "rewrite_paths", "sandbox_mode"]

#: Host paths the sandbox never shows: /tmp is the pod's own (empty unless mounted).
HIDDEN = ("/tmp",)
#: Provided by bwrap itself.
SPECIAL = ("/dev", "/proc")


@dataclass(frozen=True)
class Mount:
    target: str  # absolute path inside the container
    source: Path | None  # host file or directory; None means a fresh writable tmpfs
    writable: bool = False


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def _ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b'] (proper ancestors below '/')."""
    parts = _parts(path)
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _resolve_on_host(target: str, stop_at: Sequence[str]) -> str:
    """Follow host symlinks in ``target``'s existing prefix (/var/run -> /run), so a
    mount lands where a program opening the original path will look."""
    current = "/"
    parts = _parts(target)
    for i, part in enumerate(parts):
        nxt = os.path.join(current, part)
        if _under(nxt, stop_at) or _under(nxt, HIDDEN) or _under(nxt, SPECIAL):
            return os.path.join(nxt, *parts[i + 1 :]) if i + 1 < len(parts) else nxt
        if os.path.islink(nxt):
            current = os.path.realpath(nxt)
        elif os.path.exists(nxt):
            current = nxt
        else:
            return os.path.join(nxt, *parts[i + 1 :]) if i + 1 < len(parts) else nxt
    return current


def _traversable_by_others(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return True


def bwrap_argv(
    argv: Sequence[str],
    mounts: Sequence[Mount],
    *,
    identity: Identity,
    hostname: str,
    cwd: str,
    read_only_root: bool,
    expose: Sequence[str] = (),
    info_fd: int | None = None,
    as_root: bool | None = None,
    as_pid_1: bool = True,
) -> list[str]:
    """The full bwrap (+ setpriv) command line that runs ``argv`` in the sandbox.

    ``as_pid_1``: the process is PID 1 of its namespace (an image whose entrypoint
    is the program itself). False: bwrap's reaper is PID 1 and the process its
    child, like an image whose entrypoint runs under tini.

    ``expose`` lists host paths the process must reach even when an ancestor is not
    traversable for its uid (a Python runtime in a 0700 home directory): such an ancestor is
    replaced by a directory holding only the exposed child.
    """
    as_root = os.geteuid() == 0 if as_root is None else as_root
    # The checkout is part of the "image" wherever it was cloned (a 0700 home, /tmp).
    repo = os.path.realpath(REPO_ROOT)
    expose = [*expose, *([] if repo in expose else [repo])]
    targets_raw = [m.target for m in mounts]
    resolved = {m.target: _resolve_on_host(m.target, targets_raw) for m in mounts}
    mount_targets = set(resolved.values())
    shadows = _shadows(mount_targets, expose)

    args: list[str] = [str(tool("bwrap"))]
    _populate("/", shadows, mount_targets, args)
    args += ["--dev", "/dev", "--proc", "/proc"]
    for hidden in HIDDEN:
        if hidden not in mount_targets:
            args += ["--perms", "1777", "--dir" if read_only_root else "--tmpfs", hidden]
    args += _mount_args(mounts, resolved, shadows)
    # The "image" is this checkout and its Python. A checkout that itself lives under
    # a hidden path (a CI clone in /tmp) is shown again, read-only, as an image's
    # files would be. Volumes over it are the kubelet's business (it binds it back).
    for path in dict.fromkeys(os.path.realpath(p) for p in expose):
        if _under(path, HIDDEN) and not _under(path, sorted(mount_targets)):
            args += ["--ro-bind", path, path]
    if read_only_root:
        args += ["--remount-ro", "/"]
    args += [
        "--unshare-pid",
        *(["--as-pid-1"] if as_pid_1 else []),
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        hostname,
        "--die-with-parent",
        "--chdir",
        cwd,
    ]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if as_root:
        groups = ",".join(str(g) for g in identity.groups)
        args += [
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--",
            str(_setpriv()),
            f"--reuid={identity.uid}",
            f"--regid={identity.gid}",
            f"--groups={groups}" if groups else "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    else:
        args += ["--unshare-user", "--uid", str(identity.uid), "--gid", str(identity.gid), "--"]
    return args + list(argv)


def _shadows(mount_targets: set[str], expose: Sequence[str]) -> dict[str, set[str] | None]:
    """Directories rebuilt in the sandbox root: value None = every host child is
    bound, a set = only those children (a non-traversable ancestor of ``expose``)."""
    shadows: dict[str, set[str] | None] = {"/": None}
    for target in mount_targets:
        if _under(target, SPECIAL) or _under(target, HIDDEN) or os.path.lexists(target):
            continue  # mounting over an existing host path needs no new mount point
        for anc in _ancestors(target):
            if anc in mount_targets or _under(anc, HIDDEN):
                break
            if not os.path.isdir(anc) or os.path.islink(anc):
                break  # does not exist on the host: created in the sandbox root
            shadows.setdefault(anc, None)
    for path in expose:
        real = os.path.realpath(path)
        for anc in _ancestors(real):
            if not _traversable_by_others(anc):
                shadows[anc] = {_parts(real)[len(_parts(anc))]} | (shadows.get(anc) or set())
    # A restricted directory also keeps the children that lead to mount targets.
    for target in mount_targets:
        for anc in _ancestors(target):
            allowed = shadows.get(anc)
            if isinstance(allowed, set):
                allowed.add(_parts(target)[len(_parts(anc))])
    return shadows


def _populate(directory: str, shadows: Mapping[str, set[str] | None], mount_targets: set[str], args: list[str]) -> None:
    allowed = shadows[directory]
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(directory, name)
        if (allowed is not None and name not in allowed) or path in SPECIAL or path in HIDDEN:
            continue
        if path in mount_targets:
            continue
        if path in shadows:
            args.extend(["--perms", "0755", "--dir", path])
            _populate(path, shadows, mount_targets, args)
        elif os.path.islink(path):
            args.extend(["--symlink", os.readlink(path), path])
        else:
            args.extend(["--ro-bind", path, path])


def _mount_args(
    mounts: Sequence[Mount], resolved: Mapping[str, str], shadows: Mapping[str, set[str] | None]
) -> list[str]:
    by_target = {resolved[m.target]: m for m in mounts}

    def exists_in_sandbox(path: str) -> bool:
        if path in shadows or path in by_target or path in HIDDEN or path in SPECIAL:
            return True
        for anc in reversed(_ancestors(path)):  # inside a volume: look at its source
            if anc in by_target:
                source = by_target[anc].source
                return source is not None and (source / os.path.relpath(path, anc)).is_dir()
        if _under(path, HIDDEN) or _under(path, SPECIAL):
            return False
        allowed = shadows.get(os.path.dirname(path))
        if isinstance(allowed, set) and os.path.basename(path) not in allowed:
            return False
        return os.path.isdir(path)

    args: list[str] = []
    made: set[str] = set()
    for target, mount in sorted(by_target.items(), key=lambda item: len(_parts(item[0]))):
        # bwrap would create missing parents 0700; the pod's uid must traverse them.
        for anc in _ancestors(target):
            if anc not in made and not exists_in_sandbox(anc):
                args += ["--perms", "0755", "--dir", anc]
                made.add(anc)
        if mount.source is None:
            args += ["--perms", "1777", "--tmpfs", target]
        else:
            args += ["--bind" if mount.writable else "--ro-bind", str(mount.source), target]
    return args


def _setpriv() -> str:
    found = shutil.which("setpriv")
    if not found:
        raise FileNotFoundError("setpriv (util-linux) is needed to drop to the pod's uid under bwrap as root")
    return found


def rewrite_paths(value: str, mapping: Mapping[str, str]) -> str:
    """Rewrite a container path (or a path-valued string) to its host backing path."""
    for target in sorted(mapping, key=len, reverse=True):
        if value == target or value.startswith(target.rstrip("/") + "/"):
            return mapping[target] + value[len(target) :]
    return value


MODES = ("podman", "bwrap", "rewrite")


@functools.cache
def sandbox_mode() -> str:
    """'podman' when podman and runc are installed (the bootstrap installs them), else
    'bwrap' when a probe sandbox runs here, else 'rewrite'. E2E_SANDBOX forces one."""
    forced = os.environ.get("E2E_SANDBOX", "")
    if forced and forced not in MODES:
        raise RuntimeError(f"E2E_SANDBOX={forced!r}: expected one of {', '.join(MODES)}")
    if forced == "rewrite":
        return "rewrite"
    if forced in ("", "podman"):
        if _podman_installed():
            return "podman"
        if forced == "podman":
            raise RuntimeError("E2E_SANDBOX=podman but podman or runc is missing (scripts/bootstrap-tools.sh debian)")
    probe = bwrap_argv(
        [sys.executable, "-c", "import os; print(os.getuid())"],
        [Mount("/probe", None, writable=True)],
        identity=Identity(65532, 65532, (65532,)),
        hostname="probe",
        cwd="/",
        read_only_root=True,
        expose=[sys.base_prefix],
    )
    proc = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=30)
    ok = proc.returncode == 0 and proc.stdout.strip() == "65532"
    if forced == "bwrap" and not ok:
        raise RuntimeError(f"E2E_SANDBOX=bwrap but the probe sandbox failed: {proc.stderr.strip()}")
    return "bwrap" if ok else "rewrite"


def _podman_installed() -> bool:
    try:
        tool("podman")
        tool("runc")
    except BootstrapError:
        return False
    return True
