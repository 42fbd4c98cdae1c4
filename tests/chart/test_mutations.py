"""The render suite notices every deliberate breakage of the chart.

scripts/mutate-chart.py breaks a copy of the chart one way at a time (a guard
removed, a mount dropped, a default flipped, a Secret in env, readOnlyRootFilesystem
dropped, the Job named by revision, the chart version on the pod template, a knob
ignored, podFailurePolicy dropped, ...) and runs the tests each mutation names as
meant to catch it. Every mutation must be killed by one of its own tests; the
script's own checks (a surviving mutation, a named test that is gone) are proven
here too, so a green run means something.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from tests.chart.helm import ROOT, load_script

mutate = load_script("mutate-chart")


def mutate_chart(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Runs the script in its own process group: on a timeout its shard workers go
    with it (killing only the script would leave them running tests for minutes)."""
    argv = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "mutate-chart.py"), *args]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# About 50 s on a loaded 2-core machine; CI's 2 cores ran the script before this
# change 2-3x slower than that machine, hence about 3x headroom over ~150 s.
@pytest.mark.timeout(480)
def test_every_mutation_of_the_chart_is_caught_by_its_named_tests() -> None:
    names = [mutation.name for mutation in mutate.MUTATIONS]
    assert len(names) >= 55
    assert len(set(names)) == len(names)
    proc = mutate_chart(timeout=450)
    summary = re.search(r"mutate-chart: (\d+)/(\d+) mutations killed", proc.stdout)
    assert summary, proc.stdout + proc.stderr
    assert summary.group(1) == summary.group(2) == str(len(names)), proc.stdout
    killed = re.findall(r"^killed +(\S+) ", proc.stdout, re.M)
    assert sorted(killed) == sorted(names), proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_mutation_its_named_tests_cannot_see_survives() -> None:
    # test_pod_is_locked_down reads the securityContext: it catches a dropped
    # readOnlyRootFilesystem, and cannot see a TTL default.
    proc = mutate_chart(
        "--only",
        "drop-read-only-root",
        "--only",
        "ttl-default-3600",
        "--tests",
        "test_job.py::test_pod_is_locked_down",
        "--jobs",
        "1",
        timeout=240,
    )
    assert re.search(r"^killed +drop-read-only-root .*test_pod_is_locked_down", proc.stdout, re.M), proc.stdout
    assert "not killed: survived ttl-default-3600: every named test passed (1 run)" in proc.stdout
    assert "mutate-chart: 1/2 mutations killed" in proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_a_named_test_that_is_gone_is_an_error_not_a_pass() -> None:
    proc = mutate_chart("--only", "drop-read-only-root", "--tests", "test_job.py::test_pod_is_locked", timeout=240)
    assert (
        "not killed: error drop-read-only-root: names test_job.py::test_pod_is_locked, which tests/chart does not have"
    ) in proc.stdout, proc.stdout + proc.stderr
    assert "mutate-chart: 0/1 mutations killed" in proc.stdout
    assert proc.returncode == 1


def test_a_mutation_names_its_tests_by_id() -> None:
    # The -k form of earlier versions ("test_job.py", "rbac") is refused where the table is read.
    with pytest.raises(ValueError, match=r"mutation x: 'test_job\.py' is not a test id; write <file>\.py::"):
        mutate.m("x", "values.yaml", "a", "b", "test_job.py", "rbac")
    with pytest.raises(ValueError, match="mutation x: names no test that must catch it"):
        mutate.m("x", "values.yaml", "a", "b")
    mutation = mutate.m("x", "values.yaml", "a", "b", "test_job.py::test_pod_is_locked_down", "test_g.py::test_y[p 1]")
    assert mutation.tests == ("test_job.py::test_pod_is_locked_down", "test_g.py::test_y[p 1]")


def test_the_script_refuses_an_unknown_mutation(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main(["--only", "no-such-mutation"]) == 2
    assert capsys.readouterr().err == (
        "mutate-chart: --only no-such-mutation: no such mutation (scripts/mutate-chart.py --list names them)\n"
    )
