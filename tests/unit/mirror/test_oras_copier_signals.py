"""A tool call of the copy ends at once on SIGTERM: the tool is stopped and reaped,
and the run ends with the interruption's exit code (143)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aicr_runner.errors import ExitCode, InterruptedRun
from aicr_runner.mirror.oras_copier import OrasCopier


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
