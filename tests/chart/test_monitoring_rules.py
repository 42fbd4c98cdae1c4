"""The chart's PrometheusRule under promtool (github.com/prometheus/prometheus
v0.316.0, built by scripts/bootstrap-tools.sh): ``promtool check rules`` on the
rendered groups, and ``promtool test rules`` feeding series shaped like the
kube-state-metrics output of the chart's configuration (``aicr_report_*`` with
the labels its ``labelsFromPath`` gives) and of kube-state-metrics' own Job
metrics: each alert fires when it should, for this release only, and not
otherwise. Annotations are dropped from the unit-test copy only (promtool
compares them verbatim; ``check rules`` validates their templates)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import ROOT, renders

PROMTOOL = ROOT / ".tools" / "bin" / "promtool"
API = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
OURS = 'namespace="aicr", release="t", report="aicr-t", source="aicr"'
OTHER = 'namespace="aicr", release="other", report="aicr-other", source="aicr"'
OURS_LABELS = {"namespace": "aicr", "release": "t", "report": "aicr-t", "source": "aicr"}


def promtool() -> Path:
    if not PROMTOOL.is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "promtool"], check=True, cwd=ROOT)
    assert PROMTOOL.is_file(), "scripts/bootstrap-tools.sh promtool did not build it"
    return PROMTOOL


def groups(*, annotations: bool = True) -> list[dict[str, Any]]:
    rule = renders({"monitoring": {"prometheusRule": {"enabled": True}}}, args=API).one("PrometheusRule")
    out: list[dict[str, Any]] = rule["spec"]["groups"]
    if not annotations:
        for group in out:
            for r in group["rules"]:
                r.pop("annotations", None)
    return out


def alerts(eval_time: str, name: str, *expected: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": eval_time,
        "alertname": name,
        "exp_alerts": [{"exp_labels": {"severity": "warning", **labels}} for labels in expected],
    }


def run_promtool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool()), *args], capture_output=True, text=True, check=False, cwd=tmp_path)


def test_promtool_checks_the_rendered_rules(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups()}))
    proc = run_promtool(tmp_path, "check", "rules", "rules.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 5 rules found" in proc.stdout + proc.stderr


def verdict_case() -> dict[str, Any]:
    """A release whose pass count drops and fail count rises at minute 60, next to
    another release that fails all along."""
    fail = {**OURS_LABELS, "status": "fail"}
    passed = {**OURS_LABELS, "status": "pass"}
    return {
        "interval": "1m",
        "input_series": [
            # aicr v1.1.0 until minute 59, then v1.2.0: a regression that came with a new version
            {"series": f'aicr_report_results{{{OURS}, status="pass", aicr_version="v1.1.0"}}', "values": "10x59"},
            {"series": f'aicr_report_results{{{OURS}, status="fail", aicr_version="v1.1.0"}}', "values": "0x59"},
            {"series": f'aicr_report_results{{{OURS}, status="pass", aicr_version="v1.2.0"}}', "values": "_x59 8x120"},
            {"series": f'aicr_report_results{{{OURS}, status="fail", aicr_version="v1.2.0"}}', "values": "_x59 2x120"},
            {"series": f'aicr_report_results{{{OURS}, status="error"}}', "values": "0x180"},
            {"series": f'aicr_report_results{{{OTHER}, status="fail"}}', "values": "5x180"},
            {"series": f"aicr_report_last_run_timestamp_seconds{{{OURS}}}", "values": "0+60x180"},
        ],
        "alert_rule_test": [
            alerts("30m", "AicrChecksFailed"),
            alerts("62m", "AicrChecksFailed"),  # pending: `for` is 5m
            alerts("70m", "AicrChecksFailed", {"namespace": "aicr", "release": "t"}),
            alerts("30m", "AicrVerdictRegressed"),
            alerts("70m", "AicrVerdictRegressed", fail, passed),
            alerts("170m", "AicrVerdictRegressed"),  # an hour on, the same counts are no regression
            alerts("170m", "AicrChecksFailed", {"namespace": "aicr", "release": "t"}),
            alerts("170m", "AicrVerdictStale"),
        ],
    }


def stale_case() -> dict[str, Any]:
    """3 x 86400 s (the defaults) without a new verdict: stale after 72 h."""
    return {
        "interval": "1h",
        "input_series": [
            {"series": f"aicr_report_last_run_timestamp_seconds{{{OURS}}}", "values": "0x100"},
            {"series": f"aicr_report_last_run_timestamp_seconds{{{OTHER}}}", "values": "0+3600x100"},
        ],
        "alert_rule_test": [
            alerts("71h", "AicrVerdictStale"),
            alerts("73h", "AicrVerdictStale", OURS_LABELS),
        ],
    }


def install_case() -> dict[str, Any]:
    """kube-state-metrics' kube_job_failed for this release's install Job, and another's."""
    ours = {"namespace": "aicr", "job_name": "t-install-0123456789"}
    labels = 'namespace="aicr", job_name="t-install-0123456789"'
    return {
        "interval": "1m",
        "input_series": [
            {"series": f'kube_job_failed{{{labels}, condition="true"}}', "values": "0x9 1x20"},
            {"series": f'kube_job_failed{{{labels}, condition="false"}}', "values": "1x9 0x20"},
            {
                "series": 'kube_job_failed{namespace="aicr", job_name="other-install-a", condition="true"}',
                "values": "1x30",
            },
        ],
        "alert_rule_test": [
            alerts("5m", "AicrInstallFailed"),
            alerts("15m", "AicrInstallFailed", {**ours, "condition": "true"}),
        ],
    }


def upgrade_case() -> dict[str, Any]:
    """An upgrade of this release stopped at minute 10 with 2 blocked components, next to
    another release whose upgrade went on (no annotation, so no series); the next
    install of ours crosses nothing (the annotation, and with it the series, gone)."""
    return {
        "interval": "1m",
        "input_series": [
            {
                "series": f'aicr_report_upgrade_blocked_components{{{OURS}, aicr_version="v1.2.0"}}',
                "values": "_x9 2x20",
            },
            {"series": f"aicr_report_last_run_timestamp_seconds{{{OTHER}}}", "values": "0+60x60"},
        ],
        "alert_rule_test": [
            alerts("5m", "AicrUpgradeBlocked"),
            alerts("15m", "AicrUpgradeBlocked", OURS_LABELS),
            alerts("40m", "AicrUpgradeBlocked"),
        ],
    }


def test_each_alert_fires_when_it_should_and_not_otherwise(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups(annotations=False)}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [verdict_case(), stale_case(), install_case(), upgrade_case()],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    proc = run_promtool(tmp_path, "test", "rules", "tests.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr
