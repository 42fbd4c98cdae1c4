"""A CTRF report (aicr validate ``--output``) read strictly: the verdict is counted
from its ``tests`` array and checked against its ``results.summary``.

A report that contradicts itself or is not CTRF is **unreadable**
(``UnreadableReport``), never a verdict: a summary that disagrees with the tests,
a count that is not a non-negative integer, ``tests`` that is not a list of
objects with a name and a status, a status outside CTRF's set, a
``reportFormat`` other than CTRF, JSON that is not strict (``Infinity``,
``1e400``) or nested too deep to read. The message names what is wrong.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aicr_runner.text import one_line

__all__ = ["STATUSES", "CtrfVerdict", "UnreadableReport"]

#: CTRF's test statuses (aicr-cli contract: passed|failed|skipped|pending|other).
STATUSES = ("passed", "failed", "skipped", "pending", "other")
#: Bounds on what a check contributes to messages (a check's message may be 250 KB).
NAME_LIMIT = 200
MESSAGE_LIMIT = 300
#: Names listed per status in a step message; the rest are counted ("and 12 more").
NAMES_SHOWN = 5
#: How aicr 0.11's validators log a skip (validators/runner.go): a skipped check
#: writes no termination message, so its CTRF entry has no ``message``; the reason
#: is only in the pod log aicr copies into ``stdout``, wrapped as ``[CODE] <reason>: skip``.
_SKIP_LOG = re.compile(r'\bmsg=SKIP reason="(?:\[[A-Z_]+\] )?(?P<reason>.*?)(?:: skip)?"\s*$')


class UnreadableReport(ValueError):
    """The CTRF report cannot be believed; the message says why (one line)."""


@dataclass(frozen=True)
class CtrfVerdict:
    """What a CTRF report says, counted from its tests: per status, the checks
    with aicr's message for each (names and messages printable and bounded)."""

    tests: int
    counts: dict[str, int]
    #: status -> [(check, aicr's message)], in report order.
    checks: dict[str, list[tuple[str, str]]]
    #: Names more than one test carries, each once, in report order.
    duplicates: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: bytes | str) -> CtrfVerdict:
        """Raises ``UnreadableReport`` (a ValueError) when ``raw`` is not a CTRF
        report that agrees with itself."""
        results = _results(_document(raw))
        summary, tests = results.get("summary"), results.get("tests")
        if not isinstance(summary, dict):
            raise UnreadableReport("not a CTRF report: results.summary is not an object")
        if not isinstance(tests, list):
            raise UnreadableReport(f"not a CTRF report: results.tests is {_kind(tests)}, not a list")
        rows = [_row(index, test) for index, test in enumerate(tests)]
        checks: dict[str, list[tuple[str, str]]] = {}
        for name, status, message in rows:
            checks.setdefault(status, []).append((name, message))
        counts = {status: len(checks.get(status, [])) for status in STATUSES}
        _agrees(_summary_counts(summary), len(rows), counts, checks)
        repeated = Counter(name for name, _, _ in rows)
        return cls(len(rows), counts, checks, tuple(name for name, n in repeated.items() if n > 1))

    def named(self, status: str, *, reasons: bool = False) -> str:
        """``operator-health, check-nvidia-smi`` (with ``reasons``: ``name (message)``)."""
        return named(self.checks.get(status, []), reasons=reasons)


def named(entries: list[tuple[str, str]], *, reasons: bool = False) -> str:
    """The first ``NAMES_SHOWN`` checks, the rest counted."""
    shown = [f"{name} ({message})" if reasons and message else name for name, message in entries[:NAMES_SHOWN]]
    more = len(entries) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _document(raw: bytes | str) -> dict[str, Any]:
    try:
        document = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise UnreadableReport("not a CTRF report: JSON nested too deep to read") from None
    except ValueError as exc:
        raise UnreadableReport(f"not a CTRF report: not JSON ({one_line(str(exc), MESSAGE_LIMIT)})") from None
    if not isinstance(document, dict):
        raise UnreadableReport(f"not a CTRF report: the document is {_kind(document)}, not an object")
    return document


def _results(document: dict[str, Any]) -> dict[str, Any]:
    form = document.get("reportFormat")
    if form != "CTRF":
        shown = repr(one_line(form, NAME_LIMIT)) if isinstance(form, str) else _kind(form)
        raise UnreadableReport(f"not a CTRF report: reportFormat is {shown}, not 'CTRF'")
    results = document.get("results")
    if not isinstance(results, dict):
        raise UnreadableReport(f"not a CTRF report: results is {_kind(results)}, not an object")
    return results


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {one_line(text, 40)} is out of range")
    return value


def _row(index: int, test: object) -> tuple[str, str, str]:
    """One test as (name, status, message), or UnreadableReport naming the entry."""
    if not isinstance(test, dict):
        raise UnreadableReport(f"results.tests[{index}] is {_kind(test)}, not an object")
    name, status = test.get("name"), test.get("status")
    if not isinstance(name, str) or not name.strip():
        raise UnreadableReport(f"results.tests[{index}] has no name")
    shown = one_line(name.strip(), NAME_LIMIT)
    if status not in STATUSES:
        what = repr(one_line(status, 40)) if isinstance(status, str) else _kind(status)
        raise UnreadableReport(
            f"check {shown} has status {what}, not one of CTRF's {', '.join(STATUSES)} (results.tests[{index}])"
        )
    message = test.get("message")
    text = message.strip() if isinstance(message, str) else ""
    if not text and status == "skipped":
        text = _skip_reason(test.get("stdout"))
    return shown, str(status), one_line(text, MESSAGE_LIMIT)


def _summary_counts(summary: dict[str, Any]) -> dict[str, int]:
    """The summary's counts (a status it leaves out counts 0; ``tests`` it must give)."""
    counts: dict[str, int] = {}
    for key in ("tests", *STATUSES):
        value = summary.get(key, None if key == "tests" else 0)
        if type(value) is not int or value < 0:
            shown = one_line(json.dumps(value), 40) if value is not None else "missing"
            raise UnreadableReport(f"results.summary.{key} is {shown}, not a non-negative integer")
        counts[key] = value
    return counts


def _agrees(summary: dict[str, int], total: int, counts: dict[str, int], checks: dict[str, Any]) -> None:
    """UnreadableReport when the summary's counts are not the tests' own."""
    wrong = [status for status in STATUSES if summary[status] != counts[status]]
    if summary["tests"] == total and not wrong:
        return
    said = ", ".join(f"{summary[s]} {s}" for s in wrong) or f"{summary['tests']} tests"
    held = "; ".join(f"{counts[s]} {s}" + (f" ({named(checks[s])})" if checks.get(s) else "") for s in wrong)
    held = held or f"{total} tests"
    raise UnreadableReport(f"results.summary says {said}, but its {total} tests hold {held}: it contradicts itself")


def _skip_reason(stdout: object) -> str:
    """The reason a 0.11 validator logged for skipping (``_SKIP_LOG``), or ``""``."""
    for line in stdout if isinstance(stdout, list) else []:
        found = _SKIP_LOG.search(str(line)) if isinstance(line, str) else None
        if found:
            return found["reason"]
    return ""


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
