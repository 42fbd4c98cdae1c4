"""aicr_runner.outcome: the termination message and the summary, per mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicr_runner.kube.sink import Fitted
from aicr_runner.outcome import conclude
from aicr_runner.run.invocation import Invocation, Mode
from aicr_runner.run.report import RunPhase, RunReport
from aicr_runner.settings.config import RunnerSettings


class NoSink:
    def fit(self, data: object, *, large: object = None, archives: object = None) -> Fitted:
        raise AssertionError("nothing is captured here")

    def put(self, name: str, *, data: object, binary_data: object = None) -> None:
        raise AssertionError("nothing is captured here")

    def describe(self, name: str) -> str:
        return f"configmap ns/{name}"

    def get(self, name: str, key: str) -> str | None:
        return None

    def get_data(self, name: str) -> dict[str, str]:
        return {}

    def get_payload(self, name: str) -> tuple[dict[str, str], dict[str, bytes]]:
        return {}, {}


def report(exit_code: int, phase: RunPhase, message: str) -> RunReport:
    return RunReport(
        runner_version="1",
        aicr_version="v0.11.1",
        criteria={},
        steps=[],
        phase=phase,
        exit_code=exit_code,
        message=message,
    )


@pytest.mark.parametrize("mode", [Mode.RUN, Mode.VALIDATE])
def test_a_job_run_writes_the_termination_message_and_prints_no_summary(
    mode: Mode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The re-validation CronJob's pod runs ``validate``: its outcome is the pod's
    termination message as an install's is (exit 33 included), not a summary on stdout."""
    term = tmp_path / "termination-log"
    settings = RunnerSettings.model_validate({"termination_message_path": str(term)})
    message = "install in progress, not validated: the install Lease ns/r-install is held by ns/j/p"
    conclude(settings, Invocation(mode), report(33, RunPhase.FAILED, message), NoSink(), cluster=None)
    assert term.read_text() == f"Failed (exit 33): {message} [aicr v0.11.1]"
    assert "results in" not in capsys.readouterr().out


def test_a_local_validation_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    term = tmp_path / "termination-log"
    settings = RunnerSettings.model_validate({"termination_message_path": str(term)})
    invocation = Invocation(Mode.VALIDATE, results_dir=tmp_path / "out")
    conclude(settings, invocation, report(0, RunPhase.SUCCEEDED, "validated"), NoSink(), cluster=None)
    assert f"results in {tmp_path / 'out'}" in capsys.readouterr().out


def test_a_plan_never_writes_a_termination_message(tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    settings = RunnerSettings.model_validate({"termination_message_path": str(term)})
    invocation = Invocation(Mode.PLAN, results_dir=tmp_path / "out")
    conclude(settings, invocation, report(0, RunPhase.SUCCEEDED, "planned"), NoSink(), cluster=None)
    assert not term.exists()
