"""snapshot.*: off by default; on, the settings ConfigMap tells the runner how to run aicr's agent."""

from __future__ import annotations

import json

import pytest

from aicr_runner.settings.config import load
from tests.chart.helm import rejects_by_schema, rejects_with, renders


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


def test_kubernetes_toleration_objects_become_aicrs_form_beside_its_own_strings() -> None:
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},  # operator Equal by default
        {"key": "pool", "operator": "Equal", "value": "", "effect": "PreferNoSchedule"},
        "legacy=x:NoSchedule",
    ]
    env = renders({"snapshot": {"enabled": True, "tolerations": tolerations}}).env
    expected = ["nvidia.com/gpu:NoSchedule", "dedicated=gpu:NoExecute", "pool=:PreferNoSchedule", "legacy=x:NoSchedule"]
    assert json.loads(env["AICR_RUNNER_SNAPSHOT__TOLERATIONS"]) == expected
    settings = load({k: v for k, v in env.items() if k.startswith("AICR_RUNNER_")}).snapshot
    assert settings.tolerations == expected, "the runner accepts every converted entry"


def test_the_schema_refuses_a_toleration_aicr_would_refuse() -> None:
    rejects_by_schema({"snapshot": {"tolerations": ["gpu=true"]}}, "/snapshot/tolerations/0", "pattern")
    seconds = {"key": "gpu", "value": "a", "effect": "NoExecute", "tolerationSeconds": 30}
    rejects_by_schema(
        {"snapshot": {"tolerations": [seconds]}}, "/snapshot/tolerations/0", "'tolerationSeconds' not allowed"
    )
    rejects_by_schema(
        {"snapshot": {"tolerations": [{"key": "gpu", "value": "a"}]}}, "/snapshot/tolerations/0", "effect"
    )


def test_an_exists_toleration_with_a_value_is_refused_not_rendered_without_it() -> None:
    exists_with_value = {"key": "gpu", "operator": "Exists", "value": "a", "effect": "NoSchedule"}
    rejects_with(
        {"snapshot": {"tolerations": ["x:NoSchedule", exists_with_value]}},
        'snapshot.tolerations[1] has operator Exists and value "a": Exists matches any value of the taint gpu, '
        "so it takes none. Drop the value, or use operator Equal.",
    )
    rejects_by_schema(
        {"snapshot": {"tolerations": [{"key": "gpu", "effect": "Never"}]}}, "/snapshot/tolerations/0/effect", ""
    )
    rejects_by_schema({"snapshot": {"timeoutSeconds": 5}}, "/snapshot/timeoutSeconds", "minimum")


def test_the_release_namespace_is_refused_for_the_snapshot_agent() -> None:
    """aicr deletes the agent's ServiceAccount and Role in its namespace when it is done (C-14)."""
    from tests.chart.helm import NAMESPACE

    rejects_with(
        {"snapshot": {"enabled": True, "namespace": NAMESPACE}},
        f"snapshot.namespace is the release namespace {NAMESPACE}: aicr deletes the agent's ServiceAccount and "
        "Role there when it is done. Use a namespace of its own (default aicr-validation).",
    )
    renders({"snapshot": {"enabled": False, "namespace": NAMESPACE}})


@pytest.mark.parametrize(
    ("namespace", "words"), [("", "SNAPSHOT__NAMESPACE='': name the namespace"), ("aicr", "the runner's own namespace")]
)
def test_the_runtime_refuses_an_empty_snapshot_namespace_or_its_own(namespace: str, words: str) -> None:
    from aicr_runner.errors import ConfigError

    base = {"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100", "AICR_RUNNER_SNAPSHOT__ENABLED": "true"}
    with pytest.raises(ConfigError) as refused:
        load({**base, "AICR_RUNNER_SNAPSHOT__NAMESPACE": namespace, "AICR_RUNNER_NAMESPACE": "aicr"})
    assert any(words in line for line in refused.value.problems), refused.value.problems
    load({**base, "AICR_RUNNER_SNAPSHOT__NAMESPACE": "aicr-validation", "AICR_RUNNER_NAMESPACE": "aicr"})
