"""Issue 35 finding 8 against a real kube-apiserver: a validation whose failed checks
carry 250 KB messages each still writes its final phase to the status ConfigMap
(the runner's ConfigMap sink, its 921,600-byte budget, server-side apply), and the
termination message stays within 4,096 bytes. The aicr is the project's fake
(a misbehaving aicr's report, FAKE_AICR_VALIDATE_REPORT); the rest is real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import config

from aicr_runner import wiring
from aicr_runner.cli import main
from aicr_runner.kube.api import ClientKubeApi
from aicr_runner.kube.sink import CONFIGMAP_BUDGET_BYTES
from e2e.harness.apiserver import ControlPlane
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env

pytestmark = pytest.mark.e2e


def test_a_250_kb_check_message_still_writes_the_final_phase(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fake_aicr(tmp_path / "bin")
    recorded = tmp_path / "install" / "results" / "aicr-recipe" / "recipe.yaml"
    install = clean_env(tmp_path / "install", **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    results = tmp_path / "install" / "results"
    assert main(["run", "--aicr-binary", str(fake), "--results-dir", str(results)], environ=install) == 0
    tests = [
        {"name": f"check-{i}", "status": "failed", "message": "x" * 250_000, "suite": ["deployment"]} for i in range(4)
    ]
    summary = {"tests": 4, "passed": 0, "failed": 4, "skipped": 0, "pending": 0, "other": 0}
    report = tmp_path / "ctrf.json"
    report.write_text(json.dumps({"reportFormat": "CTRF", "results": {"summary": summary, "tests": tests}}))
    api = ClientKubeApi(config.new_client_from_config(config_file=str(control_plane.kubeconfig)))
    monkeypatch.setattr(wiring, "_make_api", lambda *_: api)
    env = clean_env(
        tmp_path,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true",
        AICR_RUNNER_NAMESPACE=namespace,
        FAKE_AICR_VALIDATE_REPORT=str(report),
    )
    code = main(["validate", "--recipe", str(recorded), "--aicr-binary", str(fake)], environ=env)
    assert code == 8
    stored = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/aicr-run-status")["data"]
    assert stored["phase"] == "Failed"
    size = sum(len(value.encode()) for value in stored.values())
    assert size <= CONFIGMAP_BUDGET_BYTES
    assert json.loads(stored["report.json"])["exitCode"] == 8
    termination = (tmp_path / "termination-log").read_bytes()
    assert len(termination) <= 4096
    assert termination.startswith(b"Failed (exit 8): Validation FAILED (exit 8): validation failed: 4 failed: check-0")
    print(f"status ConfigMap: {size} bytes; termination message: {len(termination)} bytes")
