"""A run's verdict as a standard report object: pure mapping, no I/O.

Fleet tools (Policy Reporter, kube-state-metrics' custom-resource state, the
consumers OpenReports lists) read OpenReports ``Report`` (``openreports.io/v1alpha1``)
or its predecessor ``PolicyReport`` (``wgpolicyk8s.io/v1alpha2``); both have the
same result fields. ``report_body`` builds one from the CTRF report of aicr
validate and the deploy step's components, following the producers that got it
right (docs/reports.md):

- one name per release, results replaced in place each run (never appended);
- ``source: aicr`` on the report (OpenReports only: v1alpha2 has no such field)
  and on every result;
- CTRF ``passed/failed/skipped/pending/other`` -> ``pass/fail/skip/skip/error``;
  one ``deploy`` result per component (installed -> pass, failed -> fail);
- a ``message`` that stays the same from run to run for the same outcome (times
  and durations scrubbed), and a ``properties.resultID`` that hashes only what
  identifies the result and its outcome: Policy Reporter notifies on a result ID
  it has not seen, so a pass->fail flip is exactly one notification;
- bounded: at most ``MAX_RESULTS`` results and ``MAX_BODY_BYTES`` of JSON (etcd
  takes 1.5 MiB a request), failing results kept first; what was cut is said in
  the ``CUT_ANNOTATION`` annotation. The summary counts every result.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aicr_runner.text import cut, one_line, printable

__all__ = [
    "CUT_ANNOTATION",
    "LAST_RUN_ANNOTATION",
    "MAX_BODY_BYTES",
    "MAX_RESULTS",
    "OPENREPORTS",
    "REGRESSED_ANNOTATION",
    "RELEASE_LABEL",
    "SOURCE",
    "UPGRADE_BLOCKED_ANNOTATION",
    "WGPOLICY",
    "Entry",
    "ReportApi",
    "RunFacts",
    "deploy_entries",
    "report_body",
    "stable_message",
    "validation_entries",
]

SOURCE = "aicr"
LAST_RUN_ANNOTATION = "aicr.nvidia.com/last-run"
CUT_ANNOTATION = "aicr.nvidia.com/results-cut"
#: The checks that passed in the previous verdict of the same recipe and fail now
#: (comma-separated; absent when none did): what ``aicr-runner fleet`` counts.
REGRESSED_ANNOTATION = "aicr.nvidia.com/regressed"
#: How many components the upgrade check found blocked (absent when none): a number,
#: so kube-state-metrics can read it as a gauge (the chart's AicrUpgradeBlocked alert).
UPGRADE_BLOCKED_ANNOTATION = "aicr.nvidia.com/upgrade-blocked"
#: An annotation is read by people and tables: the names, cut to a line.
_MAX_REGRESSED_CHARS = 1024
#: Not ``app.kubernetes.io/instance``: Argo CD tracks (and prunes) objects by that
#: label, and the report is the runner's, not part of the rendered release.
RELEASE_LABEL = "aicr.nvidia.com/release"
MAX_RESULTS = 500
#: Well under etcd's 1.5 MiB request limit, with room for metadata and managedFields.
MAX_BODY_BYTES = 1_000_000
MAX_MESSAGE_CHARS = 512
MAX_PROPERTY_CHARS = 253

_CTRF_STATUS = {"passed": "pass", "failed": "fail", "skipped": "skip", "pending": "skip", "other": "error"}
_DEPLOY_STATUS = {"installed": "pass", "failed": "fail"}
#: Kept first when results are cut: what a reader must not miss.
_KEEP_ORDER = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "pass": 4}
_DEFAULT_MESSAGES = {
    "pass": "passed",
    "fail": "failed",
    "skip": "skipped",
    "error": "crashed or never started",
}
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?|\b\d{2}:\d{2}:\d{2}(\.\d+)?\b"
)
_DURATION = re.compile(r"\b\d+(\.\d+)?(ns|us|µs|ms|s|m|h)(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))*\b")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class ReportApi:
    group: str
    version: str
    kind: str
    plural: str
    #: OpenReports has a report-level ``source`` and ``configuration.limits``; v1alpha2 neither.
    openreports: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


OPENREPORTS = ReportApi("openreports.io", "v1alpha1", "Report", "reports", openreports=True)
WGPOLICY = ReportApi("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports", openreports=False)


@dataclass(frozen=True)
class RunFacts:
    """What every result's properties say about the run."""

    name: str
    namespace: str
    release: str
    aicr_version: str
    recipe: str
    run_by: str
    evidence_configmap: str
    when: datetime
    #: The checks that regressed since the previous verdict of the same recipe.
    regressed: tuple[str, ...] = ()
    #: The components an upgrade check found blocked (the install stopped before deploy).
    upgrade_blocked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """One result before it is a report result: the run facts are added by ``report_body``."""

    policy: str
    rule: str
    category: str
    result: str
    message: str
    #: Properties of this result only (a duration, the component's namespace).
    extra: Mapping[str, str] = field(default_factory=dict)
    #: When it started (epoch seconds); None: the run's time.
    started: int | None = None


def stable_message(text: str, result: str) -> str:
    """aicr's message without times or durations (they would make every run's
    message, and so its identity for some consumers, new), one line, bounded."""
    text = _DURATION.sub("<duration>", _TIMESTAMP.sub("<time>", text))
    text = printable(_SPACE.sub(" ", text).strip())
    if not text:
        return _DEFAULT_MESSAGES.get(result, result)
    return cut(text, MAX_MESSAGE_CHARS)


def validation_entries(ctrf: bytes | str) -> list[Entry]:
    """One entry per CTRF test; raises ValueError when ``ctrf`` is not a CTRF report."""
    try:
        tests = json.loads(ctrf)["results"].get("tests") or []
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a CTRF report ({type(exc).__name__}: {exc})") from exc
    entries = []
    for test in tests if isinstance(tests, list) else []:
        if not isinstance(test, dict):
            continue
        raw_name = str(test.get("name") or "?")
        name = one_line(raw_name, len(raw_name))  # printable, not cut: the budget cuts results instead
        suite = test.get("suite")
        phase = one_line(str(suite[0]), 200) if isinstance(suite, list) and suite else "validation"
        result = _CTRF_STATUS.get(str(test.get("status")), "error")
        extra = {"ctrfStatus": str(test.get("status") or "")}
        if isinstance(test.get("duration"), int | float):
            extra["durationMs"] = str(int(test["duration"]))
        start = test.get("start")
        started = int(start // 1000) if isinstance(start, int | float) and start > 0 else None
        message = stable_message(str(test.get("message") or ""), result)
        entries.append(Entry(name, name, phase, result, message, extra, started))
    return entries


def deploy_entries(progress: Mapping[str, Any] | None, failed: Iterable[str]) -> list[Entry]:
    """One ``deploy`` entry per component deploy.sh reported (the deploy step's
    progress rows), and one for each component its failure report named only."""
    entries: list[Entry] = []
    seen: set[str] = set()
    rows = (progress or {}).get("components") or []
    for row in rows:
        name, status = str(row.get("name") or "?"), str(row.get("status") or "")
        seen.add(name)
        result = _DEPLOY_STATUS.get(status, "error")
        extra = {"namespace": str(row.get("namespace") or ""), "deployStatus": status}
        if row.get("durationSeconds") is not None:
            extra["durationSeconds"] = str(row["durationSeconds"])
        entries.append(Entry(name, "install", "deploy", result, _deploy_message(status), extra))
    for name in failed:
        if name not in seen:
            seen.add(name)
            entries.append(
                Entry(name, "install", "deploy", "fail", _deploy_message("failed"), {"deployStatus": "failed"})
            )
    return entries


def _deploy_message(status: str) -> str:
    return {
        "installed": "installed by deploy.sh",
        "failed": "deploy.sh reported the install failed",
        "interrupted": "the install was interrupted",
        "running": "deploy.sh ended while the install was running",
    }.get(status, f"deploy.sh reported {status or 'nothing'}")


def result_id(facts: RunFacts, entry: Entry) -> str:
    """Deterministic: the report, the result's identity and its outcome. Never a
    time, a duration, the Job or the pod."""
    key = "\x00".join((facts.namespace, facts.name, entry.category, entry.policy, entry.rule, entry.result))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _bounded(value: str) -> str:
    return value if len(value) <= MAX_PROPERTY_CHARS else value[: MAX_PROPERTY_CHARS - 3] + "..."


def _result(facts: RunFacts, entry: Entry) -> dict[str, Any]:
    properties = {
        "resultID": result_id(facts, entry),
        "aicrVersion": facts.aicr_version,
        "recipe": facts.recipe,
        "runBy": facts.run_by,
        "evidenceConfigMap": facts.evidence_configmap,
        **entry.extra,
    }
    started = entry.started if entry.started is not None else int(facts.when.timestamp())
    return {
        "source": SOURCE,
        "policy": entry.policy,
        "rule": entry.rule,
        "category": entry.category,
        "result": entry.result,
        "message": entry.message,
        "timestamp": {"seconds": started, "nanos": 0},
        "properties": {key: _bounded(value) for key, value in properties.items() if value},
    }


def report_body(api: ReportApi, facts: RunFacts, entries: Sequence[Entry]) -> dict[str, Any]:
    """The whole object, for a server-side apply (which replaces ``results``: the
    list is atomic in both CRDs)."""
    results = [_result(facts, entry) for entry in entries]
    summary = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
    for entry in entries:
        summary[entry.result] = summary.get(entry.result, 0) + 1
    annotations = {LAST_RUN_ANNOTATION: facts.when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if facts.regressed:
        annotations[REGRESSED_ANNOTATION] = cut(",".join(facts.regressed), _MAX_REGRESSED_CHARS)
    if facts.upgrade_blocked:
        annotations[UPGRADE_BLOCKED_ANNOTATION] = str(len(facts.upgrade_blocked))
    labels = {"app.kubernetes.io/name": "nvidia-aicr", "app.kubernetes.io/managed-by": "aicr-runner"}
    if facts.release:
        labels[RELEASE_LABEL] = facts.release
    body: dict[str, Any] = {
        "apiVersion": api.api_version,
        "kind": api.kind,
        "metadata": {"name": facts.name, "namespace": facts.namespace, "labels": labels, "annotations": annotations},
    }
    if api.openreports:
        body["source"] = SOURCE
        body["configuration"] = {"limits": {"maxResults": MAX_RESULTS}}
    body["summary"] = summary
    kept, note = _cut(results, budget=MAX_BODY_BYTES - _size(body))
    if note:
        annotations[CUT_ANNOTATION] = note
    body["results"] = kept
    return body


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _cut(results: list[dict[str, Any]], *, budget: int) -> tuple[list[dict[str, Any]], str]:
    """At most MAX_RESULTS results within ``budget`` bytes, failing ones first, in
    their original order; and what was left out, said in one line."""
    ranked = sorted(range(len(results)), key=lambda i: (_KEEP_ORDER.get(results[i]["result"], 0), i))
    chosen: list[int] = []
    used = 0
    for index in ranked:
        size = _size(results[index]) + 1
        if len(chosen) >= MAX_RESULTS or used + size > budget:
            break
        chosen.append(index)
        used += size
    if len(chosen) == len(results):
        return results, ""
    left = [results[i]["result"] for i in sorted(set(range(len(results))) - set(chosen))]
    counts = ", ".join(f"{left.count(s)} {s}" for s in _KEEP_ORDER if s in left)
    note = (
        f"{len(left)} of {len(results)} results left out ({counts}): at most {MAX_RESULTS} results and "
        f"{MAX_BODY_BYTES} bytes, failing ones first; the summary counts all of them"
    )
    return [results[i] for i in sorted(chosen)], note
