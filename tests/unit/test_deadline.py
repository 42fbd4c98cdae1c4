"""deadline.bounded: a hard wall-clock bound that still reports the work's own reason."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from aicr_runner.deadline import bounded
from aicr_runner.errors import DownloadError, InterruptedRun


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


def test_a_shutdown_stops_at_once_without_the_settle_time() -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(InterruptedRun, match="during the download"):
        bounded(
            lambda cancelled: time.sleep(5),
            budget_seconds=60,
            interrupted=stop.is_set,
            over_budget=over_budget,
            what="the download",
        )
    assert time.monotonic() - started < 0.5


def test_work_within_the_budget_returns_its_value() -> None:
    assert (
        bounded(lambda cancelled: 7, budget_seconds=5, interrupted=lambda: False, over_budget=over_budget, what="x")
        == 7
    )
