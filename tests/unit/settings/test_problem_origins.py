"""Each bad input names where its value came from (a flag, a values key) by the variable the
problem is about, a field of the problem (``errors.InputProblem.name``), never read back out of
its line: the rules between settings, the version guards, the places, the values' own checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from aicr_runner import cli
from aicr_runner.errors import ConfigError, InputProblem
from aicr_runner.settings.config import load

P = "AICR_RUNNER_"


def _plan(tmp: Path, argv: list[str], values: dict[str, object] | None, capsys: pytest.CaptureFixture[str]) -> str:
    env = {"PATH": os.environ.get("PATH", ""), f"{P}TERMINATION_MESSAGE_PATH": str(tmp / "termination-log")}
    if values is not None:
        (tmp / "values.yaml").write_text(yaml.safe_dump(values))
        argv = [*argv, "--values", str(tmp / "values.yaml")]
    assert cli.main(["plan", *argv], environ=env) == 2
    return capsys.readouterr().err


def test_a_broken_rule_names_the_values_key_of_the_variable_it_is_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _plan(
        tmp_path, ["--output", str(tmp_path / "plan")], {"accelerator": "h100", "deploy": {"enabled": False}}, capsys
    )
    assert err == (
        f"aicr-runner: invalid setting: {P}DEPLOY__ENABLED=false needs {P}VALIDATE__ENABLED=true: a run that "
        "neither deploys nor validates does nothing (from --values key deploy.enabled)\n"
    )


def test_a_version_guard_names_the_flag_of_the_criterion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _plan(
        tmp_path,
        ["--output", str(tmp_path / "plan"), "--service", "self-managed", "--accelerator", "h100"],
        None,
        capsys,
    )
    assert err.startswith(f"aicr-runner: invalid setting: {P}CRITERIA__SERVICE='self-managed': aicr v1.2.0 maps")
    assert err.endswith(" (from --service)\n")


def test_a_work_directory_that_cannot_be_made_names_the_output_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plan").write_text("a file, not a directory")
    err = _plan(tmp_path, ["--output", str(tmp_path / "plan"), "--accelerator", "h100"], None, capsys)
    work, output = err.splitlines()
    assert work.startswith(f"aicr-runner: invalid setting: {P}WORK_DIR='{tmp_path}/plan/work': ")
    assert work.endswith(" (from --output)")
    # A flag's own problem: the flag is where the value came from.
    assert output == f"aicr-runner: invalid setting: --output='{tmp_path}/plan': exists and is not a directory"


def test_a_problem_carries_the_variable_it_is_about() -> None:
    with pytest.raises(ConfigError) as caught:
        load({f"{P}CRITERIA__ACCELERATOR": "h100", f"{P}LOG_FORMAT": "xml", f"{P}BOGUS": "1"})
    names = [item.name for item in caught.value.items]
    assert names == [f"{P}BOGUS", f"{P}LOG_FORMAT"]
    assert caught.value.problems == [item.line for item in caught.value.items]
    with pytest.raises(ConfigError) as caught:
        load({f"{P}CRITERIA__ACCELERATOR": "h100", f"{P}DEPLOY__ENABLED": "false"})
    assert [item.name for item in caught.value.items] == [f"{P}DEPLOY__ENABLED"]


def test_a_problem_given_as_a_line_names_nothing() -> None:
    error = ConfigError(["--timeout=0: must be more than 0", InputProblem("X=1: no", "X")])
    assert error.items == [InputProblem("--timeout=0: must be more than 0", ""), InputProblem("X=1: no", "X")]
    assert str(error) == "--timeout=0: must be more than 0; X=1: no"
