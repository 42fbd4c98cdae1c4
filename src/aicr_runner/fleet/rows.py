"""The fleet table's rows: pure, from the objects a run leaves in a cluster.

A release's row comes from its verdict report (OpenReports ``Report`` or
wgpolicyk8s ``PolicyReport``: counts, aicr version, recipe, last run) or, where
a namespace has none, from its status ConfigMap (``report.json``: phase, aicr
version, end time; no counts). A row is green only when the verdict passed:
phase Succeeded, no failed check, no errored check. A cluster that could not be
read is one row saying why (unreachable, forbidden, error), never green.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aicr_runner.kube.openreports import LAST_RUN_ANNOTATION, REGRESSED_ANNOTATION, RELEASE_LABEL

__all__ = ["Row", "is_green", "render_json", "render_table", "rows_from_configmaps", "rows_from_reports"]

_GREEN_PHASES = frozenset({"Succeeded"})


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
    #: Why the cluster could not be read (empty when it was).
    problem: str = ""
    #: What else the row must say, e.g. ``upgrade blocked: gpu-operator v25.10.1 → v26.3.3``.
    detail: str = ""


def is_green(row: Row) -> bool:
    return not row.problem and row.phase in _GREEN_PHASES and not row.failed and not row.other


def _phase(summary: Mapping[str, Any]) -> str:
    """A report holds counts, not a phase: failed or errored checks are Failed,
    no passed check at all is Inconclusive (a green run means checks ran)."""
    if int(summary.get("fail") or 0) or int(summary.get("error") or 0):
        return "Failed"
    return "Succeeded" if int(summary.get("pass") or 0) else "Inconclusive"


def _first_property(body: Mapping[str, Any], key: str) -> str:
    for result in body.get("results") or ():
        value = (result.get("properties") or {}).get(key)
        if value:
            return str(value)
    return "-"


def _regressions(annotations: Mapping[str, Any]) -> int:
    """The report names its regressed checks only when there are some."""
    return len([name for name in str(annotations.get(REGRESSED_ANNOTATION) or "").split(",") if name.strip()])


def _upgrade_detail(body: Mapping[str, Any]) -> str:
    """The upgrade check's blocked components (the ``upgrade-check`` results that fail)."""
    moves = []
    for result in body.get("results") or ():
        if result.get("category") == "upgrade-check" and result.get("result") == "fail":
            properties = result.get("properties") or {}
            moves.append(f"{result.get('policy')} {properties.get('from') or '-'} → {properties.get('to') or '-'}")
    return f"upgrade blocked: {', '.join(moves)}" if moves else ""


def rows_from_reports(context: str, kind: str, reports: Iterable[Mapping[str, Any]]) -> list[Row]:
    rows = []
    for body in reports:
        metadata = body.get("metadata") or {}
        summary = body.get("summary") or {}
        rows.append(
            Row(
                context=context,
                namespace=str(metadata.get("namespace") or "-"),
                release=str((metadata.get("labels") or {}).get(RELEASE_LABEL) or metadata.get("name") or "-"),
                phase=_phase(summary),
                aicr_version=_first_property(body, "aicrVersion"),
                recipe=_first_property(body, "recipe"),
                passed=int(summary.get("pass") or 0),
                failed=int(summary.get("fail") or 0),
                skipped=int(summary.get("skip") or 0),
                other=int(summary.get("error") or 0) + int(summary.get("warn") or 0),
                regressions=_regressions(metadata.get("annotations") or {}),
                last_run=str((metadata.get("annotations") or {}).get(LAST_RUN_ANNOTATION) or "-"),
                source=kind,
                detail=_upgrade_detail(body),
            )
        )
    return rows


def rows_from_configmaps(context: str, configmaps: Iterable[Mapping[str, Any]], skip: set[str]) -> list[Row]:
    """Status ConfigMaps (those holding ``report.json``) of namespaces not in ``skip``."""
    rows = []
    for body in configmaps:
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "-")
        text = (body.get("data") or {}).get("report.json")
        if namespace in skip or not isinstance(text, str):
            continue
        try:
            report = json.loads(text)
        except ValueError:
            report = {}
        labels = metadata.get("labels") or {}
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
                detail=str((report.get("upgradeCheck") or {}).get("headline") or ""),
            )
        )
    return rows


def age(last_run: str, now: datetime) -> str:
    try:
        then = datetime.fromisoformat(last_run.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = int((now - then.astimezone(UTC)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _cells(row: Row, now: datetime) -> list[str]:
    def count(value: int | None) -> str:
        return "-" if value is None else str(value)

    phase = row.problem.split(":", 1)[0] if row.problem else row.phase
    checks = "/".join(count(v) for v in (row.passed, row.failed, row.skipped, row.other))
    return [
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
        row.problem.split(":", 1)[1].strip() if ":" in row.problem else row.detail,
    ]


_HEADER = ["CONTEXT", "NAMESPACE", "RELEASE", "PHASE", "AICR", "RECIPE", "PASS/FAIL/SKIP/OTHER"]
_HEADER += ["REGRESSIONS", "LAST RUN", "AGE", "DETAIL"]


def render_table(rows: Sequence[Row], now: datetime) -> str:
    table = [_HEADER] + [_cells(row, now) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADER))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table)


def render_json(rows: Sequence[Row], now: datetime) -> str:
    items = [{**asdict(row), "age": age(row.last_run, now), "green": is_green(row)} for row in rows]
    return json.dumps({"rows": items, "green": all(is_green(r) for r in rows) and bool(rows)}, indent=2)
