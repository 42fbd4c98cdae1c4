"""The deploy step's deploy.helmApply: the flag its helm guard gets, or the refusal
before deploy.sh starts (steps.deploy, helm.apply)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import State
from aicr_runner.run.report import StepStatus
from tests.unit.steps.test_steps import deploy_context, step

SETTING = "AICR_RUNNER_DEPLOY__HELM_APPLY"


def shim(tmp_path: Path) -> str:
    return (tmp_path / "helm-guard" / "bin" / "helm").read_text()


@pytest.mark.parametrize(
    ("env", "version", "flag"),
    [
        ({}, "v4.3.1", "--server-side=false"),
        ({SETTING: "server"}, "v4.3.1", "--server-side=true"),
        ({SETTING: "auto"}, "v4.3.1", ""),
        ({}, "v3.22.0", ""),
        ({SETTING: "auto"}, "v3.22.0", ""),
    ],
)
def test_the_guard_of_deploy_sh_gets_the_flag_of_the_setting_and_the_helm(
    tmp_path: Path, env: dict[str, str], version: str, flag: str
) -> None:
    ctx = deploy_context(tmp_path, ["[]"], helm_version=version, env=env)
    status, code, reason = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.SUCCEEDED, 0), reason
    assert ("--server-side" in shim(tmp_path)) is bool(flag)
    assert flag in shim(tmp_path)
    calls = ctx.externals.processes.calls  # type: ignore[attr-defined]
    asked = [c for c in calls if c[1:2] == ["version"]]
    assert asked == ([] if env.get(SETTING) == "auto" else [[asked[0][0], "version", "--template", "{{.Version}}"]])


def test_server_with_a_helm_3_fails_the_step_with_exit_2_before_deploy_sh(tmp_path: Path) -> None:
    ctx = deploy_context(tmp_path, ["[]"], helm_version="v3.22.0", env={SETTING: "server"})
    status, code, reason = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.FAILED, ExitCode.BAD_INPUT)
    assert reason.startswith(f"{SETTING}=server (chart: deploy.helmApply): deploy.sh's helm is Helm 3")
    assert "server-side apply needs Helm 4" in reason
    calls = ctx.externals.processes.calls  # type: ignore[attr-defined]
    assert not any("deploy.sh" in " ".join(c) for c in calls), "deploy.sh never ran"
    # Refused before the releases a stopped run left pending were looked at (helm list/status/rollback).
    assert [c[1:] for c in calls if Path(c[0]).name == "helm"] == [["version", "--template", "{{.Version}}"]]
