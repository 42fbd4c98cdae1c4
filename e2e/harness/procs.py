"""Background processes that cannot outlive the test session.

Every process is started in its own session (so its whole tree can be signalled)
with PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed pytest leaves nothing behind.
Start them from the main thread: the death signal follows the starting thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["ManagedProcess", "StartupError", "free_port", "set_pdeathsig", "wait_for"]

_PR_SET_PDEATHSIG = 1
T = TypeVar("T")


class StartupError(RuntimeError):
    """A component did not become ready; the message carries its log tail."""


def set_pdeathsig() -> None:
    """preexec_fn: SIGKILL this child when its parent thread exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    alive: Callable[[], bool] | None = None,
) -> T:
    """Call ``probe`` until it returns a non-None value; exceptions count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            result = probe()
            if result is not None:
                return result
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last = exc
        if alive is not None and not alive():
            raise StartupError(f"{what}: the process exited while waiting (last probe error: {last})")
        if time.monotonic() > deadline:
            raise StartupError(f"{what}: not ready after {timeout:.0f}s (last probe error: {last})")
        time.sleep(interval)


class ManagedProcess:
    """A long-running tool (etcd, kube-apiserver, registry) with its output in a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=set_pdeathsig,  # noqa: PLW1509 - started from the main thread only
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(
        self,
        probe: Callable[[], T | None],
        *,
        timeout: float,
        what: str,
        interval: float = 0.05,
        tail_lines: int = 40,
    ) -> T:
        """``wait_for(probe)`` while this process lives; when it does not get
        ready, the StartupError carries the end of its log."""
        try:
            return wait_for(probe, timeout=timeout, what=what, interval=interval, alive=self.alive)
        except StartupError as exc:
            raise StartupError(f"{exc}\n{self.name} log tail:\n{self.log_tail(tail_lines)}") from None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds. Returns the exit code."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
            return self.proc.returncode
        finally:
            self._log.close()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.proc.returncode}"
        return f"<{self.name} pid={self.proc.pid} {state}>"
