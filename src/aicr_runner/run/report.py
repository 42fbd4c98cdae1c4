"""The run report: per step state, start, end, duration, exit code, outcome, message.

It is written to the status ConfigMap as each step starts and ends, so
``kubectl get cm <status> -o yaml`` shows progress live.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from aicr_runner.text import cut_bytes, one_line, printable

__all__ = [
    "RUN_MESSAGE_LIMIT",
    "STATUS_BYTES",
    "STEP_MESSAGE_LIMIT",
    "WARNINGS_SHOWN",
    "WARNING_LIMIT",
    "RunPhase",
    "RunReport",
    "StepRecord",
    "StepStatus",
    "progress_table",
    "run_message",
    "status_data",
    "step_message",
    "upgrade_lines",
    "upgrade_table",
    "utcnow",
    "warning_line",
]

#: The bounds of what the run report holds (characters, one printable line each):
#: a step's message, the run's message, a warning, and how many warnings are listed.
STEP_MESSAGE_LIMIT = 2000
RUN_MESSAGE_LIMIT = 4000
WARNING_LIMIT = 1000
WARNINGS_SHOWN = 40
#: report.json, summary.txt and phase together (UTF-8 bytes): within the status
#: ConfigMap's budget (921,600 bytes), so the final phase is always written.
STATUS_BYTES = 800_000


def utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z") if moment else None


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    WARNED = "warned"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class RunPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    #: Exit 0, but deploy.sh reported failed components (--best-effort) or validation
    #: failed without validate.failOnError: the bash chart's gates, never plain green.
    SUCCEEDED_WITH_FAILURES = "SucceededWithFailures"
    #: Exit 0, but validation ran no check (zero tests, or all skipped/pending) and
    #: validate.failOnError is off: a green run must mean checks ran and passed.
    SUCCEEDED_INCONCLUSIVE = "SucceededInconclusive"
    FAILED = "Failed"
    INTERRUPTED = "Interrupted"


@dataclass
class StepRecord:
    state: str
    status: StepStatus = StepStatus.PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    classification: str = ""
    message: str = ""
    #: The deploy step's components as deploy.sh reported them (``ComponentTable.snapshot``).
    progress: dict[str, Any] | None = None

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.ended_at:
            return round((self.ended_at - self.started_at).total_seconds(), 3)
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "status": self.status.value,
            "start": _iso(self.started_at),
            "end": _iso(self.ended_at),
            "durationSeconds": self.duration_seconds,
            "exitCode": self.exit_code,
            "classification": self.classification,
            "message": self.message,
            **({"progress": self.progress} if self.progress is not None else {}),
        }


@dataclass
class RunReport:
    runner_version: str
    aicr_version: str
    criteria: dict[str, str]
    steps: list[StepRecord]
    phase: RunPhase = RunPhase.RUNNING
    started_at: datetime = field(default_factory=utcnow)
    ended_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    #: aicr's list of supported criteria combinations when it rejected the criteria.
    supported_combinations: list[str] = field(default_factory=list)
    components: list[dict[str, str]] = field(default_factory=list)
    #: The fetch step's provenance check (mode, verified identity, log index, time).
    provenance: dict[str, Any] = field(default_factory=dict)
    #: Pending releases a dead predecessor left, and what this run did about them.
    recoveries: list[dict[str, str]] = field(default_factory=list)
    #: Components deploy.sh reported failed (a run under --best-effort may still exit 0).
    failed_components: list[str] = field(default_factory=list)
    #: The Job and pod writing this report (``job/pod``; empty outside a pod). Every
    #: run of a release writes the same status ConfigMap, and during an upgrade the
    #: old run's pod may still be stopping while the new one starts.
    run_by: str = ""
    #: What changed in the cluster since the previous snapshot (``fact: old -> new``), and since when.
    cluster_changes: list[str] = field(default_factory=list)
    cluster_changed_since: str = ""
    #: The upgrade check of an install that crossed an aicr pin: the moves and each component's verdict.
    upgrade_check: dict[str, Any] = field(default_factory=dict)

    def step(self, state: str) -> StepRecord:
        for record in self.steps:
            if record.state == state:
                return record
        raise KeyError(state)

    def to_dict(self) -> dict[str, Any]:
        # Built field by field (not dataclasses.asdict, whose deep copy was most
        # of the cost of a status write); the keys in their established order.
        return {
            "criteria": dict(self.criteria),
            "steps": [record.to_dict() for record in self.steps],
            "phase": self.phase.value,
            "message": self.message,
            "warnings": self.shown_warnings(),
            "components": [dict(row) for row in self.components],
            "provenance": dict(self.provenance),
            "recoveries": [dict(row) for row in self.recoveries],
            "startedAt": _iso(self.started_at),
            "endedAt": _iso(self.ended_at),
            "runnerVersion": self.runner_version,
            "aicrVersion": self.aicr_version,
            "exitCode": self.exit_code,
            "supportedCombinations": list(self.supported_combinations),
            "failedComponents": list(self.failed_components),
            "runBy": self.run_by,
            "clusterChanges": list(self.cluster_changes),
            "upgradeCheck": dict(self.upgrade_check),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def shown_warnings(self) -> list[str]:
        """The warnings, each one bounded line, the first ``WARNINGS_SHOWN`` (the rest counted)."""
        shown = [one_line(w, WARNING_LIMIT) for w in self.warnings[:WARNINGS_SHOWN]]
        more = len(self.warnings) - len(shown)
        return shown + ([f"and {more} more warnings (not listed: the report is bounded)"] if more > 0 else [])

    def summary_text(self) -> str:
        lines = [
            f"phase: {self.phase.value}",
            f"exitCode: {self.exit_code if self.exit_code is not None else '-'}",
            f"message: {self.message}",
            "criteria: " + ", ".join(f"{k}={v or '-'}" for k, v in self.criteria.items()),
            f"aicr: {self.aicr_version}",
            *([f"run by: {self.run_by}"] if self.run_by else []),
            "",
            f"{'STEP':<18} {'STATUS':<12} {'EXIT':>4} {'SECONDS':>8}  MESSAGE",
        ]
        for record in self.steps:
            exit_code = "" if record.exit_code is None else str(record.exit_code)
            seconds = "" if record.duration_seconds is None else f"{record.duration_seconds:.1f}"
            lines.append(f"{record.state:<18} {record.status.value:<12} {exit_code:>4} {seconds:>8}  {record.message}")
        for record in self.steps:
            if record.progress is not None:
                lines += ["", *progress_table(record.state, record.progress)]
        if self.cluster_changes:
            lines += ["", f"cluster changed since {self.cluster_changed_since or 'the previous snapshot'}:"]
            lines += [f"- {change}" for change in self.cluster_changes]
        if self.upgrade_check:
            lines += ["", *upgrade_lines(self.upgrade_check)]
        if self.failed_components:
            lines += ["", f"failed components: {', '.join(self.failed_components)}"]
        if self.provenance:
            facts = ", ".join(f"{k}={v}" for k, v in self.provenance.items() if v not in ("", None))
            lines += ["", f"aicr provenance: {facts}"]
        if self.warnings:
            lines += ["", "warnings:", *(f"- {w}" for w in self.shown_warnings())]
        if self.recoveries:
            lines += ["", "recovered releases:"]
            lines += [f"- {r['release']} ({r['status']}): {r['action']}" for r in self.recoveries]
        if self.supported_combinations:
            lines += ["", "supported combinations:", *(f"- {c}" for c in self.supported_combinations)]
        return printable("\n".join(lines) + "\n")


def upgrade_lines(check: dict[str, Any]) -> list[str]:
    """The summary's upgrade section: the crossing, then each component's verdict."""
    lines = [f"upgrade: {check.get('crossing', '')}"]
    if check.get("headline"):
        lines.append(check["headline"])
    if check.get("components"):
        lines += ["", upgrade_table(check["components"])]
    return lines


def upgrade_table(components: list[dict[str, Any]]) -> str:
    """The upgrade check per component: from, to, verdict, what to do."""
    rows = [("COMPONENT", "FROM", "TO", "VERDICT", "WHAT TO DO")]
    rows += [(c["component"], c["from"] or "-", c["to"] or "-", c["verdict"], c["todo"]) for c in components]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join([*(r[i].ljust(widths[i]) for i in range(4)), r[4]]).rstrip() for r in rows)


def progress_table(state: str, progress: dict[str, Any]) -> list[str]:
    """A step's per-component progress as a table (``summary.txt``)."""
    current = f", current: {progress['current']}" if progress.get("current") else ""
    lines = [
        f"{state} progress: {progress['done']}/{progress['total']} done "
        f"({progress['installed']} installed, {progress['failed']} failed){current}",
        f"{'COMPONENT':<32} {'STATUS':<12} {'ATTEMPTS':>8} {'SECONDS':>8}",
    ]
    for row in progress.get("components", []):
        seconds = "" if row.get("durationSeconds") is None else f"{row['durationSeconds']:.1f}"
        lines.append(f"{row['name']:<32} {row['status']:<12} {row['attempts']:>8} {seconds:>8}")
    return lines


def step_message(text: str) -> str:
    """A step's message as the report keeps it: one printable line, bounded."""
    return one_line(text, STEP_MESSAGE_LIMIT)


def warning_line(text: str) -> str:
    return one_line(text, WARNING_LIMIT)


def run_message(text: str) -> str:
    return one_line(text, RUN_MESSAGE_LIMIT)


def status_data(report: RunReport) -> dict[str, str]:
    """The status ConfigMap's keys, within ``STATUS_BYTES`` whatever the report holds:
    over it, report.json leaves out per-component rows and progress (said in its
    ``trimmed``), and summary.txt is cut."""
    data = {"report.json": report.to_json(), "summary.txt": report.summary_text(), "phase": report.phase.value}
    if _size(data) <= STATUS_BYTES:
        return data
    steps = [replace(r, progress=None, message=one_line(r.message, 500)) for r in report.steps]
    slim = replace(
        report, steps=steps, components=[], warnings=report.warnings[:5], message=one_line(report.message, 4000)
    )
    compact = {**slim.to_dict(), "trimmed": f"over {STATUS_BYTES} bytes: components, progress and warnings cut"}
    data["report.json"] = json.dumps(compact, indent=2, default=str)
    room = STATUS_BYTES - len(data["report.json"].encode("utf-8", "backslashreplace")) - len(data["phase"])
    data["summary.txt"] = cut_bytes(printable(data["summary.txt"]), max(room, 0))
    return data


def _size(data: dict[str, str]) -> int:
    return sum(len(v.encode("utf-8", "backslashreplace")) for v in data.values())
