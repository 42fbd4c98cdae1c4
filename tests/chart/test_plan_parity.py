"""Issue 35 item 7: ``plan --values`` accepts and refuses exactly what the chart
renders and refuses. One table, both on the same inputs: ``helm template`` (Helm 3
and 4) and plan's reading of a values file (schema, the chart's guards on values
plan otherwise ignores, then the runtime settings)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.errors import ConfigError
from aicr_runner.settings.config import load
from aicr_runner.settings.values_file import env_from_values, load_values_file
from tests.chart.helm import BASE, merge, render

#: Values files as text (YAML as Helm reads it: ``1e1`` is a number), by what they hold.
INPUTS: dict[str, str] = {
    "the defaults": "",
    "1e1 for an integer (Helm renders 10)": "aicrDownload:\n  attempts: 1e1\n",
    "2.5 for an integer": "aicrDownload:\n  attempts: 2.5\n",
    "0 below an integer's minimum": "aicrDownload:\n  attempts: 0\n",
    "a string for a boolean": "validate:\n  enabled: 'yes'\n",
    "Exists with a value (snapshot off)": (
        "snapshot:\n  tolerations:\n  - {key: gpu, operator: Exists, value: x, effect: NoSchedule}\n"
    ),
    "Exists with a value (snapshot on)": (
        "snapshot:\n  enabled: true\n  tolerations:\n  - {key: gpu, operator: Exists, value: x, effect: NoSchedule}\n"
    ),
    "Exists without a value": (
        "snapshot:\n  enabled: true\n  tolerations:\n  - {key: gpu, operator: Exists, effect: NoSchedule}\n"
    ),
    "an empty snapshot namespace": "snapshot:\n  enabled: true\n  namespace: ''\n",
    "a typo at the top": "accelerater: h100\n",
    "name overrides that fit": "nameOverride: gpu\nfullnameOverride: " + "a" * 44 + "\n",
    "a fullnameOverride too long for the Job's label (C-15)": "fullnameOverride: " + "a" * 45 + "\n",
    "a nameOverride too long for a label (C-16)": "nameOverride: " + "n" * 64 + "\n",
    "a nameOverride no object name may hold (C-16)": "nameOverride: GPU_stack\n",
    "a fullnameOverride that is not a string": "fullnameOverride: 12\n",
    "the aicr release from a registry, with the pack's credential and transport": (
        "aicrReleaseRef: mirror.example:5000/aicr/nvidia/aicr/release:v0.11.1\ndataPackSecret: regcred\n"
        "dataPackPlainHTTP: true\n"
    ),
    "the pack's transport with neither a pack nor the release from a registry (G-17d)": "dataPackPlainHTTP: true\n",
    "a setting set to null (C-20)": "deploy:\n  flags: null\n",
    "a whole group set to null (C-20)": "deploy: null\n",
    "an earlier name set to null (C-20)": "deployFlags: null\n",
    "a chart-only value set to null (C-20)": "image:\n  repository: null\n",
    "a boolean set to null (read as false)": "validate:\n  enabled: null\n",
    "a list set to null (read as empty)": "recipe:\n  args: null\n",
    "the aicr release from a registry and an HTTP folder (C-17)": (
        "aicrReleaseRef: mirror.example:5000/aicr/nvidia/aicr/release:v0.11.1\n"
        "aicrReleaseBaseUrl: https://mirror.example/aicr\n"
    ),
}


def plan_accepts(text: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "values.yaml"
        path.write_text(yaml.safe_dump(BASE) + text)
        try:
            load(env_from_values(load_values_file(path)))
        except ConfigError as exc:
            return False, "\n".join(exc.problems)
    return True, ""


def helm_values(text: str) -> dict[str, Any]:
    from aicr_runner.settings.values_file import _helm_loader

    document = yaml.load(text, Loader=_helm_loader()) or {}  # noqa: S506 - a SafeLoader subclass
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize("name", list(INPUTS))
def test_plan_accepts_and_refuses_what_the_chart_renders_and_refuses(name: str) -> None:
    text = INPUTS[name]
    helm = render(merge(BASE, helm_values(text)))
    ours, why = plan_accepts(text)
    assert ours is helm.ok, f"\nhelm ({'renders' if helm.ok else 'refuses'}):\n{helm.stderr}\nplan:\n{why}"
    if not helm.ok and helm.error:
        assert helm.error in why, "a template guard is refused in the chart's words"


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    document: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        document = {part: document}
    return document


def _null_read_settings() -> list[str]:
    from aicr_runner.settings.values_file import _null_renders, value_to_env

    return sorted(path for path, rendered in _null_renders().items() if rendered and path in value_to_env())


@pytest.mark.parametrize("path", _null_read_settings())
def test_a_null_boolean_or_list_reaches_plan_as_the_chart_renders_it(path: str) -> None:
    """C-20 lets a null through only where the chart renders it (false, []): plan reads the same."""
    from aicr_runner.settings.config import ENV_PREFIX
    from aicr_runner.settings.values_file import value_to_env

    # deploy.enabled=false needs validation on (G-05); validate.phases=[] is refused with it on (G-02)
    values = merge({"validate": {"enabled": True}} if path == "deploy.enabled" else {}, _nested(path, None))
    helm = render(merge(BASE, values))
    assert helm.ok, helm.stderr
    name = ENV_PREFIX + value_to_env()[path]
    assert env_from_values(values)[name] == helm.env[name]
