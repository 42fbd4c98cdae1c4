"""The Job name is a hash of the Job's immutable spec (its pod template and
podFailurePolicy): the same values give the same Job, byte for byte, whatever the
chart version or the Helm major, and a value that changes the pod template gives
a new Job, so an upgrade never fails with "field is immutable".

A new Job name re-runs the whole install (on every cluster of a fleet), so the
template holds nothing that changes on its own. These tests render with the
pinned Helm 4 and with Helm 3 (v3.22, ``.tools/bin/helm3``).
"""

from __future__ import annotations

import json
import os
import shutil
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


def job_text_with(binary: Path, values: dict[str, Any], chart: Path = CHART) -> str:
    """The Job exactly as ``helm template`` prints it (templates/job.yaml only), up
    to the document's end: Helm 4 prints a blank line after each document, Helm 3
    does not (how the output is joined, not what the Job is)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data")
        values_file = Path(home) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        argv = [str(binary), "template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(values_file)]
        proc = subprocess.run(
            [*argv, "--show-only", "templates/job.yaml"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.rstrip("\n") + "\n"


def job_name_with(binary: Path, values: dict[str, Any], chart: Path = CHART) -> str:
    job = yaml.safe_load(job_text_with(binary, values, chart))
    return str(job["metadata"]["name"])


def job_spec_text(job_text: str) -> str:
    """The text of the Job's spec (everything from ``spec:`` on): what a Job may
    never change, and the fields it may."""
    _, sep, spec = job_text.partition("\nspec:\n")
    assert sep, job_text
    return sep + spec


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


#: Every value that reaches the pod template, set (for the byte-for-byte checks).
EVERY_POD_KNOB: dict[str, Any] = {
    **BASE,
    "global": {"imageRegistry": "mirror.example.com/ghcr", "imagePullSecrets": ["fleet"]},
    "imagePullSecrets": [{"name": "regcred"}],
    "image": {"tag": "0.1.0", "pullPolicy": "Always"},
    "serviceAccount": {"name": "gpu-installer", "annotations": {"a": "b"}},
    "job": {
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "nodeSelector": {"pool": "system", "kubernetes.io/arch": "arm64"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300}
        ],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}}
        ]}},
        "priorityClassName": "system-cluster-critical",
        "podLabels": {"example.com/team": "gpu"},
        "podAnnotations": {"example.com/ticket": "42"},
        "terminationGracePeriodSeconds": 600,
        "ttlSecondsAfterFinished": None,
        "extraEnv": [{"name": "AICR_NCCL_FABRIC", "value": "roce"}],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca", "defaultMode": 292}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
    },
}  # fmt: skip


@pytest.mark.parametrize("name", [*EXAMPLE_VALUES, "every pod knob"])
def test_helm3_and_helm4_render_every_example_s_job_byte_for_byte(name: str) -> None:
    values = EVERY_POD_KNOB if name == "every pod knob" else EXAMPLE_VALUES[name]
    assert job_text_with(helm3_binary(), values) == job_text_with(helm_binary(), values)


def chart_copy(tmp_path: Path, version: str, app_version: str | None = None) -> Path:
    """A copy of the chart with another chart version (and appVersion)."""
    copy = tmp_path / f"chart-{version}"
    shutil.copytree(CHART, copy)
    chart_yaml = copy / "Chart.yaml"
    text = chart_yaml.read_text()
    current = yaml.safe_load(text)
    text = text.replace(f"version: {current['version']}\n", f"version: {version}\n")
    if app_version:
        text = text.replace(f'appVersion: "{current["appVersion"]}"', f'appVersion: "{app_version}"')
    chart_yaml.write_text(text)
    bumped = yaml.safe_load(text)
    assert (bumped["version"], bumped["appVersion"]) == (version, app_version or current["appVersion"])
    return copy


@pytest.mark.parametrize("values", [BASE, EVERY_POD_KNOB], ids=["defaults", "every pod knob"])
def test_a_chart_version_bump_keeps_the_job_name_and_its_spec_byte_for_byte(
    tmp_path: Path, values: dict[str, Any]
) -> None:
    # The image is pinned (image.tag), as a fleet pins it: then a new chart version
    # and a new appVersion change nothing the Job runs.
    pinned = merge(values, {"image": {"tag": "0.1.0"}})
    bumped = chart_copy(tmp_path, "0.4.1", app_version="0.1.1")
    for binary in (helm_binary(), helm3_binary()):
        before, after = job_text_with(binary, pinned), job_text_with(binary, pinned, bumped)
        assert yaml.safe_load(before)["metadata"]["name"] == yaml.safe_load(after)["metadata"]["name"]
        assert job_spec_text(before) == job_spec_text(after)
        # The versions are on the Job's own (mutable) labels.
        assert yaml.safe_load(after)["metadata"]["labels"]["helm.sh/chart"] == "nvidia-aicr-0.4.1"
        assert yaml.safe_load(after)["metadata"]["labels"]["app.kubernetes.io/version"] == "0.1.1"


def test_every_value_in_the_pod_template_is_in_the_name() -> None:
    # The name hashes the rendered template itself: any knob, including one added
    # later, renames the Job when it changes the template. Each is checked here.
    base = job_name_with(helm_binary(), BASE)
    changed = {
        key: job_name_with(helm_binary(), merge(BASE, {key: value}))
        for key, value in EVERY_POD_KNOB.items()
        if key not in BASE
    }
    assert all(name != base for name in changed.values()), changed


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
    # Acknowledging a manual move re-runs the install that the upgrade check stopped.
    (
        "upgrade acknowledgement",
        {"upgradeCheck": {"acknowledge": [{"component": "nfd", "from": "1", "to": "2"}]}},
        True,
    ),
    ("upgrade policies", {"upgradeCheck": {"onUnknown": "warn", "requireAssessment": True}}, True),
    # The Job's pod: its template cannot change, so a change is a new Job (a re-run).
    ("resources", {"job": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}, True),
    ("nodeSelector", {"job": {"nodeSelector": {"pool": "system"}}}, True),
    ("tolerations", {"job": {"tolerations": [{"key": "k", "operator": "Exists"}]}}, True),
    ("affinity", {"job": {"affinity": {"nodeAffinity": {}}}}, True),
    ("priority class", {"job": {"priorityClassName": "system-cluster-critical"}}, True),
    ("pod labels", {"job": {"podLabels": {"a": "b"}}}, True),
    ("pod annotations", {"job": {"podAnnotations": {"a": "b"}}}, True),
    ("grace period", {"job": {"terminationGracePeriodSeconds": 600}}, True),
    ("image pull policy", {"image": {"pullPolicy": "Always"}}, True),
    ("image pull secrets", {"imagePullSecrets": [{"name": "regcred"}]}, True),
    ("global pull secrets", {"global": {"imagePullSecrets": ["regcred"]}}, True),
    ("global image registry", {"global": {"imageRegistry": "mirror.example.com"}}, True),
    ("service account", {"serviceAccount": {"name": "gpu-installer"}}, True),
    ("extra volumes", {"job": {"extraVolumes": [{"name": "ca", "emptyDir": {}}]}}, True),
    ("helm apply method", {"deploy": {"helmApply": "auto"}}, True),
    ("helm apply method at its default", {"deploy": {"helmApply": "client"}}, False),
    # Not in the pod template: the same Job, no re-run.
    ("logFormat", {"logFormat": "json"}, False),
    ("TTL", {"job": {"ttlSecondsAfterFinished": 3600}}, False),
    ("Job annotations", {"job": {"annotations": {"helm.sh/resource-policy": "keep"}}}, False),
    ("backoffLimit", {"job": {"backoffLimit": 3}}, False),
    ("deadline", {"job": {"activeDeadlineSeconds": 7200}}, False),
    ("lease timing", {"lease": {"durationSeconds": 30, "waitSeconds": 600}}, False),
    ("download retries", {"aicrDownload": {"attempts": 3, "timeoutSeconds": 30, "budgetSeconds": 120}}, False),
    ("budgets", {"dataPackPullBudgetSeconds": 60, "kubeWriteBudgetSeconds": 30}, False),
    ("component failure gate", {"deploy": {"failOnComponentFailure": True}}, False),
    (
        "service account annotations",
        {"serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "x"}}},
        False,
    ),
    ("narrower RBAC", {"rbac": {"clusterAdmin": False}}, False),
    ("criteria preflight", {"criteriaPreflight": False}, False),
]


def test_rotating_the_pack_credential_keeps_the_job_name() -> None:
    before = merge(BASE, {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH}})
    after = merge(BASE, {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH.replace("dXNl", "bmV3")}})
    assert job_name_with(helm_binary(), before) == job_name_with(helm_binary(), after)


@pytest.mark.parametrize(("what", "change", "renames"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_value_change_renames_the_job_exactly_when_it_changes_the_pod_template(
    what: str, change: dict[str, Any], renames: bool
) -> None:
    before = job_name_with(helm_binary(), BASE)
    after = job_name_with(helm_binary(), merge(BASE, change))
    assert (after != before) is renames, f"{what}: {json.dumps(change)} {'should' if renames else 'must not'} rename"


#: The Job names this chart renders for each example, image pinned: what a fleet
#: upgrading to this checkout's chart with unchanged values keeps. The name hashes
#: the pod template's text (comments included), so any edit that reaches it,
#: a new setting in the environment included, renames the Job and every cluster
#: re-runs its install on upgrade. When that is intended, record the new names
#: here and say so in the changelog.
RECORDED_JOB_NAMES = ROOT / "tests" / "chart" / "job-names.json"


def current_job_names() -> dict[str, str]:
    pinned = {"image": {"tag": "0.1.0"}}
    every = {**EXAMPLE_VALUES, "every pod knob": EVERY_POD_KNOB}
    return {name: job_name_with(helm_binary(), merge(values, pinned)) for name, values in sorted(every.items())}


def test_an_upgrade_with_unchanged_values_keeps_every_recorded_job_name() -> None:
    recorded = json.loads(RECORDED_JOB_NAMES.read_text())
    current = current_job_names()
    renamed = {
        name: f"{recorded.get(name)} -> {current[name]}" for name in current if recorded.get(name) != current[name]
    }
    assert not renamed, (
        "this change renames the Job for unchanged values (every cluster re-runs its install on upgrade): "
        f"{renamed}. If intended, write {json.dumps(current, indent=2)} to {RECORDED_JOB_NAMES.relative_to(ROOT)} "
        "and say so in CHANGELOG.md."
    )
