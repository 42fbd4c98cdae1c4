"""The one budgeted retry: exponential back-off with jitter, ``Retry-After``, and a budget.

Used by the release download (``release``), the Kubernetes API writes (``kube``)
and the pack pull (``pack``), so all three retry the same statuses, honour a
server's ``Retry-After`` the same way, and never sleep past their budget. Each
caller keeps its own numbers (``WaitPolicy``, attempts, budget), its own log
line (``on_retry``) and its own wording of the final failure.

An attempt signals "waiting may fix this" by raising ``Transient``; anything
else it raises ends the loop at once. The loop ends with the last ``Transient``
when the attempts run out, or with ``OutOfBudget`` as soon as the next wait
would reach the deadline (that wait would leave no time for another attempt).
tenacity runs the loop; it is imported on the first retry loop, not with this
module (a ``plan`` never pays for it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import tenacity

__all__ = [
    "RETRYABLE_STATUS",
    "BudgetedRetry",
    "OutOfBudget",
    "RetryNote",
    "Transient",
    "WaitPolicy",
    "parse_retry_after",
]

#: HTTP answers that waiting may fix, for every caller: 408 (request timeout),
#: 429 (too many requests) and every 5xx (a server restarting, upgrading or
#: overloaded). Before they shared this set the pack did not retry 408 and the
#: release download retried only 500 and 502-504; the Kubernetes writes already
#: retried every 5xx.
RETRYABLE_STATUS = frozenset({408, 429, *range(500, 600)})

T = TypeVar("T")


class Transient(Exception):
    """One attempt failed in a way that waiting may fix. ``retry_after``: what the
    server asked for (seconds), which replaces the back-off for the next wait."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class OutOfBudget(Exception):
    """The next wait would reach the deadline. ``last`` is the failure it would
    have waited out; ``wait`` what it would have waited; ``remaining`` what was left."""

    def __init__(self, last: Transient, *, attempts: int, wait: float, remaining: float) -> None:
        super().__init__(last.reason)
        self.last = last
        self.attempts = attempts
        self.wait = wait
        self.remaining = remaining

    @property
    def asked(self) -> str:
        """The wait in words: ``Retry-After 30s`` or ``a 4.2s back-off``."""
        if self.last.retry_after is not None:
            return f"Retry-After {self.last.retry_after:g}s"
        return f"a {self.wait:.1f}s back-off"


@dataclass(frozen=True)
class RetryNote:
    """What ``on_retry`` is told before each wait: the attempt that failed, why,
    how long the wait is, and the failure itself (to release what it holds)."""

    attempt: int
    reason: str
    wait: float
    error: Transient


@dataclass(frozen=True)
class WaitPolicy:
    """``initial * 2 ** (attempt - 1)`` plus up to ``jitter`` seconds at random,
    at most ``maximum``; a server's Retry-After replaces it."""

    initial: float
    maximum: float
    jitter: float = 0.0

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1 for the first)."""
        import random

        exponential = self.initial * 2.0 ** min(attempt - 1, 64)  # no float overflow on a long loop
        return max(0.0, min(exponential + random.uniform(0, self.jitter), self.maximum))  # noqa: S311 - not crypto


@dataclass(frozen=True)
class BudgetedRetry:
    """``call(attempt)`` until it returns, raises something other than
    ``Transient``, runs out of ``attempts`` (None: no limit but the deadline), or
    would wait past ``deadline`` (a ``clock()`` value; None: no deadline)."""

    policy: WaitPolicy
    attempts: int | None = None
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] = time.sleep
    on_retry: Callable[[RetryNote], None] | None = None

    def call(self, attempt: Callable[[], T]) -> T:
        import tenacity

        def wait(state: tenacity.RetryCallState) -> float:
            if self.attempts is not None and state.attempt_number >= self.attempts:
                return 0.0  # the attempt limit stops the loop; no wait follows
            exc = state.outcome.exception() if state.outcome else None
            last = exc if isinstance(exc, Transient) else Transient(repr(exc))  # only Transient is retried
            pause = last.retry_after if last.retry_after is not None else self.policy.backoff(state.attempt_number)
            remaining = self.deadline - self.clock() if self.deadline is not None else None
            if remaining is not None and pause >= remaining:
                raise OutOfBudget(
                    last, attempts=state.attempt_number, wait=pause, remaining=max(remaining, 0.0)
                ) from exc
            return pause

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if self.on_retry is not None and isinstance(exc, Transient):
                self.on_retry(RetryNote(state.attempt_number, exc.reason, state.upcoming_sleep, exc))

        def pause(seconds: float) -> None:
            self.sleep(seconds)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts) if self.attempts is not None else tenacity.stop_never,
            wait=wait,
            retry=tenacity.retry_if_exception_type(Transient),
            before_sleep=before_sleep,
            sleep=pause,
            reraise=True,
        )
        return retrying(attempt)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # only for an HTTP-date (it imports socket): a rare answer

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
