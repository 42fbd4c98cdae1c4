"""What an exit code plus a few log lines mean. Pure functions, table-tested.

deploy.sh's exit code alone is not enough (the bash chart's deploy gate read the
log for the failure report too; docs/migration.md):
aicr 0.18 never exited non-zero, 0.20+ exits 0 under ``--best-effort`` even
when components failed, and 1.2 exits 2 when it withholds the DRA kubelet
plugin restart. ``DeployMarkers`` scans deploy.sh's output line by line for the
failure report and the DRA line; ``classify_deploy`` combines them.

aicr validate's exit code alone is not enough either (aicr-snapshot-validate
section 2.6): 0.11 exits 0 when a check crashed or never started (CTRF status
``other``) and reports a phase whose checks all skipped as passed, so when aicr
wrote a CTRF report ``classify_ctrf`` decides from its counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from aicr_runner.aicr.ctrf import CtrfVerdict, UnreadableReport, named
from aicr_runner.aicr.progress import ComponentTable, LineKind, component_line
from aicr_runner.children import blockscan
from aicr_runner.errors import ExitCode
from aicr_runner.text import one_line

__all__ = [
    "DRA_DEFERRED_MARKER",
    "FAILURE_REPORT_MARKERS",
    "Classification",
    "CtrfVerdict",
    "DeployMarkers",
    "Outcome",
    "UnreadableReport",
    "classify_ctrf",
    "classify_deploy",
    "classify_validate",
    "classify_verify",
]

#: 1.x summary line, and the 0.11 one.
FAILURE_REPORT_MARKERS = ("Deployment completed with failures", "WARNING: the following components failed:")
DRA_DEFERRED_MARKER = "DRA kubelet plugin restart blocked, retry needed for:"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFLIGHT_FAILED = ("Pre-flight checks failed",)
_ERROR_PREFIXES = ("Error", "ERROR")
#: Every line ``feed`` reacts to contains one of ``blockscan.ANYWHERE``, or starts (after
#: blanks) with one of ``LINE_STARTS`` (checked in tests/unit/children/test_relay.py), so
#: ``scan`` looks only at those lines, which ``blockscan`` finds in its one pass
#: over a block (the same pass that looks for secrets).
LINE_STARTS = blockscan.LINE_STARTS
#: And for aicr 0.11's deploy.sh (its component lines), only when the running
#: aicr prints no per-component results.
LEGACY_LINE_STARTS = blockscan.LEGACY_LINE_STARTS


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    WARNED = "warned"
    FAILED = "failed"
    #: validate only: no check ran (zero tests, or every one skipped or pending).
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Classification:
    outcome: Outcome
    exit_code: int  # what the Job should exit with if this is terminal (0 if not)
    reason: str  # one line for the operator
    interrupted: bool = False


@dataclass
class DeployMarkers:
    """Fed deploy.sh's output one line at a time (colour codes are ignored).

    Component lines go to ``components`` (``progress.component_line`` parses
    them); ``on_component(ended)`` is told after each one (True when a component
    ended with it), e.g. to publish the run's progress."""

    failure_report: bool = False
    dra_deferred: bool = False
    preflight_failed: bool = False
    #: Names from the failure report / DRA lines themselves.
    reported_failed: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    #: deploy.sh prints per-component result lines (1.x); 0.11 prints none, so
    #: a component counts as installed once the next one starts.
    results_reported: bool = True
    components: ComponentTable = field(default_factory=ComponentTable)
    on_component: Callable[[bool], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.results_reported:
            self.components.infer_success = True

    @property
    def total(self) -> int:
        return int(self.components.snapshot()["total"])

    @property
    def started(self) -> list[str]:
        return self.components.started()

    @property
    def installed(self) -> list[str]:
        return self.components.names("installed")

    @property
    def failed(self) -> list[str]:
        return self.components.names("failed")

    @property
    def all_failed(self) -> list[str]:
        """The components that failed, as deploy.sh's lines and its failure report named them, once each."""
        return _unique(self.failed + self.reported_failed)

    def feed(self, line: str) -> str | None:
        """Take one line; return the log level it deserves when it means something
        (a marker or an error), None for an ordinary line."""
        text = _ANSI.sub("", line).strip()
        if not text:
            return None
        level = self._report_line(text)
        if level is not None:
            return level
        if (component := component_line(text)) is not None:
            ended = self.components.apply(component)
            if self.on_component is not None:
                self.on_component(ended)
            if component.kind is LineKind.FAILED:
                return "error" if text.startswith(_ERROR_PREFIXES) else "warning"
            return "info"
        if text.startswith(_ERROR_PREFIXES):
            return "error"
        return None

    def _report_line(self, text: str) -> str | None:
        """The failure report, the DRA line and a failed pre-flight: "warning"."""
        for marker in FAILURE_REPORT_MARKERS:
            if marker in text:
                self.failure_report = True
                names = text.split(marker, 1)[1].removeprefix(" (--best-effort)").lstrip(":").split()
                self.reported_failed = _unique(self.reported_failed + names)
                return "warning"
        if DRA_DEFERRED_MARKER in text:
            self.dra_deferred = True
            names = text.split(DRA_DEFERRED_MARKER, 1)[1].split(" — ", 1)[0].split()
            self.deferred = _unique(self.deferred + names)
            return "warning"
        if any(marker in text for marker in _PREFLIGHT_FAILED):
            self.preflight_failed = True
            return "warning"
        return None

    def scan(self, text: str) -> list[tuple[int, int, str]]:
        """Feed a block of whole lines; return ``(start, end, level)`` of the lines
        that mean something, in order (``end`` is the index of their newline).

        Only the lines ``blockscan`` picked out (a candidate anywhere, a line
        start after blanks) are fed: an ordinary line costs nothing here.
        Colour codes could split a candidate, so a block that has any is fed
        line by line.
        """
        found = blockscan.scan(text)
        starts: Iterable[int]
        if found.colour:
            starts = _line_starts(text)
        elif self.results_reported or not found.legacy_lines:
            starts = found.lines
        else:
            starts = sorted((*found.lines, *found.legacy_lines))
        meaningful: list[tuple[int, int, str]] = []
        for start in starts:
            end = text.find("\n", start)
            end = len(text) if end == -1 else end
            level = self.feed(text[start:end])
            if level is not None:
                meaningful.append((start, end, level))
        return meaningful

    def counts(self) -> str:
        """``13/15 installed, 2 failed (nfd, aws-efa)`` for the operator."""
        failed = self.all_failed
        progress = self.components.snapshot()
        if not progress["components"]:
            text = "no component started"
        else:
            text = f"{progress['installed']}/{progress['total']} installed"
        if failed:
            text += f", {len(failed)} failed ({', '.join(failed)})"
        return text


def _line_starts(text: str) -> Iterator[int]:
    at = 0
    while at < len(text):
        yield at
        newline = text.find("\n", at)
        at = len(text) if newline == -1 else newline + 1


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def classify_deploy(exit_code: int, *, failure_report: bool, dra_deferred: bool, best_effort: bool) -> Classification:
    """deploy.sh's verdict from its exit code, its failure report and its DRA line
    (docs/runs.md, the deploy step)."""
    if exit_code == 0:
        return _deploy_exited_zero(failure_report=failure_report, dra_deferred=dra_deferred, best_effort=best_effort)
    if exit_code == 2:
        return _deploy_exited_two(failure_report=failure_report, dra_deferred=dra_deferred, best_effort=best_effort)
    reasons = {
        1: "a component, the pre-flight checks or deploy.sh's arguments failed",
        126: "deploy.sh could not run a program (exit 126: not executable)",
        127: "deploy.sh could not run a program (exit 127: not found)",
    }
    if exit_code == 130:
        return Classification(Outcome.FAILED, 130, "deploy.sh was interrupted (SIGINT/SIGTERM)", interrupted=True)
    return Classification(
        Outcome.FAILED, exit_code, reasons.get(exit_code, f"deploy.sh exited {exit_code} (unexpected)")
    )


def _deploy_exited_zero(*, failure_report: bool, dra_deferred: bool, best_effort: bool) -> Classification:
    if failure_report and best_effort:
        return Classification(Outcome.WARNED, 0, "deploy.sh reported component failures; continuing (--best-effort)")
    if failure_report:
        # aicr 0.18 exited 0 even without --best-effort.
        return Classification(Outcome.FAILED, 1, "deploy.sh reported component failures without --best-effort")
    if dra_deferred:
        return Classification(
            Outcome.WARNED, 0, "deploy.sh withheld the DRA kubelet-plugin restart but exited 0; re-run to finish it"
        )
    return Classification(Outcome.SUCCEEDED, 0, "deploy.sh installed every component")


def _deploy_exited_two(*, failure_report: bool, dra_deferred: bool, best_effort: bool) -> Classification:
    """Exit 2 continues only as the bash chart let it: DRA line, no failure
    report, --best-effort (every component installed, the DRA kubelet-plugin
    restart deferred)."""
    if dra_deferred and not failure_report and best_effort:
        return Classification(
            Outcome.WARNED,
            0,
            "deploy.sh deferred the DRA kubelet-plugin restart (exit 2); continuing to validation "
            "(--best-effort); re-run the install once the GPU operator has converged",
        )
    if not dra_deferred:
        reason = "deploy.sh exited 2 without its DRA retry line"
    elif failure_report:
        reason = "deploy.sh deferred the DRA kubelet-plugin restart and components failed"
    else:
        reason = "deploy.sh deferred the DRA kubelet-plugin restart (exit 2) without --best-effort; re-run later"
    return Classification(Outcome.FAILED, 2, reason)


#: aicr validate errors that end the run before any check ran (0.11 exits 8 for
#: them, wrapped in INTERNAL): what they mean, for the operator.
_VALIDATE_NO_VERDICT = (
    (
        ("failed to create kubernetes client", "failed to get kubernetes client", "failed to ensure validation"),
        "aicr validate could not reach the cluster, so no check ran and there is no verdict",
    ),
    (("readiness check failed",), "the readiness pre-flight failed, so no validator ran"),
)


def classify_validate(exit_code: int, *, error: str = "") -> Classification:
    """aicr validate's verdict from its exit code alone (docs/runs.md, the validate
    step; used when aicr wrote no CTRF report). ``error`` is
    aicr's ``command failed`` error, if any: exit 8 means failed checks only when
    it is not an error that stopped validate before the checks."""
    if exit_code == 0:
        return Classification(Outcome.SUCCEEDED, 0, "validation passed (every check passed or was skipped)")
    if exit_code == 9:
        return Classification(Outcome.FAILED, 9, "aicr validate was aborted (SIGINT/SIGTERM)", interrupted=True)
    for markers, meaning in _VALIDATE_NO_VERDICT:
        if any(marker in error for marker in markers):
            return Classification(Outcome.FAILED, exit_code, f"{meaning}: {error}")
    reasons = {
        2: "invalid input, or the readiness pre-flight failed: no validators ran",
        5: "aicr timed out before any check ran",
        8: "one or more checks failed or were inconclusive",
    }
    if exit_code == 8 and error and "did not pass" not in error:
        return Classification(Outcome.FAILED, 8, f"aicr validate failed before a verdict: {error}")
    reason = reasons.get(exit_code, f"unexpected exit {exit_code} from aicr validate")
    return Classification(Outcome.FAILED, exit_code, reason)


def classify_verify(
    exit_code: int, *, passed: str = "bundle verified: every file listed and matching, and nothing unlisted"
) -> Classification:
    """aicr verify's verdict from its exit code (4: a file added, removed or changed).
    ``passed`` says what
    a pass established for the running aicr (only 1.x is closed-world)."""
    if exit_code == 0:
        return Classification(Outcome.SUCCEEDED, 0, passed)
    reasons = {
        4: "integrity failure: a file was added, removed or changed after aicr bundle wrote checksums.txt",
        2: "trust policy not met (--min-trust-level)",
        3: "the bundle directory does not exist",
    }
    reason = reasons.get(exit_code, f"unexpected exit {exit_code} from aicr verify")
    return Classification(Outcome.FAILED, exit_code, reason)


#: The longest aicr error quoted in a verdict's reason.
_ERROR_LIMIT = 500


def classify_ctrf(exit_code: int, verdict: CtrfVerdict, *, phases: Iterable[str], error: str = "") -> Classification:
    """aicr validate's verdict when it wrote a CTRF report (counted from its tests).
    A failed or crashed check fails whatever the exit code (0.11 exits 0 on
    ``other``); no passed check is inconclusive; all passed is green only when aicr
    exited 0 too: a failing exit behind a passing report fails, and says both.
    ``phases`` are the phases asked for; ``error`` is aicr's ``command failed`` error."""
    counts = verdict.counts
    if counts["failed"] or counts["other"]:
        return _ctrf_failed(exit_code, verdict)
    duplicates = _duplicates(verdict)
    if not counts["passed"]:
        note = _exit_disagrees(exit_code, error, "its CTRF report has no failed or crashed check")
        reason = _no_check_ran(verdict, list(phases)) + duplicates + note
        return Classification(Outcome.INCONCLUSIVE, ExitCode.VALIDATION_INCONCLUSIVE, reason)
    held = "".join(
        f", {counts[status]} {status}: {verdict.named(status, reasons=True)}"
        for status in ("skipped", "pending")
        if counts[status]
    )
    reason = f"validation passed: {counts['passed']} of {verdict.tests} checks passed{held}{duplicates}"
    if exit_code != 0:
        said = f" ({one_line(error, _ERROR_LIMIT)})" if error else ""
        return Classification(
            Outcome.FAILED,
            exit_code,
            f"aicr validate exited {exit_code}{said} although its CTRF report says {reason}: "
            "a failing exit is never green",
        )
    return Classification(Outcome.SUCCEEDED, 0, reason)


def _ctrf_failed(exit_code: int, verdict: CtrfVerdict) -> Classification:
    counts = verdict.counts
    parts = []
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed: {verdict.named('failed', reasons=True)}")
    if counts["other"]:
        parts.append(
            f"{counts['other']} crashed or never started (status other): {verdict.named('other', reasons=True)}"
        )
    reason = f"validation failed: {'; '.join(parts)} (of {verdict.tests} checks, {counts['passed']} passed)"
    reason += _duplicates(verdict)
    if exit_code == 0:
        # aicr's own code for "one or more phases did not pass", so a gated run fails.
        reason += "; aicr validate exited 0 all the same: the report decides (exit 8)"
        return Classification(Outcome.FAILED, 8, reason)
    return Classification(Outcome.FAILED, exit_code, reason)


def _duplicates(verdict: CtrfVerdict) -> str:
    """The note naming check names more than one test carries."""
    if not verdict.duplicates:
        return ""
    return f"; check names reported more than once: {named([(n, '') for n in verdict.duplicates])}"


def _exit_disagrees(exit_code: int, error: str, fact: str) -> str:
    """The step message's note when aicr failed although its report has no failure."""
    if exit_code == 0:
        return ""
    said = f": {one_line(error, _ERROR_LIMIT)}" if error else ""
    return f"; aicr validate exited {exit_code}{said}, but {fact}"


def _no_check_ran(verdict: CtrfVerdict, phases: list[str]) -> str:
    """Why a validation is inconclusive, with the reasons aicr gave."""
    counts = verdict.counts
    named_phases = ", ".join(phases) or "the requested phases"
    if not verdict.tests:
        noun = "phase" if len(phases) == 1 else "phases"
        return (
            f"validation inconclusive: no check ran: the recipe lists no check for {noun} {named_phases} "
            "(CTRF tests: 0)"
        )
    held = [f"{counts[s]} {s}" for s in ("skipped", "pending") if counts[s]]
    listed = "; ".join(
        f"{status}: {verdict.named(status, reasons=True)}"
        for status in ("skipped", "pending")
        if verdict.checks.get(status)
    )
    return f"validation inconclusive: no check ran: {', '.join(held) or f'{verdict.tests} tests, none passed'}" + (
        f" ({listed})" if listed else ""
    )
