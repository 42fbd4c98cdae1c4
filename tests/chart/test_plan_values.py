"""`aicr-runner plan --values` reads a values file the way the chart renders it.

For the chart's defaults and every example, the Python mapping of the values
(chart defaults merged with the example) must produce exactly the AICR_RUNNER_*
values the real chart renders; and every runtime setting is either mapped or
one the chart derives from cluster objects.

A values file the chart's schema refuses is refused by plan too, offline, with
the problems ``helm install`` lists (the runtime carries a copy of the schema).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.settings import values_schema as valueschema
from aicr_runner.settings.config import ENV_PREFIX, env_var_names
from aicr_runner.settings.values_file import CLUSTER_ONLY_VALUES, VALUE_TO_ENV, env_from_values, load_values_file
from tests.chart.helm import ROOT, merge, render, renders
from tests.chart.test_contract import CASES, WHEN_NOT_DEFAULT

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
    # The verdict report is written to a cluster's API; plan writes none.
    "REPORTS__API",
    "REPORTS__NAME",
    "REPORTS__RELEASE",
    # aicr snapshot runs an agent Job in a cluster; plan snapshots nothing.
    "SNAPSHOT__ENABLED",
    "SNAPSHOT__IMAGE",
    "SNAPSHOT__PRIVILEGED",
    "SNAPSHOT__NODE_SELECTOR",
    "SNAPSHOT__TOLERATIONS",
    "SNAPSHOT__TIMEOUT_SECONDS",
    "SNAPSHOT__NAMESPACE",
    "SNAPSHOT__CONFIGMAP",
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
        "global": {"imageRegistry": "mirror.example.com"},
        "serviceAccount": {"create": False, "name": "x"},
        "rbac": {"create": False},
        "job": {"podLabels": {"a": "b"}, "extraVolumes": [{"name": "ca", "emptyDir": {}}], "rerun": "2026-12-06"},
        "criteria": {"accelerator": "h100", "preflight": False},
        "pack": {"secret": "regcred", "auth": {"dockerconfigjson": "{}"}},
    }
    assert env_from_values(values) == {ENV_PREFIX + "CRITERIA__ACCELERATOR": "h100"}


@pytest.mark.parametrize("name", list(CASES))
def test_plan_values_match_the_rendered_job(name: str, tmp_path: Path) -> None:
    values = CASES[name]
    # A variable the chart leaves out at its default (WHEN_NOT_DEFAULT) means the runtime's default.
    absent = {env: DEFAULTS[group][key] for env, (group, key, _) in WHEN_NOT_DEFAULT.items()}
    rendered = absent | renders(values, raw=True).env
    # Through plan's boundary, which reads the earlier names (CASES has some) under the new.
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(merge(DEFAULTS, values)))
    ours = env_from_values(load_values_file(path))
    assert set(ours) == {ENV_PREFIX + n for n in VALUE_TO_ENV.values()}
    mismatches = {k: (v, rendered[k]) for k, v in ours.items() if normalised(v) != normalised(rendered[k])}
    assert not mismatches, mismatches


# -- the chart's schema, offline ------------------------------------------------------------------

CHART_SCHEMA = ROOT / "chart" / "values.schema.json"

#: Values the chart's schema refuses, one or more problems each (nested groups,
#: several keywords at one place, every keyword the schema uses).
REFUSED: dict[str, dict[str, Any]] = {
    "typo at the top": {"accelerater": "h200", "accelerator": "h100"},
    "scalar for an object": {"aicrDownload": "fast"},
    "enum": {"accelerator": "h1000"},
    "item type": {"recipeArgs": ["--nodes", 4]},
    "trailing newline": {"aicrVersion": "v1.2.0\n"},
    "two under one object": {"validate": {"phases": {}, "publish": {"regsitrySecret": "x"}}},
    "three under job": {"job": {"backoffLimit": -1, "nodeSelector": {"a": 1}, "ttlSecondsAfterFinished": "x"}},
    "pattern in a nested object": {"aicrSha256": {"amd64": "abc"}},
    "two types": {"dataPackAuth": 5},
    "integer": {"lease": {"durationSeconds": 1.5}},
    "required and extra in items": {"imagePullSecrets": [{}, {"name": "x", "extra": 1}]},
    "two keywords at one place": {"validate": {"publish": {"identityTokenSecret": {"key": ""}}}},
    "maximum and exclusiveMinimum": {"aicrDownload": {"attempts": 50, "timeoutSeconds": 0}},
    "string types and a pattern": {"rerun": 5, "service": "eks\n"},
    "type before enum": {"service": ["a"], "aicrArch": 5, "validate": {"phases": [1, "x"]}},
    "several typos": {"a": ["x"], "b": [["x"]]},
    "maxLength": {"rerun": "r" * 64},
}


def test_the_runtime_carries_the_charts_schema_unchanged() -> None:
    """src/aicr_runner/data/values.schema.json is a copy (the image has no chart):
    after a schema change, copy chart/values.schema.json over it."""
    assert valueschema.SCHEMA_PATH.read_bytes() == CHART_SCHEMA.read_bytes(), (
        "the runtime's schema copy is stale: cp chart/values.schema.json src/aicr_runner/data/values.schema.json"
    )


def keywords(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key in ("properties", "$defs", "patternProperties"):
                for child in value.values():
                    found |= keywords(child)
            elif key in ("items", "additionalProperties"):
                found |= keywords(value)
    return found


def test_plan_checks_every_keyword_the_charts_schema_uses() -> None:
    used = keywords(json.loads(CHART_SCHEMA.read_text()))
    assert used <= valueschema.KEYWORDS, (
        f"teach aicr_runner/settings/values_schema.py {sorted(used - valueschema.KEYWORDS)}"
    )


def test_the_charts_defaults_and_every_example_pass_the_offline_schema() -> None:
    for name, values in {"values.yaml": DEFAULTS, **CASES}.items():
        assert valueschema.problems(values) == [], name


def canonical(line: str) -> str:
    """Helm names extra properties in map order (random): compare them as a set.
    A type error names the value in plan's line (``got string 'x', want ...``),
    not in Helm's: compared without it."""
    line = re.sub(r"^(\s*- at '[^']*': got [a-z]+) .*(, want [a-z ]+)$", r"\1\2", line)
    # Under a secret-bearing key plan never quotes the value (Helm does): compared without it.
    secret = "|".join(re.escape(pointer) for pointer in valueschema.SECRET_POINTERS)
    line = re.sub(rf"^(\s*- at '(?:{secret})(?:/[^']*)?': ).*( does not match pattern .*)$", r"\1<value>\2", line)
    head, found, tail = line.partition(": additional properties ")
    if not found:
        return line
    names, _, rest = tail.rpartition(" not allowed")
    return f"{head}{found}{', '.join(sorted(names.split(', ')))} not allowed{rest}"


def problem_lines(lines: list[str]) -> list[str]:
    return sorted(canonical(line) for line in lines if line.lstrip().startswith("- at "))


@pytest.mark.parametrize("name", list(REFUSED))
def test_plan_refuses_what_helm_refuses_in_its_words(name: str) -> None:
    values = REFUSED[name]
    helm = render(values, raw=True)
    assert helm.schema_error, helm.stderr
    ours = valueschema.render(valueschema.problems(values))
    assert ours[:2] == [
        "values don't meet the specifications of the schema(s) in the following chart(s):",
        "nvidia-aicr:",
    ]
    assert ours[0] in helm.stderr
    assert ours[1] in helm.stderr.splitlines()
    assert problem_lines(ours) == problem_lines(helm.stderr.splitlines()), (
        f"\nhelm:\n{helm.stderr}\nplan:\n" + "\n".join(ours)
    )
