"""Child processes: streamed output, a curated environment, and polite shutdown.

Every aicr and deploy.sh call goes through ``SubprocessRunner.run``:

* stdout and stderr are merged and relayed line by line, as they arrive, to the
  log file and to ``on_line`` (the pod-log relay). Nothing is accumulated: a
  child printing 100 MB keeps the runner's memory flat. A line longer than
  ``max_line_bytes`` is passed on in pieces, so a missing newline cannot grow a
  buffer either. Bytes are decoded as UTF-8 with replacement characters.
* the child starts in its own session (and so its own process group). A
  SIGTERM sent to the runner (PID 1 in the pod) therefore does not reach helm
  mid-operation; the runner decides when the child is stopped.
* on SIGTERM/SIGINT the ``ShutdownController`` only records the request. The
  running child is allowed ``grace_seconds`` to finish on its own (a killed
  helm leaves releases in pending-install), then its process group gets
  SIGTERM, and ``kill_after_seconds`` later SIGKILL. The result is marked
  ``interrupted``. A second signal skips what is left of the grace period.
* exit codes follow the shell: a child killed by signal N reports 128+N.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Protocol

from aicr_runner.config import ENV_PREFIX
from aicr_runner.errors import InterruptedRun, ToolError

__all__ = [
    "CREDENTIAL_VARIABLES",
    "ProcessResult",
    "ProcessRunner",
    "ShutdownController",
    "SubprocessRunner",
    "child_env",
]

#: Credentials that only the publish call may see (anchor R-19).
CREDENTIAL_VARIABLES = ("DOCKER_CONFIG", "COSIGN_IDENTITY_TOKEN")

_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int  # the child's code; 128+N for a signal, like a shell
    log_path: Path  # every line the child printed (stdout and stderr merged)
    interrupted: bool  # the runner received SIGTERM/SIGINT while it ran
    #: The runner stopped the child (grace ran out: TERM, then KILL). False when the
    #: child finished on its own, even if a shutdown was requested meanwhile.
    stopped: bool = False


class ProcessRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
    ) -> ProcessResult: ...


def child_env(
    base: Mapping[str, str], *, docker_config: str | None = None, identity_token: str | None = None
) -> dict[str, str]:
    """base minus AICR_RUNNER_*, DOCKER_CONFIG, COSIGN_IDENTITY_TOKEN; plus the two
    credentials only when given (only the publish call gets them).

    The runner's own settings are dropped case-insensitively, because the
    settings loader reads them that way. Empty credential values count as not
    given.
    """
    env = {
        key: value
        for key, value in base.items()
        if not key.upper().startswith(ENV_PREFIX) and key not in CREDENTIAL_VARIABLES
    }
    if docker_config:
        env["DOCKER_CONFIG"] = docker_config
    if identity_token:
        env["COSIGN_IDENTITY_TOKEN"] = identity_token
    return env


class ShutdownController:
    """Records SIGTERM/SIGINT. ``request`` is a valid signal handler; it only
    sets flags, which is safe whatever the main thread is doing."""

    def __init__(self) -> None:
        self._signals: list[int] = []

    def request(self, signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
        self._signals.append(signum)

    def requested(self) -> bool:
        return bool(self._signals)

    @property
    def urgent(self) -> bool:
        """A second signal: stop waiting for the grace period."""
        return len(self._signals) > 1

    @property
    def signal_name(self) -> str:
        return signal.Signals(self._signals[0]).name if self._signals else ""

    @contextlib.contextmanager
    def installed(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[ShutdownController]:
        """Install ``request`` for ``signals`` (main thread only), restoring the
        previous handlers on exit."""
        previous = {signum: signal.signal(signum, self.request) for signum in signals}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class _LineSplitter:
    """Turns chunks into lines without holding more than one partial line,
    itself capped at ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        self._partial.extend(chunk)
        while True:
            newline = self._partial.find(b"\n")
            if newline == -1 or newline >= self._limit:
                break
            line = bytes(self._partial[:newline])
            del self._partial[: newline + 1]
            yield line
        while len(self._partial) >= self._limit:
            piece = bytes(self._partial[: self._limit])
            del self._partial[: self._limit]
            yield piece

    def finish(self) -> Iterator[bytes]:
        if self._partial:
            rest = bytes(self._partial)
            self._partial.clear()
            yield rest


@dataclass
class _Escalation:
    """Where a shutdown stands for one child: grace, then TERM, then KILL."""

    grace_deadline: float | None = None
    kill_deadline: float | None = None
    killed: bool = False


class SubprocessRunner:
    def __init__(
        self,
        *,
        shutdown: ShutdownController | None = None,
        grace_seconds: float = 60.0,
        kill_after_seconds: float = 10.0,
        poll_seconds: float = 0.1,
        drain_seconds: float = 5.0,
        max_line_bytes: int = 64 * 1024,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """``drain_seconds``: after the child exits, how long its output pipe may
        stay open (held by a leftover grandchild) before the group is killed."""
        self.shutdown = shutdown or ShutdownController()
        self.grace_seconds = grace_seconds
        self.kill_after_seconds = kill_after_seconds
        self.poll_seconds = poll_seconds
        self.drain_seconds = drain_seconds
        self.max_line_bytes = max_line_bytes
        #: Applied to every line before it reaches the log file or ``on_line``, so a
        #: credential a child echoes never lands anywhere.
        self.redact = redact

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
    ) -> ProcessResult:
        if not argv:
            raise ValueError("argv must name a program")
        if self.shutdown.requested():
            raise InterruptedRun(f"shutdown requested ({self.shutdown.signal_name}); {argv[0]} was not started")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        process = _start(argv, env=env, cwd=cwd)
        assert process.stdout is not None  # noqa: S101 - stdout=PIPE above
        callback_error: BaseException | None = None

        def deliver(raw: bytes, log: IO[str]) -> None:
            nonlocal callback_error
            line = raw.decode("utf-8", errors="replace").removesuffix("\r")
            if self.redact is not None:
                line = self.redact(line)
            log.write(line + "\n")
            if on_line is not None and callback_error is None:
                try:
                    on_line(line)
                except Exception as exc:  # noqa: BLE001 - re-raised once the child is done
                    callback_error = exc

        escalation = _Escalation()
        try:
            with log_path.open("w", encoding="utf-8") as log:
                self._pump(process, lambda raw: deliver(raw, log), escalation)
        finally:
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
            process.wait()
            process.stdout.close()
        if callback_error is not None:
            raise callback_error
        code = process.returncode
        return ProcessResult(
            exit_code=128 - code if code < 0 else code,
            log_path=log_path,
            interrupted=self.shutdown.requested(),
            stopped=escalation.kill_deadline is not None,
        )

    def _pump(
        self, process: subprocess.Popen[bytes], deliver: Callable[[bytes], None], escalation: _Escalation
    ) -> None:
        """Relay output until EOF and the child's exit, stepping the shutdown
        escalation between reads."""
        assert process.stdout is not None  # noqa: S101
        fd = process.stdout.fileno()
        os.set_blocking(fd, False)
        splitter = _LineSplitter(self.max_line_bytes)
        eof = False
        exited_at: float | None = None
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                if eof:
                    time.sleep(self.poll_seconds)
                elif selector.select(self.poll_seconds):
                    chunk = _read(fd)
                    eof = chunk == b""
                    for line in splitter.feed(chunk or b""):
                        deliver(line)
                now = time.monotonic()
                if process.poll() is None:
                    self._escalate(process, escalation, now)
                    continue
                if eof:
                    break
                # The child is gone; a process it started may still hold the pipe.
                exited_at = exited_at or now
                if now - exited_at >= self.drain_seconds:
                    _signal_group(process, signal.SIGKILL)
                    break
        for line in splitter.finish():
            deliver(line)

    def _escalate(self, process: subprocess.Popen[bytes], escalation: _Escalation, now: float) -> None:
        if not self.shutdown.requested() or escalation.killed:
            return
        if escalation.grace_deadline is None:
            escalation.grace_deadline = now + self.grace_seconds
        if escalation.kill_deadline is None and (now >= escalation.grace_deadline or self.shutdown.urgent):
            _signal_group(process, signal.SIGTERM)
            escalation.kill_deadline = now + self.kill_after_seconds
        elif escalation.kill_deadline is not None and now >= escalation.kill_deadline:
            _signal_group(process, signal.SIGKILL)
            escalation.killed = True


def _start(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    program = str(argv[0])
    try:
        return subprocess.Popen(
            [str(arg) for arg in argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if exc.filename is not None and Path(str(exc.filename)) == Path(cwd) and not Path(cwd).is_dir():
            raise ToolError(f"cannot run {program}: working directory {cwd} does not exist") from exc
        raise ToolError(f"cannot run {program}: program not found") from exc
    except PermissionError as exc:
        raise ToolError(f"cannot run {program}: not executable ({exc.strerror})") from exc
    except OSError as exc:
        raise ToolError(f"cannot run {program}: {exc.strerror or exc}") from exc


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return None


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group (helm, kubectl and friends)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
