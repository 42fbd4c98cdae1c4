"""deadline.bounded: a hard wall-clock bound that still reports the work's own reason."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from aicr_runner.errors import DownloadError, InterruptedRun
from aicr_runner.net.deadline import Cancellation, bounded, thread_in_context


def over_budget() -> DownloadError:
    return DownloadError("over budget")


def test_work_that_gives_up_just_past_the_budget_reports_its_own_reason() -> None:
    # The download's retry loop and the bound share one budget; on a loaded node the
    # loop's own "failed after 3 attempts (last error: ConnectError)" lands just late.
    def work(cancelled: Callable[[], bool]) -> None:
        time.sleep(0.4)
        raise DownloadError("failed after 3 attempts (last error: ConnectError)")

    with pytest.raises(DownloadError, match="ConnectError"):
        bounded(work, budget_seconds=0.2, interrupted=lambda: False, over_budget=over_budget, what="x")


def test_stalled_work_is_cut_at_the_budget_plus_the_settle_time_and_told_to_stop() -> None:
    told = threading.Event()

    def work(cancelled: Callable[[], bool]) -> None:
        while not cancelled():
            time.sleep(0.01)
        told.set()

    started = time.monotonic()
    with pytest.raises(DownloadError, match="over budget"):
        bounded(work, budget_seconds=0.3, interrupted=lambda: False, over_budget=over_budget, what="x")
    elapsed = time.monotonic() - started
    assert 0.3 + 0.5 <= elapsed < 0.3 + 0.5 + 0.5, elapsed
    assert told.wait(1.0), "the worker was told to stop"


def test_a_shutdown_breaks_a_blocked_read_and_returns_once_the_work_has_ended() -> None:
    """No settle time on shutdown; the work's callback breaks its blocked read, so
    the worker has ended (its cleanup done, no thread left) when bounded raises."""
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    read_broken = threading.Event()
    ended = threading.Event()

    def work(cancelled: Cancellation) -> None:
        cancelled.on_cancel(read_broken.set)
        try:
            read_broken.wait(30)  # a read on a socket that stays silent
        finally:
            ended.set()

    started = time.monotonic()
    with pytest.raises(InterruptedRun, match="during the download"):
        bounded(work, budget_seconds=60, interrupted=stop.is_set, over_budget=over_budget, what="the download")
    assert time.monotonic() - started < 0.2 + 0.3
    assert ended.is_set()


def test_work_that_ignores_its_cancellation_holds_bounded_only_for_the_stop_grace() -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(InterruptedRun):
        bounded(
            lambda cancelled: time.sleep(5),
            budget_seconds=60,
            interrupted=stop.is_set,
            over_budget=over_budget,
            what="the download",
        )
    assert time.monotonic() - started < 0.2 + 0.5 + 0.3


def test_a_cancellation_runs_each_callback_once_even_after_the_fact_and_not_when_forgotten() -> None:
    cancellation = Cancellation()
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        raise OSError("the socket is already closed")

    cancellation.on_cancel(failing)
    cancellation.on_cancel(lambda: calls.append("second"))
    forget = cancellation.on_cancel(lambda: calls.append("forgotten"))
    forget()
    assert not cancellation()

    cancellation.cancel()
    cancellation.cancel()
    cancellation.on_cancel(lambda: calls.append("late"))

    assert cancellation()
    assert cancellation.wait(10)
    assert calls == ["failing", "second", "late"]


def test_work_within_the_budget_returns_its_value() -> None:
    assert (
        bounded(lambda cancelled: 7, budget_seconds=5, interrupted=lambda: False, over_budget=over_budget, what="x")
        == 7
    )


def test_the_work_runs_in_the_callers_context() -> None:
    """What the caller bound in context variables (the step its events carry)
    holds in the work's thread too."""
    import contextvars

    step = contextvars.ContextVar("step", default="none")
    token = step.set("pack")
    try:
        seen = bounded(
            lambda _cancellation: step.get(),
            budget_seconds=60,
            interrupted=lambda: False,
            over_budget=lambda: DownloadError("over budget"),
            what="x",
        )
    finally:
        step.reset(token)
    assert seen == "pack"


def test_a_thread_in_context_sees_the_callers_bindings_and_keeps_its_own() -> None:
    import contextvars

    step = contextvars.ContextVar("step", default="none")
    seen: list[str] = []

    def work() -> None:
        seen.append(step.get())
        step.set("inside")
        seen.append(step.get())

    token = step.set("deploy")
    try:
        thread = thread_in_context(work, name="probe")
        step.set("changed after the thread was made")
        thread.start()
        thread.join(timeout=30)
        after = step.get()
    finally:
        step.reset(token)
    assert (thread.daemon, thread.name) == (True, "probe")
    assert seen == ["deploy", "inside"]
    assert after == "changed after the thread was made"
