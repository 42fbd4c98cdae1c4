"""Child processes: streamed output, a curated environment, and polite shutdown.

Every aicr and deploy.sh call goes through ``SubprocessRunner.run``:

* stdout and stderr are merged and relayed as they arrive, to the log file and
  to ``on_block`` (the pod-log relay: a block of whole lines, as read) and/or
  ``on_line`` (one call per line, for callers that look at every line).
  Nothing is accumulated: a child printing gigabytes keeps the runner's memory
  flat. A line longer than ``max_line_bytes`` is passed on in pieces, so a
  missing newline cannot grow a buffer either; a cut never falls inside a UTF-8
  character or inside a registered secret (each piece is redacted on its own).
  Bytes are decoded as UTF-8 with replacement characters.
* each block is redacted once, before it reaches the log file or a callback:
  one native pass (``blockscan``) looks for every registered secret and for
  what the deploy relay picks out, and only a block holding a secret is
  rewritten. Work is per block, not per line: that is what keeps the relay of
  a chatty deploy.sh close to ``tee``.
* the child and its output pipe are waited on together (a pidfd next to the
  pipe in one ``select``): no fixed sleep between a child's last line and its
  reaping.
* the child starts in its own session (and so its own process group). A
  SIGTERM sent to the runner (PID 1 in the pod) therefore does not reach helm
  mid-operation; the runner decides when the child is stopped.
* on SIGTERM/SIGINT the ``ShutdownController`` only records the request. The
  running child is allowed ``grace_seconds`` to finish on its own (a killed
  helm leaves releases in pending-install), then its process group gets
  SIGTERM, and ``kill_after_seconds`` later SIGKILL. The result is marked
  ``interrupted``. A second signal skips what is left of the grace period.
* with a ``safe_stop`` guard (deploy.sh: aicr_runner.helm.guard), a shutdown
  request stops the child as soon as no helm operation is in flight instead of
  after the grace period; the result says ``safe_point``.
* a call may have a deadline of its own (``deadline_seconds``: a local question
  such as ``helm version``, whose answer is due in seconds): past it the child's
  group gets SIGTERM at once, SIGKILL ``kill_after_seconds`` later, and the
  result says ``overdue``. Such a question changes nothing, so a shutdown request
  stops it at once too, without the grace period. The calls of aicr and deploy.sh
  have none: the Job's own deadline bounds them.
* exit codes follow the shell: a child killed by signal N reports 128+N.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
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

from aicr_runner import logs
from aicr_runner.children import blockscan
from aicr_runner.children.lines import LineSplitter
from aicr_runner.errors import InterruptedRun, ToolError
from aicr_runner.settings.config import ENV_PREFIX


class SafeStop(Protocol):
    """What stops a child only between two of its operations (deploy.sh's helm guard,
    ``helm.guard.HelmGuard``): a Protocol, so the children floor does not import helm."""

    def try_hold(self) -> bool: ...
    def request_stop(self) -> None: ...
    def release(self) -> None: ...


__all__ = [
    "CREDENTIAL_VARIABLES",
    "ProcessResult",
    "ProcessRunner",
    "SafeStop",
    "ShutdownController",
    "SubprocessRunner",
    "child_env",
]

#: Credentials that only the publish call may see: no other child needs them.
CREDENTIAL_VARIABLES = ("DOCKER_CONFIG", "COSIGN_IDENTITY_TOKEN")

#: The child's output pipe is widened to this where the kernel allows, so a
#: chatty child rarely waits for the relay; reads take up to ``_READ_CHUNK``.
_PIPE_BYTES = 1024 * 1024
_READ_CHUNK = 256 * 1024
#: A read this big means the child floods its output: tune malloc for the relay.
_FLOOD_BYTES = 64 * 1024
#: The per-step log file is written a block at a time (one pipe read at most).
_LOG_BUFFER_BYTES = 1 << 16


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int  # the child's code; 128+N for a signal, like a shell
    log_path: Path  # every line the child printed (stdout and stderr merged)
    interrupted: bool  # the runner received SIGTERM/SIGINT while it ran
    #: The runner stopped the child (grace ran out: TERM, then KILL). False when the
    #: child finished on its own, even if a shutdown was requested meanwhile.
    stopped: bool = False
    #: It was stopped between two helm operations (``safe_stop``), none was cut.
    safe_point: bool = False
    #: Its own deadline (``deadline_seconds``) passed: the runner stopped it.
    overdue: bool = False

    @property
    def stopped_by_shutdown(self) -> bool:
        """The runner stopped it because a shutdown was requested (the grace period ran
        out, a safe point was reached, or it was a question), not at its own deadline."""
        return self.stopped and not self.overdue


class ProcessRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_block: Callable[[str], None] | None = None,
        safe_stop: SafeStop | None = None,
        deadline_seconds: float | None = None,
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


@dataclass
class _Escalation:
    """Where a shutdown stands for one child: grace, then TERM, then KILL."""

    grace_deadline: float | None = None
    kill_deadline: float | None = None
    killed: bool = False
    safe_point: bool = False
    #: The call's own deadline (monotonic), and whether it passed.
    overdue_at: float | None = None
    overdue: bool = False


class _Delivery:
    """Whole lines of a child's output (each block ending in a newline): decoded,
    redacted, written to the log file and handed to the callbacks. A callback's
    error is kept (``error``), to be raised once the child is done."""

    def __init__(
        self,
        log: IO[bytes],
        redact: Callable[[str], str],
        *,
        on_line: Callable[[str], None] | None,
        on_block: Callable[[str], None] | None,
        one_pass_bytes: int,
    ) -> None:
        self.log = log
        self.redact = redact
        self.one_pass_bytes = one_pass_bytes
        self.on_line = on_line
        self.on_block = on_block
        self.error: BaseException | None = None

    def __call__(self, raw: bytes) -> None:
        if not raw:
            return
        if len(raw) >= _FLOOD_BYTES:
            # Only a flood of output needs it (deploy.sh's helm); an aicr
            # call's few lines never load ctypes. Cached: runs once.
            _keep_freed_memory()
        text = raw.decode("utf-8", errors="replace")
        # The raw bytes are the text's UTF-8 unless decoding replaced a byte or a line end changed.
        data: bytes | None = raw
        if "\r" in text:
            text, data = text.replace("\r\n", "\n"), None
        if "\ufffd" in text:
            data = None
        if self.redact is logs.redact and len(raw) >= self.one_pass_bytes:
            # A flood (deploy.sh's helm): one native pass finds the secrets and what
            # the relay looks for, and most blocks hold no secret. An aicr call's few
            # lines are redacted as they are (``plan`` never loads the matcher).
            if blockscan.scan(text, data).secret:
                text, data = logs.redact(text), None
                blockscan.scan(text)
        else:
            redacted = self.redact(text)
            text, data = redacted, data if redacted is text else None
        # Bytes: a text-mode file costs about five times the CPU per byte.
        self.log.write(text.encode() if data is None else data)
        if self.error is not None:
            return
        try:
            if self.on_block is not None:
                self.on_block(text)
            if self.on_line is not None:
                for line in text[:-1].split("\n"):
                    self.on_line(line)
        except Exception as exc:  # noqa: BLE001 - re-raised once the child is done
            self.error = exc


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
        redact: Callable[[str], str] = logs.redact,
        protected: Callable[[], Sequence[bytes]] = logs.protected_bytes,
        tick: Callable[[], None] = logs.flush_relay_if_due,
        one_pass_bytes: int = _FLOOD_BYTES,
    ) -> None:
        """``drain_seconds``: after the child exits, how long its output pipe may
        stay open (held by a leftover grandchild) before the group is killed.
        ``poll_seconds``: how often, at most, shutdown escalation and ``tick``
        (the pod-log flush) are looked at while a child runs; not a sleep.
        ``one_pass_bytes``: reads at least this big are searched by ``blockscan``
        (secrets and the relay's candidates in one pass) when ``redact`` is the
        logs module's; smaller ones are redacted by ``redact`` directly."""
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.shutdown = shutdown or ShutdownController()
        self.grace_seconds = grace_seconds
        self.kill_after_seconds = kill_after_seconds
        self.poll_seconds = poll_seconds
        self.drain_seconds = drain_seconds
        self.max_line_bytes = max_line_bytes
        #: Applied to every block of lines before it reaches the log file or a
        #: callback, so a credential a child echoes never lands anywhere.
        self.redact = redact
        #: Byte strings a cut of an over-long line must not split (the secrets).
        self.protected = protected
        self.tick = tick
        self.one_pass_bytes = one_pass_bytes

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_block: Callable[[str], None] | None = None,
        safe_stop: SafeStop | None = None,
        deadline_seconds: float | None = None,
    ) -> ProcessResult:
        if not argv:
            raise ValueError("argv must name a program")
        if self.shutdown.requested():
            raise InterruptedRun(f"shutdown requested ({self.shutdown.signal_name}); {argv[0]} was not started")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        process = _start(argv, env=env, cwd=cwd)
        escalation = _Escalation(overdue_at=None if deadline_seconds is None else time.monotonic() + deadline_seconds)
        try:
            with log_path.open("wb", buffering=_LOG_BUFFER_BYTES) as log:
                delivery = _Delivery(
                    log, self.redact, on_line=on_line, on_block=on_block, one_pass_bytes=self.one_pass_bytes
                )
                self._pump(process, delivery, escalation, safe_stop)
        finally:
            self._reap(process, safe_stop)
        if delivery.error is not None:
            raise delivery.error
        code = process.returncode
        return ProcessResult(
            exit_code=128 - code if code < 0 else code,
            log_path=log_path,
            interrupted=self.shutdown.requested(),
            stopped=escalation.kill_deadline is not None,
            safe_point=escalation.safe_point,
            overdue=escalation.overdue,
        )

    def _reap(self, process: subprocess.Popen[bytes], safe_stop: SafeStop | None) -> None:
        """The child's group gone (killed if still there), its pipe closed, the pod
        log flushed, the helm guard's lock let go."""
        assert process.stdout is not None  # noqa: S101 - stdout=PIPE in _start
        if process.poll() is None:
            _signal_group(process, signal.SIGKILL)
        process.wait()
        process.stdout.close()
        self.tick()
        if safe_stop is not None:
            safe_stop.release()

    def _pump(
        self,
        process: subprocess.Popen[bytes],
        deliver: Callable[[bytes], None],
        escalation: _Escalation,
        safe_stop: SafeStop | None = None,
    ) -> None:
        """Relay output until EOF and the child's exit, stepping the shutdown
        escalation between reads.

        The pipe and a pidfd of the child share one ``select``: whichever comes
        last (EOF or exit) ends the wait at once. Without pidfds (an old kernel)
        the exit is waited for with ``Popen.wait``, whose polling starts at
        sub-millisecond intervals.
        """
        fd = _nonblocking_pipe(process)
        splitter = LineSplitter(self.max_line_bytes, self.protected)
        pidfd = _pidfd(process)
        eof = False
        exited_at: float | None = None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ, "output")
                if pidfd is not None:
                    selector.register(pidfd, selectors.EVENT_READ, "exit")
                while True:
                    if eof and pidfd is None:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            process.wait(self.poll_seconds)
                    else:
                        eof = self._read_ready(selector, fd, splitter, deliver) or eof
                    self.tick()
                    now = time.monotonic()
                    if process.poll() is None:
                        self._escalate(process, escalation, now, safe_stop)
                        continue
                    if eof:
                        break
                    # The child is gone; a process it started may still hold the pipe.
                    exited_at = exited_at or now
                    if now - exited_at >= self.drain_seconds:
                        _signal_group(process, signal.SIGKILL)
                        break
        finally:
            if pidfd is not None:
                os.close(pidfd)
        deliver(splitter.finish())

    def _read_ready(
        self, selector: selectors.BaseSelector, fd: int, splitter: LineSplitter, deliver: Callable[[bytes], None]
    ) -> bool:
        """Read what is ready (output, or the child's exit), whole lines to ``deliver``;
        True at the output's EOF. A source that is done is unregistered."""
        eof = False
        for key, _ in selector.select(self.poll_seconds):
            # A pidfd stays readable once the child is gone; EOF stays EOF.
            chunk = b"" if key.data == "exit" else _read(fd, _READ_CHUNK)
            if chunk == b"":
                eof = eof or key.data == "output"
                selector.unregister(key.fd)
            elif chunk:
                deliver(splitter.feed(chunk))
        return eof

    def _escalate(
        self,
        process: subprocess.Popen[bytes],
        escalation: _Escalation,
        now: float,
        safe_stop: SafeStop | None = None,
    ) -> None:
        if escalation.overdue_at is not None and now >= escalation.overdue_at:
            escalation.overdue = True
        if not (self.shutdown.requested() or escalation.overdue) or escalation.killed:
            return
        if escalation.grace_deadline is None:
            escalation.grace_deadline = now + self.grace_seconds
            if safe_stop is not None:
                safe_stop.request_stop()
        if escalation.kill_deadline is None and safe_stop is not None and safe_stop.try_hold():
            # No helm operation in flight and none can start: stop here.
            escalation.safe_point = True
            _signal_group(process, signal.SIGTERM)
            escalation.kill_deadline = now + self.kill_after_seconds
        elif escalation.kill_deadline is None and (
            # A call with a deadline of its own is a question: nothing to let finish.
            now >= escalation.grace_deadline or self.shutdown.urgent or escalation.overdue_at is not None
        ):
            _signal_group(process, signal.SIGTERM)
            escalation.kill_deadline = now + self.kill_after_seconds
        elif escalation.kill_deadline is not None and now >= escalation.kill_deadline:
            _signal_group(process, signal.SIGKILL)
            escalation.killed = True


#: glibc's mallopt parameters (malloc.h) and the values the relay wants.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_FREED_BYTES = 16 * 1024 * 1024
_HEAP_ALLOCATIONS_UP_TO = 4 * 1024 * 1024


@functools.cache
def _keep_freed_memory() -> None:
    """Let glibc's malloc reuse the relay's blocks instead of faulting them in anew.

    Each read allocates and frees a few strings of up to about a MiB. With
    glibc's defaults such a block is a fresh mmap, or the heap top is trimmed
    after its free, so its pages fault in again on every read: relaying 300 MiB
    in the JSON format took 250 000 page faults and about a third of the relay's
    CPU. Blocks up to 4 MiB now stay on the heap and up to 16 MiB of freed memory
    is kept. Another C library (musl has no ``mallopt``) keeps its defaults.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _HEAP_ALLOCATIONS_UP_TO)
    mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES)


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


def _nonblocking_pipe(process: subprocess.Popen[bytes]) -> int:
    """The child's output pipe, non-blocking and widened."""
    assert process.stdout is not None  # noqa: S101 - stdout=PIPE in _start
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    _widen_pipe(fd)
    return fd


def _widen_pipe(fd: int) -> None:
    """Ask for a ``_PIPE_BYTES`` pipe. The kernel caps it at
    /proc/sys/fs/pipe-max-size, or refuses past a user's pipe budget; the
    default (64 KiB) then stays, which only costs speed."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


def _read(fd: int, size: int) -> bytes | None:
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None


def _pidfd(process: subprocess.Popen[bytes]) -> int | None:
    """A file descriptor that becomes readable when the child exits (Linux 5.3+)."""
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        return None


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group (helm, kubectl and friends)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
