"""Stop deploy.sh only between helm operations, never in the middle of one.

deploy.sh runs one ``helm upgrade --install`` per component; a helm killed
mid-operation leaves its release ``pending-*``. The runner therefore puts a
``helm`` shim first on deploy.sh's PATH. For an operation that changes a release
(install, upgrade, rollback, uninstall) the shim takes an exclusive ``flock`` on
a lock file, refuses to start once a stop was requested, and otherwise runs the
real helm while holding the lock, printing one line when it starts and one when
it ends (the per-run log then shows every helm operation with its times).

On SIGTERM the runner requests the stop and then takes the same lock: it gets it
as soon as the helm operation in flight (if any) has finished, and from then on
no new one can start. Holding it, the runner stops deploy.sh's process group:
deploy.sh is between two components, its trap exits 130, and every release is
in a settled state. Only when the grace period runs out first is helm cut (and
the next run recovers the release it left pending).

The shim also carries deploy.helmApply: given an apply flag (``--server-side=false``
or ``=true``, ``helm.apply``), it puts it into every ``helm install`` and ``helm
upgrade`` right after the subcommand word, so a ``--server-side`` deploy.sh itself
passes later on the line still wins (helm's last flag does).

``python -m aicr_runner.helm.guard [--server-side=...] <real-helm> <state-dir> <helm args...>``
is the shim's body; it imports nothing but the standard library (it starts per call).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["APPLY_COMMANDS", "MUTATING_COMMANDS", "HelmGuard", "install_guard", "main", "real_helm", "with_apply_flag"]

#: helm subcommands (and aliases) that change a release.
MUTATING_COMMANDS = frozenset({"install", "upgrade", "rollback", "uninstall", "delete", "del", "un"})
#: helm subcommands that apply a chart's objects (and take ``--server-side``).
APPLY_COMMANDS = frozenset({"install", "upgrade"})
#: The shim's own first argument, when there is an apply flag: the flag itself.
APPLY_FLAG_PREFIX = "--server-side="
#: helm's global flags that take their value as the next argument (Helm 3 and 4's
#: ``helm --help``): ``helm -n ns upgrade ...`` names the subcommand after the value.
GLOBAL_VALUE_FLAGS = frozenset(
    {
        "-n",
        "--namespace",
        "--kube-context",
        "--kubeconfig",
        "--kube-apiserver",
        "--kube-as-user",
        "--kube-as-group",
        "--kube-ca-file",
        "--kube-tls-server-name",
        "--kube-token",
        "--registry-config",
        "--repository-cache",
        "--repository-config",
        "--content-cache",
        "--burst-limit",
        "--qps",
        "--color",
        "--colour",
    }
)
LOCK_NAME = "helm.lock"
STOP_NAME = "stop"
#: deploy.sh's own "interrupted" code: the shim refused to start an operation.
REFUSED_EXIT = 130
PREFIX = "aicr-runner helm-guard:"


def real_helm(search_path: str | None) -> str | None:
    """deploy.sh's helm: the one on ``search_path`` (absolute), None without one."""
    helm = shutil.which("helm", path=search_path)
    return None if helm is None else str(Path(helm).absolute())


def install_guard(search_path: str | None, state_dir: Path, apply_flag: str = "") -> HelmGuard | None:
    """deploy.sh's helm (the one on ``search_path``) behind the guard, its state in
    ``state_dir``, ``apply_flag`` (``--server-side=...`` or "") put into each install
    and upgrade; None without a helm on that path."""
    helm = real_helm(search_path)
    if helm is None:
        return None
    guard = HelmGuard(state_dir)
    guard.install(helm, apply_flag=apply_flag)
    return guard


class HelmGuard:
    """The runner's side: install the shim, request the stop, hold the lock."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.bin_dir = state_dir / "bin"
        self._held: int | None = None

    def install(self, real_helm: str, python: str = sys.executable, *, apply_flag: str = "") -> Path:
        if apply_flag and not apply_flag.startswith(APPLY_FLAG_PREFIX):
            raise ValueError(f"not a helm apply flag: {apply_flag!r}")
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / STOP_NAME).unlink(missing_ok=True)
        shim = self.bin_dir / "helm"
        flag = f"{shlex.quote(apply_flag)} " if apply_flag else ""
        shim.write_text(
            "#!/bin/sh\n"
            "# aicr-runner: stop deploy.sh only between helm operations (aicr_runner.helm.guard)\n"
            f"exec {shlex.quote(python)} -m aicr_runner.helm.guard {flag}{shlex.quote(real_helm)} "
            f'{shlex.quote(str(self.state_dir))} "$@"\n'
        )
        shim.chmod(0o755)
        return self.bin_dir

    def request_stop(self) -> None:
        (self.state_dir / STOP_NAME).touch()

    def try_hold(self) -> bool:
        """Take the lock without waiting: True once no helm operation is in flight."""
        if self._held is not None:
            return True
        fd = os.open(self.state_dir / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._held = fd
        return True

    def release(self) -> None:
        if self._held is not None:
            os.close(self._held)
            self._held = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _describe(args: list[str], words: list[int]) -> str:
    """``upgrade gpu-operator -n gpu-operator``: the subcommand, the release, the namespace."""
    namespace = ""
    for flag in ("-n", "--namespace"):
        if flag in args and args.index(flag) + 1 < len(args):
            namespace = args[args.index(flag) + 1]
    return " ".join(args[i] for i in words[:2]) + (f" -n {namespace}" if namespace else "")


def _words(args: list[str]) -> list[int]:
    """Where helm's words are (the subcommand first, then its arguments): every
    argument that is no flag and no global flag's value."""
    words, value_next = [], False
    for i, arg in enumerate(args):
        if value_next:
            value_next = False
        elif arg in GLOBAL_VALUE_FLAGS:
            value_next = True
        elif not arg.startswith("-"):
            words.append(i)
    return words


def with_apply_flag(args: list[str], apply_flag: str, words: list[int] | None = None) -> list[str]:
    """``args`` with ``apply_flag`` right after the subcommand word when that is
    install or upgrade; otherwise ``args`` as they are. ``words``: ``_words(args)``."""
    index = next(iter(_words(args) if words is None else words), None)
    if not apply_flag or index is None or args[index] not in APPLY_COMMANDS:
        return list(args)
    return [*args[: index + 1], apply_flag, *args[index + 1 :]]


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    apply_flag = argv.pop(0) if argv and argv[0].startswith(APPLY_FLAG_PREFIX) else ""
    real_helm, state_dir, *args = argv
    words = _words(args)
    command = args[words[0]] if words else ""
    if command not in MUTATING_COMMANDS:
        os.execv(real_helm, [real_helm, *args])  # noqa: S606 - the real helm, verbatim
    state = Path(state_dir)
    fd = os.open(state / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    what = _describe(args, words)
    if (state / STOP_NAME).exists():
        print(f"{PREFIX} not starting helm {what}: the run is stopping between helm operations", flush=True)
        return REFUSED_EXIT
    started = time.monotonic()
    print(f"{PREFIX} helm {what} started at {_now()}", flush=True)
    code = 1
    with contextlib.suppress(KeyboardInterrupt):
        code = subprocess.call([real_helm, *with_apply_flag(args, apply_flag, words)])
        code = 128 - code if code < 0 else code
    print(f"{PREFIX} helm {what} ended at {_now()} (exit {code}, {time.monotonic() - started:.1f}s)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
