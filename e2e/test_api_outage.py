"""The API server goes away for about 20 s in the middle of a run, as in an outage
or a control-plane upgrade, and comes back: the run completes and every result
ConfigMap is written, because every API write retries within its budget.

The run is the chart's Job on the real node: the pod reaches the API server
through the ``kubernetes`` Service with its ServiceAccount token, and keeps
running while the kubelet, too, has lost the API server.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import CHART, RELEASE, extra_env, wait_for_job_end

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 20.0


def test_a_run_survives_an_api_server_outage(
    helm: Helm, control_plane: ControlPlane, aicr_kubelet: Kubelet, namespace: str
) -> None:
    helm.install(
        RELEASE,
        CHART,
        namespace,
        values={
            "service": "eks",
            "accelerator": "h100",
            "intent": "training",
            "os": "ubuntu",
            "aicrBinary": {"path": FAKE_AICR_PATH},
            "aicrProvenance": {"mode": "off"},  # the fake aicr carries no attestation
            "logFormat": "json",
            "validate": {"enabled": True, "emitEvidence": True},
            # deploy ends, and its status write falls, inside the outage
            "job": {"extraEnv": extra_env(FAKE_AICR_DEPLOY_SLEEP="3")},
        },
    )
    deploying = threading.Event()

    def seen(line: str) -> bool:  # never ends the pod: it marks when deploy.sh started its install
        if "simulating a slow install" in line:
            deploying.set()
        return False

    with ThreadPoolExecutor(max_workers=1) as pool:
        following = pool.submit(aicr_kubelet.run_job, RELEASE, namespace, terminate_when=seen)
        while not deploying.wait(timeout=0.2):
            assert not following.done(), following.result().describe()
        control_plane.stop_apiserver()
        stopped = time.monotonic()
        time.sleep(OUTAGE_SECONDS)  # the outage under test, not a wait for something
        control_plane.start_apiserver()
        outage = time.monotonic() - stopped
        run = following.result(timeout=300)

    assert run.exit_code == 0, run.describe()
    assert run.deletion is None, "the pod ran to its end through the outage"
    assert outage >= OUTAGE_SECONDS
    retries = [json.loads(line) for line in run.output.splitlines() if "Kubernetes API write retry" in line]
    assert retries, "a write met the outage and was retried"
    assert all(r["what"] == f"writing ConfigMap {namespace}/aicr-run-status" for r in retries[:1])
    for name in ("aicr-recipe", "aicr-validate-result", "aicr-evidence-bundle", "aicr-run-status"):
        assert control_plane.configmap(namespace, name) is not None, f"{name} was not written"
    status = control_plane.configmap(namespace, "aicr-run-status")
    assert status is not None
    report = json.loads(status["data"]["report.json"])
    assert report["phase"] == "Succeeded"
    assert {s["state"]: s["status"] for s in report["steps"]}["capture-evidence"] == "succeeded"
    assert run.termination_message.startswith("Succeeded (exit 0): AICR Job complete"), run.termination_message
    # The Job controller, whose watches broke with the outage, completes the Job from this one pod.
    assert wait_for_job_end(aicr_kubelet, namespace) == ("Complete", "CompletionsReached")
