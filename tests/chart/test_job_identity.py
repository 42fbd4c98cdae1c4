"""The Job name changes only when the install does, and means the same under Helm 3 and Helm 4.

A new Job name re-runs the whole install (on every cluster of a fleet), so the
name hashes a normalised set of run-defining inputs only. These tests render with
the pinned Helm 4 and with Helm 3 (v3.22, ``.tools/bin/helm3``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART, NAMESPACE, RELEASE, ROOT, helm_binary, merge

HELM3 = ROOT / ".tools" / "bin" / "helm3"
EXAMPLES = ROOT / "examples"
PACK = "ghcr.io/acme/aicr-pack:1.0.0"
AUTH = '{"auths":{"ghcr.io":{"auth":"dXNlcjp0b2tlbg=="}}}'
BASE: dict[str, Any] = {"accelerator": "h100"}


def helm3_binary() -> Path:
    if not HELM3.is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "helm3"], check=True, cwd=ROOT)
    assert HELM3.is_file(), f"{HELM3} is missing after scripts/bootstrap-tools.sh helm3"
    return HELM3


def job_name_with(binary: Path, values: dict[str, Any]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data")
        values_file = Path(home) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        proc = subprocess.run(
            [str(binary), "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values_file)],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    [job] = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Job"]
    return str(job["metadata"]["name"])


def delivery_values() -> dict[str, dict[str, Any]]:
    """The chart values each delivery example hands to Helm."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((EXAMPLES / "delivery").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            if doc and doc["kind"] == "HelmRelease":
                found[path.name] = spec["values"]
            elif doc and doc["kind"] == "Application":
                found[path.name] = spec["source"]["helm"]["valuesObject"]
            elif doc and doc["kind"] == "MultiClusterService":
                [service] = spec["serviceSpec"]["services"]
                found[path.name] = yaml.safe_load(service["values"])
    return found


EXAMPLE_VALUES: dict[str, dict[str, Any]] = {
    "defaults+criteria": dict(BASE),
    **{p.name: yaml.safe_load(p.read_text()) for p in sorted((EXAMPLES / "values").glob("*.yaml"))},
    **delivery_values(),
}


def test_every_delivery_example_with_chart_values_is_covered() -> None:
    assert {"argocd-application.yaml", "flux-helmrelease.yaml", "k0rdent-multiclusterservice.yaml"} <= set(
        EXAMPLE_VALUES
    )


@pytest.mark.parametrize("name", list(EXAMPLE_VALUES))
def test_helm3_and_helm4_give_every_example_the_same_job_name(name: str) -> None:
    values = EXAMPLE_VALUES[name]
    assert job_name_with(helm3_binary(), values) == job_name_with(helm_binary(), values)


def test_the_null_ttl_default_that_helm4_drops_does_not_split_the_name() -> None:
    # The bug this guards against: Helm 4 drops null defaults that Helm 3 keeps.
    for ttl in (None, 3600):
        values = merge(BASE, {"job": {"ttlSecondsAfterFinished": ttl}})
        assert job_name_with(helm3_binary(), values) == job_name_with(helm_binary(), values)


#: value change -> whether it must give a new Job name (a re-run of the install).
CHANGES: list[tuple[str, dict[str, Any], bool]] = [
    # What is installed: re-runs.
    ("criterion", {"service": "eks"}, True),
    ("another criterion", {"intent": "training", "service": "eks"}, True),
    ("aicr version", {"aicrVersion": "v1.2.1"}, True),
    ("aicr pin", {"aicrSha256": {"amd64": "a" * 64}}, True),
    ("pack reference", {"dataPack": PACK}, True),
    ("recipe flags", {"recipeFlags": "--nodes 4"}, True),
    ("bundle args", {"bundleArgs": ["--storage-class", "fast"]}, True),
    ("deploy flags", {"deployFlags": ""}, True),
    ("deploy args", {"deployArgs": ["--retries", "1"]}, True),
    ("validate settings", {"validate": {"enabled": True}}, True),
    (
        "publish settings",
        {
            "validate": {
                "enabled": True,
                "emitEvidence": True,
                "publish": {"enabled": True, "mode": "unsigned", "ref": "r.example/e"},
            }
        },
        True,
    ),
    ("image tag", {"image": {"tag": "0.1.1"}}, True),
    ("image digest", {"image": {"digest": "sha256:" + "a" * 64}}, True),
    ("aicr env via extraEnv", {"job": {"extraEnv": [{"name": "AICR_NCCL_FABRIC", "value": "roce"}]}}, True),
    ("pack Secret name", {"dataPack": PACK, "dataPackSecret": "pull-cred-v2"}, True),
    ("rerun token", {"rerun": "2026-12-03"}, True),
    # How it runs, not what it installs: no re-run.
    ("logFormat", {"logFormat": "json"}, False),
    ("TTL", {"job": {"ttlSecondsAfterFinished": 3600}}, False),
    ("resources", {"job": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}, False),
    ("nodeSelector", {"job": {"nodeSelector": {"pool": "system"}}}, False),
    ("tolerations", {"job": {"tolerations": [{"key": "k", "operator": "Exists"}]}}, False),
    ("affinity", {"job": {"affinity": {"nodeAffinity": {}}}}, False),
    ("priority class", {"job": {"priorityClassName": "system-cluster-critical"}}, False),
    ("pod annotations", {"job": {"podAnnotations": {"a": "b"}}}, False),
    ("Job annotations", {"job": {"annotations": {"helm.sh/resource-policy": "keep"}}}, False),
    ("backoffLimit", {"job": {"backoffLimit": 3}}, False),
    ("grace period", {"job": {"terminationGracePeriodSeconds": 600}}, False),
    ("lease timing", {"lease": {"durationSeconds": 30, "waitSeconds": 600}}, False),
    ("download retries", {"aicrDownload": {"attempts": 3, "timeoutSeconds": 30, "budgetSeconds": 120}}, False),
    ("image pull policy", {"image": {"pullPolicy": "Always"}}, False),
    ("image pull secrets", {"imagePullSecrets": [{"name": "regcred"}]}, False),
]


def test_rotating_the_pack_credential_keeps_the_job_name() -> None:
    before = merge(BASE, {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH}})
    after = merge(BASE, {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH.replace("dXNl", "bmV3")}})
    assert job_name_with(helm_binary(), before) == job_name_with(helm_binary(), after)


@pytest.mark.parametrize(("what", "change", "renames"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_value_change_renames_the_job_exactly_when_it_changes_the_install(
    what: str, change: dict[str, Any], renames: bool
) -> None:
    before = job_name_with(helm_binary(), BASE)
    after = job_name_with(helm_binary(), merge(BASE, change))
    assert (after != before) is renames, f"{what}: {json.dumps(change)} {'should' if renames else 'must not'} rename"
