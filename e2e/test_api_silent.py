"""The real API server stops answering in the middle of a run (SIGSTOPped: its
port still accepts connections, nothing answers) and the run never hangs: it
ends within its API budget, says its status was not written (exit 26), and
SIGTERM ends it (143) within the 15 s the chart leaves the runner after its
children. The run is ``aicr-runner run`` as a Job runs it (results to the API),
as a process on this host with the fake aicr, against the e2e API server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.harness.apiserver import ControlPlane
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env

pytestmark = pytest.mark.e2e

BUDGET_SECONDS = 10.0
#: terminationGracePeriodSeconds minus AICR_RUNNER_SHUTDOWN_GRACE_SECONDS in the chart.
AFTER_CHILDREN_SECONDS = 15.0
#: A run that ends at all ends long before; one that hangs never does.
NEVER_SECONDS = 300.0


def start_run(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    fake = install_fake_aicr(tmp_path / "bin")
    env = clean_env(
        tmp_path,
        **VALIDATE,
        KUBECONFIG=str(control_plane.kubeconfig),
        AICR_RUNNER_NAMESPACE=namespace,
        AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS=f"{BUDGET_SECONDS:g}",
        # Long enough that the test sees the deploy step running whatever the load:
        # the wait below is for that event, not for a guessed time.
        FAKE_AICR_DEPLOY_SLEEP="30",
    )
    env.pop("KUBERNETES_SERVICE_HOST", None)
    argv = [sys.executable, "-m", "aicr_runner", "run", "--aicr-binary", str(fake)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_until_deploying(control_plane: ControlPlane, namespace: str, process: subprocess.Popen[bytes]) -> None:
    """Until the status ConfigMap shows the deploy step running (the run is mid-way)."""
    deadline = time.monotonic() + NEVER_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before its deploy"
        status = control_plane.configmap(namespace, "aicr-run-status")
        if status is not None:
            steps = json.loads(status["data"]["report.json"])["steps"]
            if any(s["state"] == "deploy" and s["status"] == "running" for s in steps):
                return
        time.sleep(0.1)
    pytest.fail("the run never reached its deploy step")


def test_a_run_whose_api_server_stops_answering_ends_within_its_budget(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    process = start_run(control_plane, namespace, tmp_path)
    wait_until_deploying(control_plane, namespace, process)
    with control_plane.apiserver_silent():
        silent = time.monotonic()
        try:
            _, err = process.communicate(timeout=NEVER_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("the run hangs on a silent API server")
        took = time.monotonic() - silent
    termination = (tmp_path / "termination-log").read_text()
    assert process.returncode == 26, termination
    assert termination.startswith("Failed (exit 26): "), termination
    last = json.loads(err.decode().strip().splitlines()[-1])
    assert last["status"] == "not written"
    print(f"\nthe run ended {took:.1f}s after the API server went silent (budget {BUDGET_SECONDS:g}s per call)")


def test_sigterm_ends_a_run_whose_api_server_is_silent_within_the_grace_period(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    process = start_run(control_plane, namespace, tmp_path)
    wait_until_deploying(control_plane, namespace, process)
    with control_plane.apiserver_silent():
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            _, err = process.communicate(timeout=NEVER_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("SIGTERM did not end a run waiting on a silent API server")
        took = time.monotonic() - signalled
    events = "\n".join(f"{e['timestamp'][11:23]} {e['event'][:150]}" for e in _events(err) if "source" not in e)
    assert process.returncode == 143, (tmp_path / "termination-log").read_text()
    assert took < AFTER_CHILDREN_SECONDS, (
        f"{took:.1f}s after SIGTERM: past what the pod's grace period leaves\n{events}"
    )
    print(f"\nthe run ended {took:.1f}s after SIGTERM, its API server silent")


def _events(err: bytes) -> list[dict[str, str]]:
    return [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
