"""The API server goes away for about 20 s in the middle of a run, as in an outage
or a control-plane upgrade, and comes back: the run completes and every result
ConfigMap is written, because every API write retries within its budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.harness.apiserver import ControlPlane
from tests.fake_aicr import install_fake_aicr

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 20.0


def test_a_run_survives_an_api_server_outage(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> None:
    # The runner runs on this host (the outage, not the pod, is under test): the host's fake aicr.
    fake_aicr = install_fake_aicr(tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBECONFIG"))}
    env.update(
        KUBECONFIG=str(control_plane.kubeconfig),
        AICR_RUNNER_NAMESPACE=namespace,
        AICR_RUNNER_WORK_DIR=str(tmp_path / "work"),
        AICR_RUNNER_TERMINATION_MESSAGE_PATH=str(tmp_path / "termination-log"),
        AICR_RUNNER_LOG_FORMAT="json",
        AICR_RUNNER_AICR__PROVENANCE__MODE="off",  # the stand-in carries no attestation
        AICR_RUNNER_CRITERIA__SERVICE="eks",
        AICR_RUNNER_CRITERIA__ACCELERATOR="h100",
        AICR_RUNNER_CRITERIA__INTENT="training",
        AICR_RUNNER_CRITERIA__OS="ubuntu",
        AICR_RUNNER_VALIDATE__ENABLED="true",
        AICR_RUNNER_VALIDATE__EMIT_EVIDENCE="true",
        FAKE_AICR_DEPLOY_SLEEP="3",  # deploy ends, and its status write falls, inside the outage
    )
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    with pod_log.open("wb") as out:
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake_aicr)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while "simulating a slow install" not in pod_log.read_text(errors="replace"):
            assert proc.poll() is None, pod_log.read_text()[-3000:]
            assert time.monotonic() < deadline, "deploy never started"
            time.sleep(0.05)
        control_plane.stop_apiserver()
        stopped = time.monotonic()
        time.sleep(OUTAGE_SECONDS)
        control_plane.start_apiserver()
        outage = time.monotonic() - stopped
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = pod_log.read_text(errors="replace")
    assert proc.returncode == 0, log[-4000:]
    assert outage >= OUTAGE_SECONDS
    retries = [json.loads(line) for line in log.splitlines() if "Kubernetes API write retry" in line]
    assert retries, "a write met the outage and was retried"
    assert all(r["what"] == f"writing ConfigMap {namespace}/aicr-run-status" for r in retries[:1])
    for name in ("aicr-recipe", "aicr-validate-result", "aicr-evidence-bundle", "aicr-run-status"):
        assert control_plane.configmap(namespace, name) is not None, f"{name} was not written"
    status = control_plane.configmap(namespace, "aicr-run-status")
    assert status is not None
    report = json.loads(status["data"]["report.json"])
    assert report["phase"] == "Succeeded"
    assert {s["state"]: s["status"] for s in report["steps"]}["capture-evidence"] == "succeeded"
    assert (tmp_path / "termination-log").read_text().startswith("Succeeded (exit 0): AICR Job complete")
