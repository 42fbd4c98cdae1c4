"""reports.api: the verdict report's API reaches the runtime, the Role grants
exactly the report the run writes (by name, in the release namespace), and the
value is a runtime setting (it never renames the Job). Under Helm 4 and Helm 3
(tests/chart/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from aicr_runner.settings.config import ReportsApi, load
from tests.chart.helm import RELEASE, rejects_by_schema, renders

GROUPS = {"openreports": ("openreports.io", "reports"), "wgpolicy": ("wgpolicyk8s.io", "policyreports")}


def report_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rules if set(r["apiGroups"]) & {"openreports.io", "wgpolicyk8s.io"}]


def expected_rules(*apis: str, name: str = f"aicr-{RELEASE}") -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for api in apis:
        group, resource = GROUPS[api]
        rules += [
            {"apiGroups": [group], "resources": [resource], "verbs": ["create"]},
            {"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": ["patch"]},
        ]
    return rules


@pytest.mark.parametrize(
    ("api", "apis"),
    [
        ("auto", ("openreports", "wgpolicy")),
        ("openreports", ("openreports",)),
        ("wgpolicy", ("wgpolicy",)),
        ("none", ()),
    ],
    ids=["auto", "openreports", "wgpolicy", "none"],
)
def test_each_setting_reaches_the_runtime_and_the_role_grants_only_its_report(api: str, apis: tuple[str, ...]) -> None:
    result = renders({"reports": {"api": api}})
    settings = load(result.env)
    assert (settings.reports.api, settings.reports.name, settings.reports.release) == (
        ReportsApi(api),
        f"aicr-{RELEASE}",
        RELEASE,
    )
    assert report_rules(result.one("Role")["rules"]) == expected_rules(*apis)


def test_the_default_is_auto_and_the_name_follows_the_release() -> None:
    result = renders(release="gpu-east")
    assert result.env_from["AICR_RUNNER_REPORTS__API"] == "auto"
    assert result.env_from["AICR_RUNNER_REPORTS__NAME"] == "aicr-gpu-east"
    assert result.env_from["AICR_RUNNER_REPORTS__RELEASE"] == "gpu-east"
    rules = report_rules(result.one("Role")["rules"])
    assert rules == expected_rules("openreports", "wgpolicy", name="aicr-gpu-east")


def test_the_setting_is_a_runtime_one_and_never_renames_the_job() -> None:
    names = {renders({"reports": {"api": api}}).job["metadata"]["name"] for api in ("auto", "none", "wgpolicy")}
    assert len(names) == 1
    assert "AICR_RUNNER_REPORTS__API" not in {e["name"] for e in renders().env_list}


def test_an_unknown_api_is_refused_by_the_schema() -> None:
    rejects_by_schema({"reports": {"api": "policyreport"}}, "/reports/api", "value must be one of")
    rejects_by_schema({"reports": {"apis": "auto"}}, "/reports", "additional properties 'apis' not allowed")
