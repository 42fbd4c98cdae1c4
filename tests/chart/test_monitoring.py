"""monitoring.*: kube-state-metrics' custom-resource-state configuration for the
Report (and, gated, the alerts and the dashboard), off by default, under Helm 4
and Helm 3 (tests/chart/conftest.py). The e2e suite runs the real
kube-state-metrics on the rendered configuration (e2e/test_monitoring.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.chart.helm import RELEASE, merge, rejects_by_schema, renders

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
        "aicr_version": ["results", "0", "properties", "aicrVersion"],
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
    blocked = next(m for m in resource["metrics"] if m["name"] == "upgrade_blocked_components")
    assert blocked["each"]["gauge"]["path"][-1] == openreports.UPGRADE_BLOCKED_ANNOTATION


def test_the_config_map_is_in_the_release_namespace_with_the_chart_labels() -> None:
    cm = configmaps({"monitoring": {"kubeStateMetrics": {"enabled": True}}})[KSM_CONFIGMAP]
    assert cm["metadata"]["namespace"] == "aicr"
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_unknown_monitoring_keys_are_refused_by_the_schema() -> None:
    rejects_by_schema({"monitoring": {"kubeStateMetric": {}}}, "/monitoring", "additional properties")
    ksm = "/monitoring/kubeStateMetrics"
    rejects_by_schema({"monitoring": {"kubeStateMetrics": {"enable": True}}}, ksm, "additional properties")
    rejects_by_schema({"monitoring": {"kubeStateMetrics": {"enabled": "yes"}}}, f"{ksm}/enabled", "got string")


# -- monitoring.prometheusRule ---------------------------------------------------

PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
ALERTS = {"AicrChecksFailed", "AicrVerdictRegressed", "AicrInstallFailed", "AicrVerdictStale", "AicrUpgradeBlocked"}
#: kube-state-metrics' own Job metrics the rules may read (its docs/metrics/workload/job-metrics.md, v2.18.0).
KSM_STANDARD = {
    "kube_job_status_succeeded",
    "kube_job_status_failed",
    "kube_job_complete",
    "kube_job_failed",
    "kube_job_status_start_time",
    "kube_job_status_completion_time",
    "kube_job_status_active",
}
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTORS = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_GROUPINGS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and numbers dropped)."""
    bare = _GROUPINGS.sub(" ", _SELECTORS.sub(" ", _STRINGS.sub('""', expr)))
    return {name for name in _IDENT.findall(bare) if name not in _PROMQL_WORDS}


def produced_metrics() -> set[str]:
    """What the shipped kube-state-metrics configuration produces, plus its standard Job metrics."""
    produced = set(KSM_STANDARD)
    for resource in ksm_config()["spec"]["resources"]:
        produced |= {f"{resource['metricNamePrefix']}_{m['name']}" for m in resource["metrics"]}
    return produced


def prometheus_rule(values: dict[str, Any] | None = None) -> dict[str, Any]:
    on = {"monitoring": {"prometheusRule": {"enabled": True}}}
    return renders(merge(on, values or {}), args=("--api-versions", PROMETHEUS_RULE_API)).one("PrometheusRule")


def rules(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in prometheus_rule(values)["spec"]["groups"] for r in group["rules"]}


def test_metric_names_finds_what_a_query_selects() -> None:
    expr = 'sum by (namespace) (a_b{x="y z", s=~"f|e"}) > 0 or time() - c_d offset 1h < rate(e_f[5m]) unless on (k) g'
    assert metric_names(expr) == {"a_b", "c_d", "e_f", "g"}
    assert metric_names("count(x > 0) or vector(0)") == {"x"}


def test_the_prometheus_rule_is_off_by_default_and_without_its_api() -> None:
    assert renders(args=("--api-versions", PROMETHEUS_RULE_API)).maybe("PrometheusRule") is None
    assert renders({"monitoring": {"prometheusRule": {"enabled": True}}}).maybe("PrometheusRule") is None


def test_the_prometheus_rule_has_the_five_alerts_and_the_additional_labels() -> None:
    rule = prometheus_rule({"monitoring": {"prometheusRule": {"additionalLabels": {"release": "kps"}}}})
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert (rule["metadata"]["namespace"], rule["metadata"]["labels"]["release"]) == ("aicr", "kps")
    assert set(rules()) == ALERTS


def test_every_rule_reads_only_metrics_the_shipped_config_produces() -> None:
    produced = produced_metrics()
    assert {"aicr_report_results", "aicr_report_last_run_timestamp_seconds"} <= produced
    for name, rule in rules().items():
        names = metric_names(rule["expr"])
        assert names, name
        assert names <= produced, f"{name} reads {sorted(names - produced)}, which nothing produces"


def test_the_rules_select_this_release_and_the_stale_window_is_runs_times_schedule() -> None:
    values = {
        "monitoring": {"prometheusRule": {"scheduleSeconds": 3600, "staleAfterRuns": 2, "regressionWindow": "30m"}}
    }
    got = rules(values)
    assert 'namespace="aicr", release="t", source="aicr"' in got["AicrChecksFailed"]["expr"]
    assert got["AicrVerdictStale"]["expr"].endswith("> 7200")
    assert got["AicrVerdictRegressed"]["expr"].count("offset 30m") == 2
    assert 'job_name=~"t-install-.*"' in got["AicrInstallFailed"]["expr"]


def test_bad_prometheus_rule_values_are_refused_by_the_schema() -> None:
    pr = "/monitoring/prometheusRule"
    rejects_by_schema({"monitoring": {"prometheusRule": {"regressionWindow": "1 hour"}}}, f"{pr}/regressionWindow", "")
    rejects_by_schema({"monitoring": {"prometheusRule": {"staleAfterRuns": 0}}}, f"{pr}/staleAfterRuns", "")
    rejects_by_schema(
        {"monitoring": {"prometheusRule": {"additionalLabels": {"a": 1}}}}, f"{pr}/additionalLabels/a", ""
    )


# -- monitoring.dashboards -------------------------------------------------------

DASHBOARD_CONFIGMAP = f"{RELEASE}-grafana-dashboard"


def dashboard(values: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ConfigMap, the dashboard it holds)."""
    cm = configmaps(merge({"monitoring": {"dashboards": {"enabled": True}}}, values or {}))[DASHBOARD_CONFIGMAP]
    [(key, text)] = cm["data"].items()
    assert key.endswith(".json")
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return cm, loaded


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def test_the_dashboard_is_off_by_default() -> None:
    assert DASHBOARD_CONFIGMAP not in configmaps()


def test_the_dashboard_is_found_by_grafanas_sidecar_and_has_a_cluster_variable() -> None:
    cm, board = dashboard({"monitoring": {"dashboards": {"annotations": {"grafana_folder": "GPU"}}}})
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert "cluster" in variables["cluster"]["definition"]
    assert all('cluster=~"$cluster"' in q for q in [t["expr"] for p in board["panels"] for t in p["targets"]])


def test_every_dashboard_query_reads_only_metrics_the_shipped_config_produces() -> None:
    produced = produced_metrics()
    _, board = dashboard()
    for query in dashboard_queries(board):
        names = metric_names(re.sub(r"^label_values\((.*), \w+\)$", r"\1", query))
        assert names, query
        assert names <= produced, f"{query} reads {sorted(names - produced)}, which nothing produces"
