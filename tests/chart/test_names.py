"""nameOverride and fullnameOverride, as Helm users know them from `helm create`'s
scaffold (chart/templates/_helpers.tpl "nvidia-aicr.baseName"), and their guards
C-15 and C-16 (_validate-names.tpl): a name Kubernetes would refuse, or one too
long for the Job's name and its pod's job-name label, is refused at render time in
the same words under Helm 3 and 4."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.chart.helm import NAMESPACE, RELEASE, rejects_with, render, renders

#: Every object the chart can render at once (monitoring, re-validation, the pack Secret, a narrower ClusterRole).
EVERYTHING: dict[str, Any] = {
    "dataPack": "ghcr.io/acme/pack:1",
    "dataPackAuth": {"dockerconfigjson": '{"auths":{}}'},
    "validate": {"enabled": True},
    "revalidate": {"schedule": "0 */6 * * *"},
    "rbac": {"clusterAdmin": False},
    "monitoring": {
        "kubeStateMetrics": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
    },
}
PROMETHEUS = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
HASH = r"[0-9a-f]{10}"


def names(values: dict[str, Any], **kw: Any) -> dict[str, str]:
    """kind -> metadata.name of every object but the ConfigMaps (one of each other kind)."""
    found: dict[str, str] = {}
    for doc in renders({**EVERYTHING, **values}, args=PROMETHEUS, **kw).docs:
        if doc["kind"] != "ConfigMap":
            assert doc["kind"] not in found, doc["kind"]
            found[doc["kind"]] = doc["metadata"]["name"]
    return found


def name_labels(values: dict[str, Any], **kw: Any) -> set[Any]:
    """Every app.kubernetes.io/name label of the render: objects, the Job's pod, the CronJob's Job and pod."""
    result = renders({**EVERYTHING, **values}, args=PROMETHEUS, **kw)
    labels = {doc["metadata"].get("labels", {}).get("app.kubernetes.io/name") for doc in result.docs}
    labels.add(result.job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"])
    cron = result.one("CronJob")["spec"]["jobTemplate"]
    labels.add(cron["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"])
    return labels


def test_empty_overrides_render_what_no_overrides_render() -> None:
    plain = renders(EVERYTHING, args=PROMETHEUS)
    empty = renders({**EVERYTHING, "nameOverride": "", "fullnameOverride": ""}, args=PROMETHEUS)
    assert empty.docs == plain.docs
    assert plain.job["metadata"]["name"].startswith(f"{RELEASE}-install-")
    assert name_labels({}) == {"nvidia-aicr"}


def test_fullname_override_starts_every_objects_name_in_place_of_the_release() -> None:
    found = names({"fullnameOverride": "gpu-stack"})
    assert re.fullmatch(rf"gpu-stack-install-{HASH}", found.pop("Job"))
    assert found == {
        "ServiceAccount": "gpu-stack-installer",
        "ClusterRole": f"{NAMESPACE}-gpu-stack-installer",
        "ClusterRoleBinding": f"{NAMESPACE}-gpu-stack-installer",
        "Role": "gpu-stack-installer",
        "RoleBinding": "gpu-stack-installer",
        "Secret": "gpu-stack-pack-auth",
        "CronJob": "gpu-stack-install-revalidate",
        "PrometheusRule": "gpu-stack-aicr",
    }
    result = renders({**EVERYTHING, "fullnameOverride": "gpu-stack"}, args=PROMETHEUS)
    configmaps = {doc["metadata"]["name"] for doc in result.docs if doc["kind"] == "ConfigMap"}
    assert configmaps == {
        "gpu-stack-runner-settings",
        "gpu-stack-kube-state-metrics",
        "gpu-stack-grafana-dashboard",
    }
    # What the runtime is told agrees with what the Role lets it touch.
    assert result.env["AICR_RUNNER_LEASE__NAME"] == "gpu-stack-install"
    assert result.env["AICR_RUNNER_REPORTS__NAME"] == "aicr-gpu-stack"
    role = next(doc for doc in result.docs if doc["kind"] == "Role")
    granted = {name for rule in role["rules"] for name in rule.get("resourceNames", [])}
    assert {"gpu-stack-install", "aicr-gpu-stack", result.job["metadata"]["name"]} <= granted
    assert result.pod["serviceAccountName"] == "gpu-stack-installer"
    # The release stays the release: the instance label and the report's release.
    assert result.job["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert result.env["AICR_RUNNER_REPORTS__RELEASE"] == RELEASE
    assert name_labels({"fullnameOverride": "gpu-stack"}) == {"nvidia-aicr"}


def test_name_override_is_the_name_label_and_follows_the_release_in_names() -> None:
    found = names({"nameOverride": "gpu"})
    assert re.fullmatch(rf"{RELEASE}-gpu-install-{HASH}", found["Job"])
    assert found["ServiceAccount"] == f"{RELEASE}-gpu-installer"
    assert found["CronJob"] == f"{RELEASE}-gpu-install-revalidate"
    assert name_labels({"nameOverride": "gpu"}) == {"gpu"}
    # A release name that holds it already is not repeated (the scaffold's rule).
    assert names({"nameOverride": "gpu"}, release="gpu-prod")["ServiceAccount"] == "gpu-prod-installer"
    # fullnameOverride wins in the names; the label stays nameOverride.
    both = {"nameOverride": "gpu", "fullnameOverride": "stack"}
    assert names(both)["ServiceAccount"] == "stack-installer"
    assert name_labels(both) == {"gpu"}


def test_a_name_override_yaml_would_read_as_another_type_stays_a_string() -> None:
    assert name_labels({"nameOverride": "no"}) == {"no"}
    assert name_labels({"nameOverride": "123"}) == {"123"}


def test_a_fullname_override_of_44_characters_gives_a_job_name_of_63() -> None:
    job = renders({"fullnameOverride": "a" * 44}).job["metadata"]["name"]
    assert len(job) == 63
    assert re.fullmatch(rf"a{{44}}-install-{HASH}", job)


def too_long(key: str, value: str, longest: int, why: str) -> str:
    return f'{key}="{value}" is {len(value)} characters, at most {longest}: {why}. Shorten it.'


FULL_WHY = (
    "the Job is named <fullnameOverride>-install-<10 hex>, and the Job controller puts that name in its pod's "
    "job-name label, which holds at most 63 characters"
)
NAME_WHY = (
    "it is the app.kubernetes.io/name label of every object the chart renders, and a label value holds at most "
    "63 characters"
)
NOT_A_LABEL = (
    "{key}=\"{value}\" is not a DNS label: {role}, so it may hold lowercase letters, digits and '-', starting and "
    "ending with a letter or digit (e.g. gpu-stack)."
)
ROLES = {
    "fullnameOverride": "it starts the name of every object the chart renders",
    "nameOverride": "it follows the release name in the name of every object the chart renders",
}


def test_c15_a_fullname_override_too_long_for_the_jobs_label_is_refused() -> None:
    rejects_with({"fullnameOverride": "a" * 45}, too_long("fullnameOverride", "a" * 45, 44, FULL_WHY))


def test_c16_a_name_override_too_long_for_a_label_is_refused() -> None:
    assert name_labels({"nameOverride": "n" * 63}) == {"n" * 63}
    rejects_with({"nameOverride": "n" * 64}, too_long("nameOverride", "n" * 64, 63, NAME_WHY))


@pytest.mark.parametrize("key", ["fullnameOverride", "nameOverride"])
@pytest.mark.parametrize("value", ["GPU", "gpu_stack", "-gpu", "gpu-", "gpu.stack", "gpü"])
def test_c15_c16_a_name_kubernetes_would_refuse_is_refused(key: str, value: str) -> None:
    rejects_with({key: value}, NOT_A_LABEL.format(key=key, value=value, role=ROLES[key]))


def test_c15_c16_hold_without_the_schema() -> None:
    skip = ("--skip-schema-validation",)
    rejects_with({"fullnameOverride": "a" * 45}, too_long("fullnameOverride", "a" * 45, 44, FULL_WHY), args=skip)
    result = render({"nameOverride": "Gpu"}, args=skip)
    assert result.error == NOT_A_LABEL.format(key="nameOverride", value="Gpu", role=ROLES["nameOverride"])
