"""The validate step's verdict: the CTRF report when aicr wrote one, the exit code when it did not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicr_runner.aicr.verdict import validate_result
from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import INCONCLUSIVE, UNREADABLE
from aicr_runner.run.report import StepStatus
from aicr_runner.settings.config import ValidateSettings, load

READINESS = (
    "[INTERNAL] validation failed: [INVALID_REQUEST] readiness check failed: OS.release.ID expected ubuntu, got debian"
)


def settings(*, fail_on_error: bool) -> ValidateSettings:
    env = {
        "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
        "AICR_RUNNER_VALIDATE__FAIL_ON_ERROR": str(fail_on_error).lower(),
    }
    return load(env).validate


def write_ctrf(path: Path, *statuses: str) -> Path:
    tests = [{"name": f"check-{i}", "status": status, "message": ""} for i, status in enumerate(statuses)]
    summary = {"tests": len(tests)} | {
        k: statuses.count(k) for k in ("passed", "failed", "skipped", "pending", "other")
    }
    path.write_text(json.dumps({"reportFormat": "CTRF", "results": {"summary": summary, "tests": tests}}))
    return path


@pytest.mark.parametrize("fail_on_error", [True, False])
def test_zero_tests_is_inconclusive_exit_32_under_fail_on_error_else_a_warning(
    tmp_path: Path, fail_on_error: bool
) -> None:
    result = validate_result(0, write_ctrf(tmp_path / "ctrf.json"), settings(fail_on_error=fail_on_error))
    assert result.classification == INCONCLUSIVE
    assert result.reason.startswith(
        "validation inconclusive: no check ran: the recipe lists no check for phase deployment (CTRF tests: 0)"
    )
    if fail_on_error:
        assert (result.status, result.exit_code) == (StepStatus.FAILED, ExitCode.VALIDATION_INCONCLUSIVE)
        assert result.reason.endswith("(validate.failOnError)")
    else:
        assert (result.status, result.exit_code) == (StepStatus.WARNED, 0)
        assert result.reason.endswith("; validate.failOnError=true fails the run instead (exit 32)")


@pytest.mark.parametrize(
    ("exit_code", "statuses", "status", "job_code", "classification"),
    [
        (0, ("skipped", "skipped"), StepStatus.FAILED, 32, INCONCLUSIVE),
        (0, ("passed", "other"), StepStatus.FAILED, 8, "validation-failed"),
        (8, ("passed", "failed"), StepStatus.FAILED, 8, "validation-failed"),
        (0, ("passed", "skipped"), StepStatus.SUCCEEDED, 0, "validation-passed"),
        (8, ("passed",), StepStatus.FAILED, 8, "validation-failed"),
    ],
)
def test_the_report_decides(  # noqa: PLR0917 - one table row
    tmp_path: Path,
    exit_code: int,
    statuses: tuple[str, ...],
    status: StepStatus,
    job_code: int,
    classification: str,
) -> None:
    ctrf = write_ctrf(tmp_path / "ctrf.json", *statuses)
    result = validate_result(exit_code, ctrf, settings(fail_on_error=True), error="")
    assert (result.status, result.exit_code, result.classification) == (status, job_code, classification)


def test_without_a_report_the_exit_code_decides(tmp_path: Path) -> None:
    missing = tmp_path / "ctrf.json"
    result = validate_result(8, missing, settings(fail_on_error=True), error=READINESS)
    assert (result.status, result.exit_code) == (StepStatus.FAILED, 8)
    assert result.reason.startswith("the readiness pre-flight failed, so no validator ran")
    broken = validate_result(0, missing, settings(fail_on_error=False))
    assert (broken.status, broken.exit_code) == (StepStatus.FAILED, ExitCode.AICR_CONTRACT_BROKEN)
    assert "exited 0 but wrote no ctrf.json" in broken.reason


def test_an_interrupted_validate_is_judged_by_its_exit_code_not_its_report(tmp_path: Path) -> None:
    ctrf = write_ctrf(tmp_path / "ctrf.json", "passed")
    result = validate_result(9, ctrf, settings(fail_on_error=True))
    assert (result.status, result.exit_code) == (StepStatus.FAILED, 9)
    assert "aborted" in result.reason


@pytest.mark.parametrize("fail_on_error", [True, False])
@pytest.mark.parametrize("text", ["{", '{"results": {"tests": []}}'])
def test_a_report_that_is_not_ctrf_is_unreadable_never_green(tmp_path: Path, text: str, fail_on_error: bool) -> None:
    ctrf = tmp_path / "ctrf.json"
    ctrf.write_text(text)
    result = validate_result(0, ctrf, settings(fail_on_error=fail_on_error))
    assert result.classification == UNREADABLE
    assert result.reason.startswith("validation unreadable: aicr validate (exit 0) wrote ctrf.json, but not a CTRF")
    if fail_on_error:
        assert (result.status, result.exit_code) == (StepStatus.FAILED, ExitCode.AICR_CONTRACT_BROKEN)
    else:
        assert (result.status, result.exit_code) == (StepStatus.WARNED, 0)
        assert result.reason.endswith("validate.failOnError=true fails the run instead (exit 30)")
