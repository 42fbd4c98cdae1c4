"""deploy.helmApply through the helm guard's real shim: a tiny fake helm records the
argv it was started with; the runner's side asks it its version (helm.apply)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aicr_runner.children.process import ShutdownController, SubprocessRunner
from aicr_runner.errors import ConfigError, ExitCode, InterruptedRun, ToolError
from aicr_runner.helm import apply
from aicr_runner.helm.guard import HelmGuard, install_guard, with_apply_flag
from aicr_runner.settings.config import HelmApply

HELM_4 = "v4.3.1"
HELM_3 = "v3.22.0"


def fake_helm(tmp_path: Path, version: str = HELM_4, version_exit: int = 0) -> Path:
    """A helm that answers ``version`` with ``version`` and records every other call's argv."""
    helm = tmp_path / "real" / "helm"
    helm.parent.mkdir(parents=True, exist_ok=True)
    record = tmp_path / "argv.jsonl"
    helm.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f'if sys.argv[1:2] == ["version"]:\n    print({version!r})\n    sys.exit({version_exit})\n'
        f'with open({str(record)!r}, "a") as f:\n    f.write(json.dumps(sys.argv[1:]) + "\\n")\n'
    )
    helm.chmod(0o755)
    return helm


def calls(tmp_path: Path) -> list[list[str]]:
    record = tmp_path / "argv.jsonl"
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def flag_for(method: HelmApply, helm: Path, tmp_path: Path) -> str:
    environ = {"PATH": "/usr/bin:/bin"}
    return apply.apply_flag(method, str(helm), SubprocessRunner(), environ, tmp_path / "logs" / "helm-version.log")


def run_shim(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    shim = tmp_path / "guard" / "bin" / "helm"
    return subprocess.run([str(shim), *args], capture_output=True, text=True, timeout=60, check=False)


def guarded(tmp_path: Path, method: HelmApply, version: str = HELM_4) -> Path:
    helm = fake_helm(tmp_path, version)
    guard = install_guard(str(helm.parent), tmp_path / "guard", flag_for(method, helm, tmp_path))
    assert guard is not None
    return helm


@pytest.mark.parametrize(
    ("method", "flag"),
    [(HelmApply.CLIENT, ["--server-side=false"]), (HelmApply.SERVER, ["--server-side=true"]), (HelmApply.AUTO, [])],
)
def test_each_choice_reaches_helm_4_install_and_upgrade_right_after_the_subcommand(
    tmp_path: Path, method: HelmApply, flag: list[str]
) -> None:
    guarded(tmp_path, method)
    for args in (["upgrade", "--install", "x", "chart", "-n", "ns"], ["install", "x", "chart"]):
        assert run_shim(tmp_path, *args).returncode == 0
    assert calls(tmp_path) == [
        ["upgrade", *flag, "--install", "x", "chart", "-n", "ns"],
        ["install", *flag, "x", "chart"],
    ]


def test_client_is_the_default_and_the_shim_names_its_flag(tmp_path: Path) -> None:
    from aicr_runner.settings.config import DeploySettings

    assert DeploySettings().helm_apply is HelmApply.CLIENT
    guarded(tmp_path, DeploySettings().helm_apply)
    assert " --server-side=false " in (tmp_path / "guard" / "bin" / "helm").read_text()


@pytest.mark.parametrize("method", [HelmApply.CLIENT, HelmApply.AUTO])
def test_a_helm_3_gets_no_flag_it_applies_client_side_only(tmp_path: Path, method: HelmApply) -> None:
    guarded(tmp_path, method, HELM_3)
    assert run_shim(tmp_path, "upgrade", "--install", "x", "chart").returncode == 0
    assert calls(tmp_path) == [["upgrade", "--install", "x", "chart"]]


def test_server_with_a_helm_3_is_refused_naming_the_setting_the_value_and_why(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, HELM_3)
    with pytest.raises(ConfigError) as refused:
        flag_for(HelmApply.SERVER, helm, tmp_path)
    assert refused.value.exit_code == ExitCode.BAD_INPUT
    assert refused.value.problems == [
        "AICR_RUNNER_DEPLOY__HELM_APPLY=server (chart: deploy.helmApply): deploy.sh's helm is Helm 3, which applies "
        "client-side only; server-side apply needs Helm 4 (allowed here: client, auto)"
    ]
    assert refused.value.items[0].name == "AICR_RUNNER_DEPLOY__HELM_APPLY"


def test_auto_does_not_ask_helm_its_version(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "not a version", version_exit=1)
    assert flag_for(HelmApply.AUTO, helm, tmp_path) == ""


@pytest.mark.parametrize(("said", "code"), [("v4.3.1", 1), ("Error: unknown flag: --template", 0), ("", 0)])
def test_a_helm_that_does_not_say_its_version_is_exit_27(tmp_path: Path, said: str, code: int) -> None:
    helm = fake_helm(tmp_path, said, version_exit=code)
    with pytest.raises(ToolError) as failed:
        flag_for(HelmApply.CLIENT, helm, tmp_path)
    assert failed.value.exit_code == ExitCode.TOOL_MISSING
    assert "did not say its version" in failed.value.message
    assert "AICR_RUNNER_DEPLOY__HELM_APPLY" in failed.value.message


def test_a_helm_that_never_says_its_version_is_stopped_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``helm version`` reads nothing remote: past its deadline it is stopped, exit 27."""
    monkeypatch.setattr(apply, "VERSION_DEADLINE_SECONDS", 0.3)
    helm = tmp_path / "helm"
    pid_file = tmp_path / "helm.pid"
    helm.write_text(
        f"#!{sys.executable}\nimport os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    helm.chmod(0o755)
    with pytest.raises(ToolError) as failed:
        flag_for(HelmApply.CLIENT, helm, tmp_path)
    assert failed.value.exit_code == ExitCode.TOOL_MISSING
    assert failed.value.message == (
        f"deploy.sh's helm {helm} did not say its version within 0.3s (`helm version`, stopped); "
        "AICR_RUNNER_DEPLOY__HELM_APPLY needs it to choose the apply flag"
    )
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # stopped and reaped


def test_a_shutdown_while_helm_is_asked_its_version_interrupts_the_run(tmp_path: Path) -> None:
    """SIGTERM while deploy.sh's helm answers ``version``: the question is stopped at once
    and the run ends interrupted (143), never as a helm that cannot say its version (27)."""
    started = tmp_path / "helm.started"
    helm = tmp_path / "helm"
    helm.write_text(
        f"#!{sys.executable}\nimport time\nprint({HELM_4!r}, flush=True)\n"
        f"open({str(started)!r}, 'w').close()\ntime.sleep(600)\n"
    )
    helm.chmod(0o755)
    shutdown = ShutdownController()

    def request_once_helm_runs() -> None:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        shutdown.request()

    threading.Thread(target=request_once_helm_runs, daemon=True).start()
    runner = SubprocessRunner(shutdown=shutdown)
    with pytest.raises(InterruptedRun) as stopped:
        apply.apply_flag(HelmApply.CLIENT, str(helm), runner, {"PATH": "/usr/bin:/bin"}, tmp_path / "version.log")
    assert stopped.value.exit_code == ExitCode.INTERRUPTED
    assert stopped.value.message == (
        f"interrupted: a shutdown was requested while deploy.sh's helm {helm} was asked its version "
        "(`helm version`, stopped); deploy.sh was not started"
    )


def test_a_warning_beside_the_version_is_not_the_version(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path, "WARNING: Kubernetes configuration file is group-readable.\nv4.3.1")
    assert flag_for(HelmApply.CLIENT, helm, tmp_path) == "--server-side=false"


@pytest.mark.parametrize(
    "args",
    [
        ["list", "-A", "-o", "json"],
        ["history", "x", "-n", "ns"],
        ["template", "x", "chart"],
        ["rollback", "x", "2", "-n", "ns"],
        ["uninstall", "x", "-n", "ns"],
        ["--help"],
        # A global flag's value is no subcommand: "rollback" and "list" are.
        ["-n", "install", "rollback", "x"],
        ["--kube-context", "upgrade", "list"],
    ],
)
def test_other_commands_reach_helm_untouched(tmp_path: Path, args: list[str]) -> None:
    guarded(tmp_path, HelmApply.CLIENT)
    assert run_shim(tmp_path, *args).returncode == 0
    assert calls(tmp_path) == [args]


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["upgrade", "--install", "x", "c"], ["upgrade", "F", "--install", "x", "c"]),
        # A global flag before the subcommand stays before it; the flag goes after the word.
        (["--debug", "install", "x", "c"], ["--debug", "install", "F", "x", "c"]),
        # A global flag's value ("ns") is not the subcommand, in either spelling.
        (["-n", "ns", "upgrade", "x", "c"], ["-n", "ns", "upgrade", "F", "x", "c"]),
        (
            ["--namespace=ns", "--kube-context", "prod", "install", "x"],
            ["--namespace=ns", "--kube-context", "prod", "install", "F", "x"],
        ),
        # deploy.sh's own --server-side comes later on the line, so it wins (helm's last flag does).
        (["upgrade", "x", "c", "--server-side=true"], ["upgrade", "F", "x", "c", "--server-side=true"]),
        # "install" as a later word (a release named install) is not the subcommand.
        (["status", "install"], ["status", "install"]),
        (["--debug"], ["--debug"]),
        ([], []),
    ],
)
def test_the_flag_goes_right_after_the_subcommand_found_as_the_guard_finds_it(args: list[str], want: list[str]) -> None:
    assert with_apply_flag(args, "F") == want
    assert with_apply_flag(args, "") == args


def test_the_guard_keeps_its_lines_and_exit_code_with_the_flag(tmp_path: Path) -> None:
    helm = fake_helm(tmp_path)
    helm.write_text(helm.read_text() + "sys.exit(3)\n")
    install_guard(str(helm.parent), tmp_path / "guard", "--server-side=false")
    done = run_shim(tmp_path, "upgrade", "--install", "x", "chart", "-n", "ns")
    assert done.returncode == 3
    assert "helm-guard: helm upgrade x -n ns started at" in done.stdout
    assert "helm-guard: helm upgrade x -n ns ended at" in done.stdout
    assert "(exit 3," in done.stdout


def test_the_shim_takes_only_a_server_side_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a helm apply flag"):
        HelmGuard(tmp_path / "guard").install(str(fake_helm(tmp_path)), apply_flag="--force")


def test_a_namespace_before_the_subcommand_is_still_an_upgrade_under_the_lock(tmp_path: Path) -> None:
    """``helm -n ns upgrade ...``: locked, logged and given the flag as ``helm upgrade ... -n ns`` is."""
    guarded(tmp_path, HelmApply.CLIENT)
    done = run_shim(tmp_path, "-n", "ns", "upgrade", "x", "chart")
    assert done.returncode == 0, done.stderr
    assert "helm-guard: helm upgrade x -n ns started at" in done.stdout
    assert calls(tmp_path) == [["-n", "ns", "upgrade", "--server-side=false", "x", "chart"]]
