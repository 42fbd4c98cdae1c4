"""The fleet table's rows: pure, from the objects a run leaves in a cluster.

A release's row comes from its verdict report (OpenReports ``Report`` or
wgpolicyk8s ``PolicyReport``: counts, aicr version, recipe, last run) or, where
a namespace has none, from its status ConfigMap (``report.json``: phase, aicr
version, end time; no counts). A row is green only when the verdict passed:
phase Succeeded, no failed check, no errored check. A cluster that could not be
read, or an object that makes no sense, is one row saying why (unreachable,
forbidden, error), never green. Every cell is bounded, printable (no control
character, escape sequence or invalid Unicode from a cluster reaches the
terminal) and redacted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aicr_runner import logs
from aicr_runner.kube.openreports import LAST_RUN_ANNOTATION, REGRESSED_ANNOTATION, RELEASE_LABEL
from aicr_runner.text import one_line

__all__ = ["Row", "is_green", "render_json", "render_table", "rows_from_configmaps", "rows_from_reports"]

_GREEN_PHASES = frozenset({"Succeeded"})
#: A table cell's bound (a context or namespace name fits); the detail's; a JSON field's.
CELL_LIMIT = 100
DETAIL_LIMIT = 300
JSON_LIMIT = 1000


@dataclass(frozen=True)
class Row:
    context: str
    namespace: str = "-"
    release: str = "-"
    phase: str = "-"
    aicr_version: str = "-"
    recipe: str = "-"
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    other: int | None = None
    #: Checks regressed since the previous verdict (the report's annotation); None ("-")
    #: for a status ConfigMap's row, which does not record them.
    regressions: int | None = None
    last_run: str = "-"
    source: str = "-"
    #: Why the row could not be read (empty when it was): unreachable, forbidden, error, none.
    problem_kind: str = ""
    #: What the failed read said (with ``problem_kind``).
    problem_detail: str = ""
    #: What else the row must say, e.g. ``upgrade blocked: gpu-operator v25.10.1 → v26.3.3``.
    detail: str = ""

    @property
    def problem(self) -> str:
        """The problem in one line (``forbidden: ...``), as the JSON output shows it."""
        return f"{self.problem_kind}: {self.problem_detail}" if self.problem_kind else ""


def is_green(row: Row) -> bool:
    return not row.problem_kind and row.phase in _GREEN_PHASES and not row.failed and not row.other


class _Unreadable(Exception):
    """An object whose fields make no sense; the message says which field."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(summary: Mapping[str, Any], key: str) -> int:
    """A summary count: absent is 0; anything but a non-negative integer makes the report unreadable."""
    value = summary.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Unreadable(f"summary.{key} is not a count")
    return value


def _phase(passed: int, failed: int, errored: int) -> str:
    """A report holds counts, not a phase: failed or errored checks are Failed,
    no passed check at all is Inconclusive (a green run means checks ran)."""
    if failed or errored:
        return "Failed"
    return "Succeeded" if passed else "Inconclusive"


def _first_property(body: Mapping[str, Any], key: str) -> str:
    results = body.get("results")
    for result in results if isinstance(results, list) else ():
        value = _mapping(_mapping(result).get("properties")).get(key)
        if value:
            return str(value)
    return "-"


def _regressions(annotations: Mapping[str, Any]) -> int:
    """The report names its regressed checks only when there are some."""
    return len([name for name in str(annotations.get(REGRESSED_ANNOTATION) or "").split(",") if name.strip()])


def _upgrade_detail(body: Mapping[str, Any]) -> str:
    """The upgrade check's blocked components (the ``upgrade-check`` results that fail)."""
    moves = []
    results = body.get("results")
    for item in results if isinstance(results, list) else ():
        result = _mapping(item)
        if result.get("category") == "upgrade-check" and result.get("result") == "fail":
            properties = _mapping(result.get("properties"))
            moves.append(f"{result.get('policy')} {properties.get('from') or '-'} → {properties.get('to') or '-'}")
    return f"upgrade blocked: {', '.join(moves)}" if moves else ""


def _where(body: Any) -> tuple[str, str]:
    """The namespace and name of an object, as far as it says."""
    metadata = _mapping(_mapping(body).get("metadata"))
    return str(metadata.get("namespace") or "-"), str(metadata.get("name") or "-")


def rows_from_reports(context: str, kind: str, reports: Iterable[Any]) -> list[Row]:
    """A row per report; a report that makes no sense is a row saying so."""
    rows = []
    for body in reports:
        try:
            rows.append(_report_row(context, kind, body))
        except _Unreadable as exc:
            namespace, name = _where(body)
            rows.append(
                Row(
                    context,
                    namespace=namespace,
                    source=kind,
                    problem_kind="error",
                    problem_detail=f"{kind} {name}: {exc}",
                )
            )
    return rows


def _report_row(context: str, kind: str, body: Any) -> Row:
    if not isinstance(body, Mapping):
        raise _Unreadable("not an object")
    metadata = _mapping(body.get("metadata"))
    annotations = _mapping(metadata.get("annotations"))
    summary = body.get("summary")
    if summary is not None and not isinstance(summary, Mapping):
        raise _Unreadable("summary is not an object")
    passed, failed, skipped, errored, warned = (
        _count(summary or {}, k) for k in ("pass", "fail", "skip", "error", "warn")
    )
    return Row(
        context=context,
        namespace=str(metadata.get("namespace") or "-"),
        release=str(_mapping(metadata.get("labels")).get(RELEASE_LABEL) or metadata.get("name") or "-"),
        phase=_phase(passed, failed, errored),
        aicr_version=_first_property(body, "aicrVersion"),
        recipe=_first_property(body, "recipe"),
        passed=passed,
        failed=failed,
        skipped=skipped,
        other=errored + warned,
        regressions=_regressions(annotations),
        last_run=str(annotations.get(LAST_RUN_ANNOTATION) or "-"),
        source=kind,
        detail=_upgrade_detail(body),
    )


def rows_from_configmaps(context: str, configmaps: Iterable[Any], skip: set[str]) -> list[Row]:
    """Status ConfigMaps (those holding ``report.json``) of namespaces not in ``skip``."""
    rows = []
    for body in configmaps:
        metadata = _mapping(_mapping(body).get("metadata"))
        namespace = str(metadata.get("namespace") or "-")
        text = _mapping(_mapping(body).get("data")).get("report.json")
        if namespace in skip or not isinstance(text, str):
            continue
        report = _status_report(text)
        labels = _mapping(metadata.get("labels"))
        # The status ConfigMap names no release (one per namespace): "-" unless a label says it.
        release = labels.get(RELEASE_LABEL) or labels.get("app.kubernetes.io/instance")
        rows.append(
            Row(
                context=context,
                namespace=namespace,
                release=str(release or "-"),
                phase=str(report.get("phase") or "unreadable"),
                aicr_version=str(report.get("aicrVersion") or "-"),
                last_run=str(report.get("endedAt") or report.get("startedAt") or "-"),
                source=f"ConfigMap/{metadata.get('name') or '-'}",
                detail=str(_mapping(report.get("upgradeCheck")).get("headline") or ""),
            )
        )
    return rows


def _status_report(text: str) -> Mapping[str, Any]:
    """The run report a status ConfigMap holds; empty (phase "unreadable") when it is not one."""
    try:
        report = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return _mapping(report)


def age(last_run: str, now: datetime) -> str:
    try:
        then = datetime.fromisoformat(last_run.replace("Z", "+00:00"))
        seconds = int((now - then.astimezone(UTC)).total_seconds())
    except (ValueError, OverflowError):
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _cells(row: Row, now: datetime) -> list[str]:
    def count(value: int | None) -> str:
        return "-" if value is None else str(value)

    phase = row.problem_kind or row.phase
    checks = "/".join(count(v) for v in (row.passed, row.failed, row.skipped, row.other))
    cells = [
        row.context,
        row.namespace,
        row.release,
        phase,
        row.aicr_version,
        row.recipe,
        checks,
        count(row.regressions),
        row.last_run,
        age(row.last_run, now),
    ]
    detail = row.problem_detail if row.problem_kind else row.detail
    return [_cell(cell, CELL_LIMIT) for cell in cells] + [_cell(detail, DETAIL_LIMIT)]


def _cell(text: str, limit: int) -> str:
    """What a cluster wrote, as one bounded, printable cell with no credential."""
    return one_line(logs.redact(text), limit)


_HEADER = ["CONTEXT", "NAMESPACE", "RELEASE", "PHASE", "AICR", "RECIPE", "PASS/FAIL/SKIP/OTHER"]
_HEADER += ["REGRESSIONS", "LAST RUN", "AGE", "DETAIL"]


def render_table(rows: Sequence[Row], now: datetime) -> str:
    table = [_HEADER] + [_cells(row, now) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADER))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table)


def _fields(row: Row) -> dict[str, Any]:
    """A row's fields as the JSON output names them: the problem in one line."""
    fields = asdict(row)
    del fields["problem_kind"], fields["problem_detail"]
    detail = fields.pop("detail")
    return {**fields, "problem": row.problem, "detail": detail}


def render_json(rows: Sequence[Row], now: datetime) -> str:
    items = [
        {k: _cell(v, JSON_LIMIT) if isinstance(v, str) else v for k, v in _fields(row).items()}
        | {"age": age(row.last_run, now), "green": is_green(row)}
        for row in rows
    ]
    return json.dumps({"rows": items, "green": all(is_green(r) for r in rows) and bool(rows)}, indent=2)
