"""snapshot.*: off by default; on, the settings ConfigMap tells the runner how to run aicr's agent."""

from __future__ import annotations

import json

from aicr_runner.settings.config import load
from tests.chart.helm import rejects_by_schema, renders


def test_off_by_default_and_the_job_is_the_same_either_way() -> None:
    off = renders({})
    on = renders({"snapshot": {"enabled": True}})
    assert off.env["AICR_RUNNER_SNAPSHOT__ENABLED"] == "false"
    assert on.env["AICR_RUNNER_SNAPSHOT__ENABLED"] == "true"
    # Runtime settings only: turning snapshots on never renames the install Job (a new install).
    assert on.job["metadata"]["name"] == off.job["metadata"]["name"]
    assert off.env["AICR_RUNNER_SNAPSHOT__IMAGE"] == "ghcr.io/nvidia/aicr:v1.2.0"
    assert off.env["AICR_RUNNER_SNAPSHOT__NAMESPACE"] == "aicr-validation"
    assert off.env["AICR_RUNNER_SNAPSHOT__CONFIGMAP"] == "aicr-cluster-snapshot"


def test_on_the_runner_reads_what_the_chart_renders() -> None:
    result = renders(
        {
            "aicrVersion": "v0.11.1",
            "global": {"imageRegistry": "mirror.example.com/proxy"},
            "snapshot": {
                "enabled": True,
                "privileged": False,
                "nodeSelector": {"pool": "gpu", "nvidia.com/gpu.present": "true"},
                "tolerations": ["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"],
                "timeoutSeconds": 120,
            },
        }
    )
    env = result.env
    assert env["AICR_RUNNER_SNAPSHOT__IMAGE"] == "mirror.example.com/proxy/nvidia/aicr:v0.11.1"
    assert json.loads(env["AICR_RUNNER_SNAPSHOT__NODE_SELECTOR"]) == ["nvidia.com/gpu.present=true", "pool=gpu"]
    settings = load({k: v for k, v in env.items() if k.startswith("AICR_RUNNER_")}).snapshot
    assert settings.enabled
    assert not settings.privileged
    assert settings.timeout_seconds == 120
    assert settings.tolerations == ["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]
    assert settings.agent_image("0.11.1") == "mirror.example.com/proxy/nvidia/aicr:v0.11.1"


def test_an_explicit_image_is_taken_as_given() -> None:
    env = renders({"global": {"imageRegistry": "mirror.example.com"}, "snapshot": {"image": "reg.local/aicr:dev"}}).env
    assert env["AICR_RUNNER_SNAPSHOT__IMAGE"] == "reg.local/aicr:dev"


def test_the_schema_refuses_a_toleration_aicr_would_refuse() -> None:
    rejects_by_schema({"snapshot": {"tolerations": ["gpu=true"]}}, "/snapshot/tolerations/0", "pattern")
    rejects_by_schema({"snapshot": {"timeoutSeconds": 5}}, "/snapshot/timeoutSeconds", "minimum")
