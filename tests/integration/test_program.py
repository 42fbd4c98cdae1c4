"""The ``aicr-runner`` program as a process: ``python -m aicr_runner`` (what the
console script runs, ``cli.program``), its exit code, its output and its exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import clean_env

#: Runs the program as ``python -m aicr_runner`` does, with an atexit hook registered
#: first (so it runs last, after the log handlers' flush) reporting the collector's
#: frozen objects.
PROGRAM = (
    "import atexit, gc, sys, runpy\n"
    "atexit.register(lambda: print(f'frozen {gc.get_freeze_count()}', file=sys.stderr))\n"
    "sys.argv[0] = 'aicr-runner'\n"
    "runpy.run_module('aicr_runner', run_name='__main__', alter_sys=True)\n"
)


def test_a_plan_exits_with_its_code_its_output_whole_and_the_collector_frozen(tmp_path: Path) -> None:
    """The program freezes the collector before it exits (the exit then does not scan
    the objects the imports made): the exit code, stdout and stderr are unchanged."""
    calls = tmp_path / "calls.jsonl"
    fake = install_fake_aicr(tmp_path / "bin")
    env = clean_env(tmp_path, FAKE_AICR_ENV_LOG=str(calls))
    argv = [sys.executable, "-c", PROGRAM, "plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"results in {tmp_path / 'plan'}" in result.stdout.splitlines()[-1]
    last_log = json.loads(result.stderr.splitlines()[-2])
    assert last_log["event"] == "run ended", "every log line written before the exit"
    frozen = int(result.stderr.splitlines()[-1].removeprefix("frozen "))
    assert frozen > 10_000, "the imports' objects are frozen before the exit"
    versions = [line for line in calls.read_text().splitlines() if '"--version"' in line]
    assert len(versions) == 1, "the start line asked --version once, and the fetch step did not ask again"


#: What only an install or a validation runs (deploy.sh and helm, the re-validation's
#: Lease and history, the verdict report): imported by its step, never by a plan.
INSTALL_ONLY = (
    "aicr_runner.steps.deploy",
    "aicr_runner.helm.apply",
    "aicr_runner.helm.guard",
    "aicr_runner.helm.pending",
    "aicr_runner.steps.revalidate",
    "aicr_runner.aicr.history",
    "aicr_runner.steps.verdict_report",
    "aicr_runner.kube.report_writer",
    "aicr_runner.aicr.verdict",
)


def test_a_plan_loads_none_of_what_only_an_install_or_a_validation_runs(tmp_path: Path) -> None:
    """Its start-up is what a user waits for: it imports only what it uses."""
    loaded = PROGRAM.replace(
        "print(f'frozen {gc.get_freeze_count()}', file=sys.stderr)",
        f"print(sorted(m for m in {INSTALL_ONLY!r} if m in sys.modules), file=sys.stderr)",
    )
    fake = install_fake_aicr(tmp_path / "bin")
    argv = [sys.executable, "-c", loaded, "plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")]
    result = subprocess.run(argv, env=clean_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "[]"


def test_a_refused_plan_exits_2_through_the_program(tmp_path: Path) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_CRITERIA__ACCELERATOR="h1000")
    argv = [sys.executable, "-c", PROGRAM, "plan", "--output", str(tmp_path / "plan")]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
