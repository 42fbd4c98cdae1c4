"""A tool call of the copy (oras, helm push) and of the list (helm pull, helm template)
ends at once on SIGTERM: the tool is stopped and reaped,
and the run ends with the interruption's exit code (143)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aicr_runner.errors import ExitCode, InterruptedRun, RunnerError
from aicr_runner.mirror.oras_copier import OrasCopier
from aicr_runner.mirror.render import ChartRef, HelmRenderer


def test_a_running_tool_is_stopped_when_the_shutdown_is_requested(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # The tool says it started (its PID), then would run for ten minutes.
    tool = [
        sys.executable,
        "-c",
        f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(600)",
    ]
    copier = OrasCopier(interrupted=pid_file.is_file)  # the signal "arrives" once the tool runs
    with pytest.raises(InterruptedRun) as caught:
        copier._run(tool)
    assert caught.value.exit_code == ExitCode.INTERRUPTED
    assert "run the same command again to resume" in caught.value.message
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # stopped and reaped, not left running


def test_nothing_starts_once_the_shutdown_is_requested(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    copier = OrasCopier(interrupted=lambda: True)
    with pytest.raises(InterruptedRun):
        copier._run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert not marker.exists()


def _sleeping_helm(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in helm that says it started (its PID), then would run for ten minutes."""
    pid_file = tmp_path / "helm.pid"
    helm = tmp_path / "helm"
    helm.write_text(
        f"#!{sys.executable}\nimport os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    helm.chmod(0o755)
    return helm, pid_file


@pytest.mark.parametrize("charts_dir", [False, True], ids=["helm-pull", "helm-template"])
def test_the_mirrors_helm_pull_and_template_stop_when_the_shutdown_is_requested(
    tmp_path: Path, charts_dir: bool
) -> None:
    helm, pid_file = _sleeping_helm(tmp_path)
    local = tmp_path / "charts"
    local.mkdir()
    (local / "gpu-operator-v25.10.1.tgz").write_bytes(b"a chart archive")  # with it, helm pull is skipped
    renderer = HelmRenderer(str(helm), local if charts_dir else None, interrupted=pid_file.is_file)
    chart = ChartRef("gpu-operator", "gpu-operator", "gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia")
    with pytest.raises(InterruptedRun) as caught:
        renderer.render(chart, [], None)
    assert caught.value.exit_code == ExitCode.INTERRUPTED
    assert f"interrupted during helm {'template' if charts_dir else 'pull'}" in caught.value.message
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # stopped and reaped, not left running


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("sys.stderr.write('Error: bad values\\n'); sys.exit(1)", "failed (exit 1): Error: bad values"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "failed (killed by SIGKILL): no output"),
    ],
    ids=["exit", "signal"],
)
def test_a_failed_helm_template_says_how_it_ended(tmp_path: Path, body: str, said: str) -> None:
    """A helm killed by a signal prints nothing: the message says which signal."""
    helm = tmp_path / "helm"
    helm.write_text(f"#!{sys.executable}\nimport os, signal, sys\n{body}\n")
    helm.chmod(0o755)
    local = tmp_path / "charts"
    local.mkdir()
    (local / "gpu-operator-v25.10.1.tgz").write_bytes(b"a chart archive")
    chart = ChartRef("gpu-operator", "gpu-operator", "gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia")
    with pytest.raises(RunnerError) as caught:
        HelmRenderer(str(helm), local).render(chart, [], None)
    assert caught.value.message == f"helm template of gpu-operator v25.10.1 (component gpu-operator) {said}"
