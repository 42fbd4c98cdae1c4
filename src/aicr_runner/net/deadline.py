"""A wall-clock bound and SIGTERM for network work that the network can stall.

A release server or registry that sends a byte now and then keeps every
per-read timeout happy, so timeouts alone do not bound a download. ``bounded``
runs the work in a worker thread while the main thread watches the clock and
the shutdown flag (the signal handler runs promptly there, as it only waits on
an event). On shutdown the main thread stops waiting at once; past the budget it
lets the work end on its own for at most ``_SETTLE_SECONDS`` (so work that keeps
its own budget reports its own reason). Either way it then cancels the work's
``Cancellation``, gives it ``_STOP_SECONDS`` to stop and clean up, and raises.

The ``Cancellation`` is the work's to pass down: loops poll it between reads,
and whatever can block in a read (a socket waiting on a silent server)
registers an ``on_cancel`` callback that breaks the read (``shut_down``, the one
way both the release download and the pack pull break a read on a socket), so a
stalled or hung peer cannot keep the work alive. The worker is a
daemon thread, so even work that ignores its cancellation never holds up the
process's exit.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from aicr_runner.errors import InterruptedRun, RunnerError

if TYPE_CHECKING:
    import socket

__all__ = ["Cancellation", "bounded", "shut_down"]

T = TypeVar("T")

#: How often the main thread looks at the clock and the shutdown flag.
_POLL_SECONDS = 0.1
#: Past the budget, how long the work may still end on its own. Work that keeps
#: its own budget (the download's retry loop) gives up at about the same moment
#: with the precise reason ("connection refused" is not "the server is slow");
#: on a loaded node the two race, and the operator should get that reason.
_SETTLE_SECONDS = 0.5
#: After cancelling, how long the work gets to stop (close sockets, remove its
#: partial files). Work that honours its cancellation stops in milliseconds.
_STOP_SECONDS = 0.5


class Cancellation:
    """A one-way cancel flag with callbacks that break blocked waits.

    Calling it answers "cancelled yet?", so it is also the plain
    ``Callable[[], bool]`` that simple polling loops take.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next_key = 0

    def __call__(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Set the flag, then run every registered callback once (their errors are ignored)."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            with contextlib.suppress(Exception):
                callback()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True (at once) when cancelled."""
        return self._event.wait(seconds)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancel (at once if already cancelled); returns the unregistering function."""
        with self._lock:
            if not self._event.is_set():
                key = self._next_key
                self._next_key += 1
                self._callbacks[key] = callback
                return lambda: self._forget(key)
        with contextlib.suppress(Exception):
            callback()
        return lambda: None

    def _forget(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)


def _stop(cancellation: Cancellation, done: threading.Event) -> None:
    """Cancels the work and gives it ``_STOP_SECONDS`` to end on its own."""
    cancellation.cancel()
    done.wait(_STOP_SECONDS)


def thread_in_context(target: Callable[[], object], *, name: str) -> threading.Thread:
    """A daemon thread (not started) running ``target`` in a copy of the caller's
    context variables: what the caller bound for its events (the step) holds in the
    thread's events too, and what the thread binds stays its own."""
    return threading.Thread(target=contextvars.copy_context().run, args=(target,), name=name, daemon=True)


def bounded(
    work: Callable[[Cancellation], T],
    *,
    budget_seconds: float,
    interrupted: Callable[[], bool],
    over_budget: Callable[[], RunnerError],
    what: str,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``work(cancellation)`` within ``budget_seconds`` of wall-clock time.

    Returns what ``work`` returns or raises what it raises. Raises
    ``over_budget()`` past the budget and ``InterruptedRun`` (naming ``what``)
    when ``interrupted()`` turns true; in both cases the work's cancellation is
    set first and the work gets ``_STOP_SECONDS`` to stop.
    """
    cancellation = Cancellation()
    done = threading.Event()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            outcome.append(work(cancellation))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            failure.append(exc)
        finally:
            done.set()

    deadline = clock() + budget_seconds
    # In the caller's context: what it bound for its events (the step) holds in the work's too.
    thread = thread_in_context(worker, name=f"bounded {what}")
    thread.start()
    while not done.wait(_POLL_SECONDS):
        if interrupted():
            _stop(cancellation, done)
            raise InterruptedRun(f"interrupted: a shutdown was requested during {what}; it was stopped")
        if clock() >= deadline:
            if not done.wait(_SETTLE_SECONDS):
                _stop(cancellation, done)
                raise over_budget()
            break
    if failure:
        raise failure[0]
    return outcome[0]


def shut_down(sock: socket.socket) -> None:
    """Make a read blocked on ``sock`` return now, in whatever thread it waits.

    ``shutdown`` acts on the socket, not the descriptor: the reading thread
    still owns it, and closing it under that thread's feet could let the number
    be reused. The plain socket's shutdown, also for TLS: ``SSLSocket.shutdown``
    would drop the TLS state the reading thread is using. A socket already
    closed or never connected is left as it is.
    """
    import socket  # the callers have it loaded already; a plan never gets here

    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
