"""The one budgeted retry the release download, the API writes and the pack pull share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aicr_runner.net.retry import RETRYABLE_STATUS, BudgetedRetry, OutOfBudget, RetryNote, Transient, WaitPolicy


class Clock:
    """A clock that moves only when the retry sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(*failures: Exception, result: str = "done") -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return result

    return calls, attempt


def test_transient_failures_are_retried_with_the_backoff_and_logged() -> None:
    clock, notes = Clock(), list[RetryNote]()
    calls, attempt = failing(Transient("HTTP 503"), Transient("reset"))
    retry = BudgetedRetry(WaitPolicy(1.0, 30.0), attempts=3, clock=clock, sleep=clock.sleep, on_retry=notes.append)
    assert retry.call(attempt) == "done"
    assert len(calls) == 3
    assert clock.sleeps == [1.0, 2.0]
    assert [(n.attempt, n.reason, n.wait) for n in notes] == [(1, "HTTP 503", 1.0), (2, "reset", 2.0)]


def test_the_last_transient_failure_ends_the_loop_without_a_wait() -> None:
    clock = Clock()
    _, attempt = failing(*(Transient(f"HTTP 50{n}") for n in range(3)))
    retry = BudgetedRetry(WaitPolicy(1.0, 30.0), attempts=3, clock=clock, sleep=clock.sleep)
    with pytest.raises(Transient, match="HTTP 502"):
        retry.call(attempt)
    assert clock.sleeps == [1.0, 2.0]


def test_anything_but_a_transient_failure_ends_the_loop_at_once() -> None:
    clock = Clock()
    calls, attempt = failing(ValueError("bad answer"))
    with pytest.raises(ValueError, match="bad answer"):
        BudgetedRetry(WaitPolicy(1.0, 30.0), attempts=5, clock=clock, sleep=clock.sleep).call(attempt)
    assert (len(calls), clock.sleeps) == (1, [])


def test_retry_after_replaces_the_backoff_and_a_wait_past_the_deadline_stops_now() -> None:
    clock = Clock()
    _, attempt = failing(Transient("HTTP 429", retry_after=3.0), Transient("HTTP 503", retry_after=60.0))
    retry = BudgetedRetry(WaitPolicy(1.0, 30.0), deadline=10.0, clock=clock, sleep=clock.sleep)
    with pytest.raises(OutOfBudget) as caught:
        retry.call(attempt)
    assert clock.sleeps == [3.0]
    stopped = caught.value
    assert (stopped.attempts, stopped.wait, stopped.remaining, stopped.last.reason) == (2, 60.0, 7.0, "HTTP 503")
    assert stopped.asked == "Retry-After 60s"


def test_a_backoff_past_the_deadline_is_said_as_a_backoff() -> None:
    clock = Clock()
    _, attempt = failing(Transient("reset"), Transient("reset"))
    with pytest.raises(OutOfBudget) as caught:
        BudgetedRetry(WaitPolicy(4.0, 30.0), deadline=5.0, clock=clock, sleep=clock.sleep).call(attempt)
    assert clock.sleeps == [4.0]
    assert caught.value.asked == "a 8.0s back-off"


@pytest.mark.parametrize("attempt", [1, 2, 5, 40, 5000])
def test_the_backoff_doubles_adds_at_most_the_jitter_and_stays_under_its_maximum(attempt: int) -> None:
    policy = WaitPolicy(initial=0.5, maximum=10.0, jitter=0.5)
    waits = [policy.backoff(attempt) for _ in range(200)]
    low = min(0.5 * 2 ** min(attempt - 1, 64), 10.0)
    assert all(low <= wait <= min(low + 0.5, 10.0) for wait in waits), (min(waits), max(waits))
    if low + 0.5 <= 10.0:
        assert len(set(waits)) > 1, "no jitter"


def test_every_caller_retries_the_same_statuses() -> None:
    assert {408, 429, 500, 502, 503, 504, 599} <= RETRYABLE_STATUS
    assert not {200, 301, 400, 401, 403, 404, 409, 422} & RETRYABLE_STATUS
