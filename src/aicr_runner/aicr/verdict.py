"""The validate step's verdict: aicr validate's exit code and, when it wrote one,
its CTRF report.

When aicr wrote a report, its counts decide whatever the exit code (aicr 0.11
exits 0 when a check crashed or never started, and reports a phase whose checks
all skipped as passed): a failed or crashed check fails the step; no passed
check (zero tests, or only skipped/pending) is inconclusive, which fails the run
with its own exit code under validate.failOnError and is otherwise a warning
that keeps the run from plain ``Succeeded``. Without a report (a failed
pre-flight, an unreachable cluster) the exit code is all there is.
"""

from __future__ import annotations

from pathlib import Path

from aicr_runner.aicr import classify
from aicr_runner.aicr.classify import Outcome
from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import INCONCLUSIVE, StepResult
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
        report = classify.CtrfVerdict.parse(ctrf.read_bytes())
    except ValueError as exc:
        return StepResult.failed(
            ExitCode.AICR_CONTRACT_BROKEN,
            f"aicr broke its contract: aicr validate (exit {exit_code}) wrote {ctrf.name}, but it is {exc}; "
            "the verdict is unknown",
            classification="aicr-contract-broken",
        )
    phases = [phase.value for phase in settings.phases]
    verdict = classify.classify_ctrf(exit_code, report, phases=phases, error=error)
    if verdict.outcome is Outcome.FAILED:
        return StepResult.failed(verdict.exit_code, verdict.reason, classification="validation-failed")
    if verdict.outcome is Outcome.INCONCLUSIVE:
        if settings.fail_on_error:
            return StepResult.failed(verdict.exit_code, f"{verdict.reason} (validate.failOnError)", INCONCLUSIVE)
        return StepResult.warned(
            f"{verdict.reason}; validate.failOnError=true fails the run instead "
            f"(exit {int(ExitCode.VALIDATION_INCONCLUSIVE)})",
            classification=INCONCLUSIVE,
        )
    if verdict.outcome is Outcome.WARNED:
        return StepResult.warned(verdict.reason, classification="validation-passed")
    return StepResult.ok(verdict.reason, classification="validation-passed")
