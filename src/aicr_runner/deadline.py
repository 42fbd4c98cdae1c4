"""A wall-clock bound and SIGTERM for network work that the network can stall.

A release server or registry that sends a byte now and then keeps every
per-read timeout happy, so timeouts alone do not bound a download. ``bounded``
runs the work in a worker thread while the main thread watches the clock and
the shutdown flag (the signal handler runs promptly there, as it only waits on
an event). On shutdown the main thread stops waiting and raises at once; past
the budget it lets the work end on its own for at most ``_SETTLE_SECONDS`` (so
work that keeps its own budget reports its own reason), then raises. The
worker is told through ``cancelled`` to stop at its next read and, being a
daemon thread, never holds up the process's exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from aicr_runner.errors import InterruptedRun, RunnerError

__all__ = ["bounded"]

T = TypeVar("T")

#: How often the main thread looks at the clock and the shutdown flag.
_POLL_SECONDS = 0.1
#: Past the budget, how long the work may still end on its own. Work that keeps
#: its own budget (the download's retry loop) gives up at about the same moment
#: with the precise reason ("connection refused" is not "the server is slow");
#: on a loaded node the two race, and the operator should get that reason.
_SETTLE_SECONDS = 0.5


def bounded(
    work: Callable[[Callable[[], bool]], T],
    *,
    budget_seconds: float,
    interrupted: Callable[[], bool],
    over_budget: Callable[[], RunnerError],
    what: str,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``work(cancelled)`` within ``budget_seconds`` of wall-clock time.

    Returns what ``work`` returns or raises what it raises. Raises
    ``over_budget()`` past the budget and ``InterruptedRun`` (naming ``what``)
    when ``interrupted()`` turns true.
    """
    cancel = threading.Event()
    done = threading.Event()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            outcome.append(work(cancel.is_set))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            failure.append(exc)
        finally:
            done.set()

    deadline = clock() + budget_seconds
    thread = threading.Thread(target=worker, name=f"bounded {what}", daemon=True)
    thread.start()
    while not done.wait(_POLL_SECONDS):
        if interrupted():
            cancel.set()
            raise InterruptedRun(f"interrupted: a shutdown was requested during {what}; it was stopped")
        if clock() >= deadline:
            if not done.wait(_SETTLE_SECONDS):
                cancel.set()
                raise over_budget()
            break
    if failure:
        raise failure[0]
    return outcome[0]
