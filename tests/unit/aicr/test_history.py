"""The verdict history: entries, the bound, regressions and recoveries, the CTRF baseline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aicr_runner.aicr import history
from aicr_runner.aicr.classify import CtrfVerdict


def ctrf(**statuses: str) -> bytes:
    tests = [{"name": name, "status": status} for name, status in statuses.items()]
    counts = {s: sum(1 for t in tests if t["status"] == s) for s in ("passed", "failed", "skipped", "pending", "other")}
    return json.dumps(
        {"reportFormat": "CTRF", "results": {"summary": {"tests": len(tests), **counts}, "tests": tests}}
    ).encode()


def entry(raw: bytes, digest: str = "sha256:a", when: str = "t1") -> dict[str, Any]:
    verdict = CtrfVerdict.parse(raw)
    return history.entry_of(verdict, when=when, run_by="cronjob", aicr_version="v0.11.1", recipe_digest=digest)


def test_an_entry_keeps_counts_and_the_passed_failed_and_other_names() -> None:
    e = entry(ctrf(**{"operator-health": "failed", "expected-resources": "passed", "check-nvidia-smi": "skipped"}))
    assert e["tests"] == 3
    assert e["counts"] == {"passed": 1, "failed": 1, "skipped": 1, "pending": 0, "other": 0}
    assert e["checks"] == {"passed": ["expected-resources"], "failed": ["operator-health"]}
    assert (e["runBy"], e["aicrVersion"], e["recipeDigest"]) == ("cronjob", "v0.11.1", "sha256:a")


@pytest.mark.parametrize("now", ["failed", "other"])
def test_a_check_that_passed_and_now_fails_or_crashes_is_a_regression(now: str) -> None:
    before = entry(ctrf(**{"operator-health": "passed", "expected-resources": "passed"}))
    after = entry(ctrf(**{"operator-health": now, "expected-resources": "passed"}), when="t2")
    change = history.change_since(before, after)
    assert change.regressed == ("operator-health",)
    assert change.recovered == ()


def test_a_check_that_failed_and_now_passes_is_a_recovery() -> None:
    before = entry(ctrf(**{"operator-health": "failed"}))
    change = history.change_since(before, entry(ctrf(**{"operator-health": "passed"}), when="t2"))
    assert (change.regressed, change.recovered) == ((), ("operator-health",))


def test_only_the_same_recipe_is_compared_and_the_first_verdict_changes_nothing() -> None:
    runs = [entry(ctrf(a="passed"), "sha256:a", "t1"), entry(ctrf(a="failed"), "sha256:b", "t2")]
    assert history.previous_of(runs, "sha256:a") == runs[0]
    assert history.previous_of(runs, "sha256:c") is None
    assert history.change_since(None, runs[1]) == history.Change()


def test_the_history_keeps_the_last_n() -> None:
    runs: list[dict[str, Any]] = []
    for i in range(5):
        runs = history.append(runs, {"time": f"t{i}"}, limit=3)
    assert [r["time"] for r in runs] == ["t2", "t3", "t4"]
    assert history.load(json.dumps(runs)) == runs
    with pytest.raises(ValueError, match="not a JSON list"):
        history.load('{"time": "t1"}')


def test_the_ctrf_gets_the_previous_report_as_its_baseline() -> None:
    raw = ctrf(a="failed")
    assert history.with_baseline(raw, None) == raw
    previous = entry(ctrf(a="passed"), when="2026-12-05T10:00:00Z")
    document = json.loads(history.with_baseline(raw, previous))
    assert document["baseline"]["reportId"] == "sha256:a@2026-12-05T10:00:00Z"
    assert document["baseline"]["timestamp"] == "2026-12-05T10:00:00Z"
    assert document["baseline"]["extra"]["checks"] == {"passed": ["a"]}
    assert document["results"] == json.loads(raw)["results"]


def rows(*tests: tuple[str, str]) -> bytes:
    """A CTRF report whose tests may repeat a name."""
    listed = [{"name": name, "status": status} for name, status in tests]
    statuses = ("passed", "failed", "skipped", "pending", "other")
    counts = {s: sum(1 for t in listed if t["status"] == s) for s in statuses}
    return json.dumps(
        {"reportFormat": "CTRF", "results": {"summary": {"tests": len(listed), **counts}, "tests": listed}}
    ).encode()


def test_a_duplicate_name_that_failed_once_is_failed_and_never_a_false_regression() -> None:
    """Issue 35 finding 13: the same report twice is no regression."""
    raw = rows(("operator-health", "passed"), ("operator-health", "failed"), ("b", "passed"))
    before, after = entry(raw), entry(raw, when="t2")
    assert before["checks"] == {"passed": ["b"], "failed": ["operator-health"]}
    assert history.change_since(before, after) == history.Change((), (), before)
    # An entry written before (the name under both) is read the same way.
    old = {**before, "checks": {"passed": ["b", "operator-health"], "failed": ["operator-health"]}}
    assert history.change_since(old, after).regressed == ()


@pytest.mark.parametrize(
    "text",
    [
        '[{"checks": ["operator-health"]}]',
        '[{"checks": {"passed": "operator-health"}}]',
        '[{"recipeDigest": 3}]',
        "[" * 100_000,
        "not json",
    ],
)
def test_a_damaged_history_is_refused_naming_the_damage(text: str) -> None:
    """Issue 35 finding 9: refused (the caller keeps it aside), never a crash later."""
    with pytest.raises(ValueError, match="the verdict history"):
        history.load(text)


def test_the_history_is_bounded_in_bytes_oldest_first_and_names_per_entry() -> None:
    """Issue 35 finding 8: 3,000 failed checks made a 660 KB history."""
    many = rows(*[(f"check-{i:04d}-{'x' * 150}", "failed") for i in range(3000)])
    one = entry(many)
    assert len(one["checks"]["failed"]) == history.NAMES_KEPT
    assert one["namesDropped"] == 3000 - history.NAMES_KEPT
    entries = [dict(one, time=f"t{i}") for i in range(20)]
    kept, dropped = history.within_bytes(entries)
    assert len(history.to_text(kept).encode()) <= history.HISTORY_BYTES
    assert dropped > 0
    assert [e["time"] for e in kept] == [f"t{i}" for i in range(dropped, 20)], "the oldest dropped first"
