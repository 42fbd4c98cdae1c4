"""monitoring.*: kube-state-metrics' custom-resource-state configuration for the
Report (and, gated, the alerts and the dashboard), off by default, under Helm 4
and Helm 3 (tests/chart/conftest.py). The e2e suite runs the real
kube-state-metrics on the rendered configuration (e2e/test_monitoring.py)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.chart.helm import RELEASE, rejects_by_schema, renders

KSM_CONFIGMAP = f"{RELEASE}-kube-state-metrics"


def configmaps(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    docs = renders(values).docs
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}


def ksm_config(values: dict[str, Any] | None = None) -> dict[str, Any]:
    cm = configmaps({"monitoring": {"kubeStateMetrics": {"enabled": True}}} | (values or {}))[KSM_CONFIGMAP]
    loaded = yaml.safe_load(cm["data"]["config.yaml"])
    assert isinstance(loaded, dict)
    return loaded


def test_kube_state_metrics_config_is_off_by_default() -> None:
    assert KSM_CONFIGMAP not in configmaps()
    assert KSM_CONFIGMAP not in configmaps({"monitoring": {"kubeStateMetrics": {"enabled": False}}})


def test_kube_state_metrics_config_turns_the_report_into_counts_and_last_run() -> None:
    config = ksm_config()
    assert config["kind"] == "CustomResourceStateMetrics"
    [resource] = config["spec"]["resources"]
    assert resource["groupVersionKind"] == {"group": "openreports.io", "version": "v1alpha1", "kind": "Report"}
    assert resource["metricNamePrefix"] == "aicr_report"
    assert resource["labelsFromPath"] == {
        "namespace": ["metadata", "namespace"],
        "report": ["metadata", "name"],
        "release": ["metadata", "labels", "aicr.nvidia.com/release"],
        "source": ["source"],
    }
    metrics = {m["name"]: m["each"] for m in resource["metrics"]}
    assert metrics["results"] == {"type": "Gauge", "gauge": {"path": ["summary"], "labelFromKey": "status"}}
    assert metrics["last_run_timestamp_seconds"] == {
        "type": "Gauge",
        "gauge": {"path": ["metadata", "annotations", "aicr.nvidia.com/last-run"]},
    }


def test_the_config_names_the_runners_own_label_and_annotation() -> None:
    from aicr_runner.kube import openreports

    resource = ksm_config()["spec"]["resources"][0]
    assert resource["labelsFromPath"]["release"][-1] == openreports.RELEASE_LABEL
    last_run = next(m for m in resource["metrics"] if m["name"] == "last_run_timestamp_seconds")
    assert last_run["each"]["gauge"]["path"][-1] == openreports.LAST_RUN_ANNOTATION


def test_the_config_map_is_in_the_release_namespace_with_the_chart_labels() -> None:
    cm = configmaps({"monitoring": {"kubeStateMetrics": {"enabled": True}}})[KSM_CONFIGMAP]
    assert cm["metadata"]["namespace"] == "aicr"
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_unknown_monitoring_keys_are_refused_by_the_schema() -> None:
    rejects_by_schema({"monitoring": {"kubeStateMetric": {}}}, "/monitoring", "additional properties")
    ksm = "/monitoring/kubeStateMetrics"
    rejects_by_schema({"monitoring": {"kubeStateMetrics": {"enable": True}}}, ksm, "additional properties")
    rejects_by_schema({"monitoring": {"kubeStateMetrics": {"enabled": "yes"}}}, f"{ksm}/enabled", "got string")
