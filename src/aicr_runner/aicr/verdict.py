"""The validate step's verdict: aicr validate's exit code and, when it wrote one,
its CTRF report.

When aicr wrote a report, the checks counted from its tests decide (aicr 0.11
exits 0 when a check crashed or never started, and reports a phase whose checks
all skipped as passed): a failed or crashed check fails the step; every counted
check passed is green only when aicr exited 0 too; no passed check (zero tests,
or only skipped/pending) is inconclusive; a report that is not CTRF or contradicts
itself is unreadable. Inconclusive and unreadable fail the run with their own
exit code under validate.failOnError and are otherwise a warning that keeps the
run from plain ``Succeeded``. Without a report (a failed pre-flight, an
unreachable cluster) the exit code is all there is.
"""

from __future__ import annotations

from pathlib import Path

from aicr_runner.aicr import classify
from aicr_runner.aicr.classify import Outcome
from aicr_runner.aicr.ctrf import CtrfVerdict, UnreadableReport
from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import INCONCLUSIVE, UNREADABLE, StepResult
from aicr_runner.settings.config import ValidateSettings

__all__ = ["validate_result"]


def validate_result(exit_code: int, ctrf: Path, settings: ValidateSettings, *, error: str = "") -> StepResult:
    """``error`` is aicr's ``command failed`` error, if any. An interrupted aicr
    (exit 9) is judged by its exit code: its report, if any, is not the verdict."""
    if exit_code != 9 and ctrf.is_file():
        return _from_ctrf(exit_code, ctrf, settings, error)
    if exit_code == 0:
        return StepResult.failed(
            ExitCode.AICR_CONTRACT_BROKEN,
            f"aicr broke its contract: aicr validate exited 0 but wrote no {ctrf.name} (--output {ctrf}); "
            "the verdict is unknown",
            classification="aicr-contract-broken",
        )
    verdict = classify.classify_validate(exit_code, error=error)
    return StepResult.failed(exit_code, verdict.reason, classification="validation-failed")


def _from_ctrf(exit_code: int, ctrf: Path, settings: ValidateSettings, error: str) -> StepResult:
    try:
        report = CtrfVerdict.parse(ctrf.read_bytes())
    except (UnreadableReport, OSError) as exc:
        return _unreadable(exit_code, ctrf, settings, str(exc))
    phases = [phase.value for phase in settings.phases]
    verdict = classify.classify_ctrf(exit_code, report, phases=phases, error=error)
    if verdict.outcome is Outcome.FAILED:
        return StepResult.failed(verdict.exit_code, verdict.reason, classification="validation-failed")
    if verdict.outcome is Outcome.INCONCLUSIVE:
        return _held(settings, verdict.reason, INCONCLUSIVE, ExitCode.VALIDATION_INCONCLUSIVE)
    return StepResult.ok(verdict.reason, classification="validation-passed")


def _unreadable(exit_code: int, ctrf: Path, settings: ValidateSettings, why: str) -> StepResult:
    """A report that cannot be believed: no verdict, never green."""
    reason = f"validation unreadable: aicr validate (exit {exit_code}) wrote {ctrf.name}, but {why}; no verdict"
    return _held(settings, reason, UNREADABLE, ExitCode.AICR_CONTRACT_BROKEN)


def _held(settings: ValidateSettings, reason: str, classification: str, code: ExitCode) -> StepResult:
    """Neither passed nor failed: fails the run under validate.failOnError, else a warning
    that keeps the run from plain ``Succeeded``."""
    if settings.fail_on_error:
        return StepResult.failed(code, f"{reason} (validate.failOnError)", classification)
    return StepResult.warned(
        f"{reason}; validate.failOnError=true fails the run instead (exit {int(code)})",
        classification=classification,
    )
