"""Issue 35 item 8: property tests of the verdict over CTRF shapes and exit codes.

Whatever aicr writes and however it exits: the verdict is green only when the
report is CTRF, agrees with itself, every counted check passed or was skipped or
pending, at least one passed, and aicr exited 0; nothing raises but
``UnreadableReport``; every reason is one printable bounded line. And the run's
outputs (termination message, status ConfigMap keys) stay within their bounds.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aicr_runner.aicr.classify import Outcome, classify_ctrf
from aicr_runner.aicr.ctrf import STATUSES, CtrfVerdict, UnreadableReport
from aicr_runner.outcome import termination_line
from aicr_runner.run.report import STATUS_BYTES, RunPhase, RunReport, StepRecord, StepStatus, status_data

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: A reason's bound: five names and messages per status listed, the rest counted.
REASON_LIMIT = 12_000

text = st.text(max_size=40)
hostile = st.text(alphabet=st.characters(codec=None, categories=None), max_size=60)
statuses = st.one_of(
    st.sampled_from(STATUSES), st.sampled_from(["error", "flaky", "FAILED", ""]), st.none(), st.integers()
)
names = st.one_of(text, hostile, st.none(), st.integers(), st.just("   "))
entries = st.one_of(
    st.fixed_dictionaries({"name": names, "status": statuses}, optional={"message": st.one_of(hostile, st.integers())}),
    st.fixed_dictionaries({"status": statuses}),
    text,
    st.integers(),
    st.none(),
)
counts = st.one_of(st.integers(-2, 12), st.floats(allow_nan=False), st.booleans(), st.none(), text)


def counted(tests: list[Any]) -> dict[str, Any]:
    rows = [t for t in tests if isinstance(t, dict)]
    return {"tests": len(tests)} | {s: sum(1 for t in rows if t.get("status") == s) for s in STATUSES}


@st.composite
def reports(draw: st.DrawFn) -> tuple[bytes, dict[str, Any] | None]:
    """A report as aicr might write it (bytes), and the document when it is JSON."""
    if draw(st.integers(0, 20)) == 0:
        raw = draw(st.binary(max_size=60))
        return raw, None
    tests = draw(st.lists(entries, max_size=8))
    summary = counted(tests)
    if draw(st.booleans()):
        summary = draw(st.dictionaries(st.sampled_from(["tests", *STATUSES]), counts)) | draw(
            st.fixed_dictionaries({}, optional={"tests": counts})
        )
    results: Any = {"summary": summary, "tests": tests}
    if draw(st.integers(0, 15)) == 0:
        results = draw(st.sampled_from([[], None, "x", {"summary": summary}, {"tests": tests}]))
    document = {"reportFormat": draw(st.sampled_from(["CTRF", "CTRF", "CTRF", "JUnit", None, 1])), "results": results}
    if document["reportFormat"] is None:
        del document["reportFormat"]
    return json.dumps(document).encode("utf-8", "surrogatepass"), document


def believable(document: dict[str, Any] | None) -> bool:
    """The oracle: a CTRF report that agrees with itself (independent of the parser)."""
    if document is None or document.get("reportFormat") != "CTRF" or not isinstance(document["results"], dict):
        return False
    summary, tests = document["results"].get("summary"), document["results"].get("tests")
    if not isinstance(summary, dict) or not isinstance(tests, list):
        return False
    for test in tests:
        if not isinstance(test, dict) or test.get("status") not in STATUSES:
            return False
        if not isinstance(test.get("name"), str) or not test["name"].strip():
            return False
    expected = counted(tests)
    return all(
        type(summary.get(k, 0 if k != "tests" else None)) is int and summary.get(k, 0) == expected[k] for k in expected
    )


def green(document: dict[str, Any] | None, exit_code: int) -> bool:
    if not believable(document) or exit_code != 0:
        return False
    assert document is not None
    found = {s: sum(1 for t in document["results"]["tests"] if t["status"] == s) for s in STATUSES}
    return found["passed"] > 0 and found["failed"] == 0 and found["other"] == 0


def read(raw: bytes) -> tuple[CtrfVerdict | None, str]:
    """The verdict, or None and why the report is unreadable (no other exception)."""
    try:
        return CtrfVerdict.parse(raw), ""
    except UnreadableReport as exc:
        return None, str(exc)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(report=reports(), exit_code=st.integers(0, 255), error=hostile)
def test_never_green_unless_every_counted_check_passed_and_aicr_exited_0(
    report: tuple[bytes, dict[str, Any] | None], exit_code: int, error: str
) -> None:
    raw, document = report
    verdict, refused = read(raw)
    if verdict is None:
        assert not believable(document), refused
        assert not CONTROL.search(refused)
        assert len(refused) <= REASON_LIMIT
        return
    assert believable(document)
    result = classify_ctrf(exit_code, verdict, phases=["deployment"], error=error)
    assert (result.outcome is Outcome.SUCCEEDED) is green(document, exit_code), result.reason
    assert (result.exit_code == 0) is (result.outcome is Outcome.SUCCEEDED)
    assert not CONTROL.search(result.reason), result.reason
    assert len(result.reason) <= REASON_LIMIT


def _report(message: str, warnings: list[str]) -> RunReport:
    steps = [StepRecord("validate", StepStatus.FAILED, exit_code=8, message=message)]
    return RunReport(
        "1", "v1.2.0", {"accelerator": "h100"}, steps, RunPhase.FAILED, exit_code=8, message=message, warnings=warnings
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    piece=hostile,
    repeat=st.integers(0, 20_000),
    warnings=st.lists(hostile, max_size=5),
)
@example(piece="x\x1b[2J" * 15, repeat=20_000, warnings=["w" * 60])
def test_every_output_stays_within_its_bound_and_one_line_outputs_hold_no_control_character(
    piece: str, repeat: int, warnings: list[str]
) -> None:
    """A message up to 1.2 MB (a check's 250 KB message, many times over)."""
    report = _report(piece * repeat, warnings * 40)
    line = termination_line(report)
    assert len(line.encode()) <= 4096
    assert not CONTROL.search(line)
    data = status_data(report)
    assert sum(len(v.encode("utf-8", "backslashreplace")) for v in data.values()) <= STATUS_BYTES
    assert "\x1b" not in data["summary.txt"]
    assert json.loads(data["report.json"])["phase"] == "Failed"
