"""`aicr-runner plan --values` reads a values file the way the chart renders it.

For the chart's defaults and every example, the Python mapping of the values
(chart defaults merged with the example) must produce exactly the AICR_RUNNER_*
values the real chart renders; and every runtime setting is either mapped or
one the chart derives from cluster objects.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from aicr_runner.config import ENV_PREFIX, env_var_names
from aicr_runner.values import CLUSTER_ONLY_VALUES, VALUE_TO_ENV, env_from_values
from tests.chart.helm import ROOT, merge, renders
from tests.chart.test_contract import CASES

#: Settings the chart derives from cluster objects or fixed pod paths, not values.
CLUSTER_ONLY = {
    "PACK__CREDENTIALS_FILE",
    "VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR",
    "VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE",
    "NAMESPACE",
    "WORK_DIR",
    "TERMINATION_MESSAGE_PATH",
    "SHUTDOWN_GRACE_SECONDS",
    # The install Lease serialises runs in a cluster; plan deploys nothing.
    "LEASE__NAME",
    "LEASE__POD_NAME",
    "LEASE__JOB_NAME",
    "LEASE__DURATION_SECONDS",
    "LEASE__WAIT_SECONDS",
}
DEFAULTS = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())


def normalised(value: str) -> Any:
    if value.startswith("["):
        return json.loads(value)
    try:
        return float(value)
    except ValueError:
        return value


def test_every_setting_is_mapped_or_cluster_only() -> None:
    names = {n.removeprefix(ENV_PREFIX) for n in env_var_names()}
    mapped = set(VALUE_TO_ENV.values())
    assert mapped.isdisjoint(CLUSTER_ONLY)
    assert mapped | CLUSTER_ONLY == names


def leaf_keys(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of a values mapping (an empty map is a leaf)."""
    if not isinstance(values, dict) or not values:
        return [prefix]
    return [key for name, child in values.items() for key in leaf_keys(child, f"{prefix}.{name}" if prefix else name)]


def test_every_chart_value_is_mapped_or_cluster_only() -> None:
    """A new chart value must be classified: plan either maps it or ignores it on purpose."""

    def cluster_only(key: str) -> bool:
        return any(key == c or key.startswith(c + ".") for c in CLUSTER_ONLY_VALUES)

    keys = [*leaf_keys(DEFAULTS), "job.ttlSecondsAfterFinished"]  # a null default vanishes on load
    unclassified = [k for k in keys if k not in VALUE_TO_ENV and not cluster_only(k)]
    assert not unclassified, f"neither in VALUE_TO_ENV nor CLUSTER_ONLY_VALUES: {unclassified}"
    both = [k for k in VALUE_TO_ENV if cluster_only(k)]
    assert not both, f"both mapped and cluster-only: {both}"
    assert {c for c in CLUSTER_ONLY_VALUES if not any(k == c or k.startswith(c + ".") for k in keys)} == set()


def test_cluster_only_values_are_accepted_and_ignored() -> None:
    values = {
        "accelerator": "h100",
        "global": {"imageRegistry": "mirror.example.com"},
        "serviceAccount": {"create": False, "name": "x"},
        "rbac": {"create": False},
        "job": {"podLabels": {"a": "b"}, "extraVolumes": [{"name": "ca", "emptyDir": {}}]},
    }
    assert env_from_values(values) == {ENV_PREFIX + "CRITERIA__ACCELERATOR": "h100"}


@pytest.mark.parametrize("name", list(CASES))
def test_plan_values_match_the_rendered_job(name: str) -> None:
    values = CASES[name]
    rendered = renders(values, raw=True).env
    ours = env_from_values(merge(DEFAULTS, values))
    assert set(ours) == {ENV_PREFIX + n for n in VALUE_TO_ENV.values()}
    mismatches = {k: (v, rendered[k]) for k, v in ours.items() if normalised(v) != normalised(rendered[k])}
    assert not mismatches, mismatches
