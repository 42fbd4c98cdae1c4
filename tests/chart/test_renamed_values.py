"""The values regrouping's compatibility layer (chart/templates/_compat.tpl, the list
in _renamed.tpl generated from each setting's ``legacy=``): every earlier, flat name
(aicrVersion, recipeConfigMap, deployFlags, dataPack, statusConfigMap, ...; the chart's
own values too: CHART_ONLY_RENAMED) still renders exactly what its new
name renders, an upgrade with unchanged values renders byte for byte what the chart
rendered before the regrouping (renamed-values.json: digests of the ``helm template``
output of the chart before any of these values moved), and the two names set apart fail the render (C-18) and
``plan --values`` alike. Every test renders with Helm 4 and Helm 3.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.errors import ConfigError
from aicr_runner.settings.values_file import load_values_file, renamed_values
from aicr_runner.settings.values_schema import NOT_SHOWN
from tests.chart.helm import CHART, Rendered, helm_major, merge, rejects_with, render

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "renamed-values.json"

PACK = "registry.example/acme/aicr-pack:1.0.0"
AUTH = '{"auths":{"registry.example":{"auth":"dXNlcjp0b2tlbg=="}}}'

#: A value each earlier name is set to in these tests: valid, and not the chart's default.
SAMPLES: dict[str, Any] = {
    "service": "eks",
    "accelerator": "h200",
    "intent": "training",
    "os": "ubuntu",
    "platform": "kubeflow",
    "criteriaPreflight": False,
    "dataPack": PACK,
    "dataPackSecret": "pack-pull",
    "dataPackAuth.dockerconfigjson": AUTH,
    "dataPackPlainHTTP": True,
    "dataPackInsecureTLS": True,
    "dataPackPullBudgetSeconds": 900,
    "statusConfigMap": "my-status",
    "logFormat": "json",
    "kubeWriteBudgetSeconds": 60,
    "rerun": "2026-12-06",
    "aicrVersion": "v1.1.0",
    "aicrArch": "arm64",
    "aicrSha256.amd64": "a" * 64,
    "aicrSha256.arm64": "b" * 64,
    "aicrReleaseBaseUrl": "https://mirror.example/aicr",
    "aicrReleaseRef": "mirror.example:5000/aicr/nvidia/aicr/release:v1.1.0",
    "aicrBinary.path": "/opt/aicr/aicr",
    "aicrBinary.sha256": "c" * 64,
    "aicrDownload.attempts": 7,
    "aicrDownload.timeoutSeconds": 30,
    "aicrDownload.budgetSeconds": 900,
    "aicrProvenance.mode": "warn",
    "aicrProvenance.identity": "https://github.com/acme/aicr/.github/workflows/release.yaml@refs/tags/{version}",
    "aicrProvenance.issuer": "https://issuer.example",
    "aicrProvenance.trustedRoot": "/etc/sigstore/trusted_root.json",
    "recipeFlags": "--recipe-flag",
    "recipeArgs": ["--recipe-arg", "1"],
    "recipeConfigMap": "my-recipe",
    "bundleFlags": "--bundle-flag",
    "bundleArgs": ["--accelerated-node-toleration", "nvidia.com/gpu=present:NoSchedule"],
    "storageClass": "fast",
    "deployFlags": "--best-effort",
    "deployArgs": ["--retries", "1"],
    "validateFlags": "--validate-flag",
    "validateArgs": ["--namespace", "aicr"],
}

#: What an earlier name needs beside it to render (under its new names).
NEEDS: dict[str, dict[str, Any]] = {
    "aicrBinary.sha256": {"aicr": {"binary": {"path": "/opt/aicr/aicr"}}},
    "intent": {"criteria": {"service": "eks"}},
    "os": {"criteria": {"service": "eks"}},
    "platform": {"criteria": {"service": "eks", "intent": "training", "os": "ubuntu"}},
    # gke without os cos: the catalog check refuses it unless turned off.
    "criteriaPreflight": {"criteria": {"service": "gke"}},
    "dataPackSecret": {"pack": {"ref": PACK}},
    "dataPackAuth.dockerconfigjson": {"pack": {"ref": PACK}},
    "dataPackPlainHTTP": {"pack": {"ref": PACK}},
    "dataPackInsecureTLS": {"pack": {"ref": PACK}},
}

#: Values that exclude each other (the release from a registry or over HTTP; a
#: downloaded aicr or a preinstalled one; an existing pack Secret or the chart's):
#: the cases below set every earlier name between them.
APART = {"aicrReleaseRef", "aicrBinary.path", "aicrBinary.sha256", "dataPackSecret", "dataPackAuth.dockerconfigjson"}
RUNS = {"validate": {"enabled": True}, "revalidate": {"schedule": "0 */6 * * *"}}


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``a.b``."""
    *parents, leaf = dotted.split(".")
    out: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        out = {part: out}
    return out


def values_of(names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        out = merge(out, nested(name, SAMPLES[name]))
    return out


#: Values a release may have been installed with before the regrouping, in the earlier names.
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "every earlier name, release over HTTP": merge(
        RUNS, values_of([n for n in SAMPLES if n not in APART] + ["dataPackSecret"])
    ),
    "every earlier name, release from a registry": merge(
        RUNS,
        values_of(
            [n for n in SAMPLES if n not in APART and n != "aicrReleaseBaseUrl"] + ["aicrReleaseRef", "dataPackSecret"]
        ),
    ),
    "every earlier name, preinstalled aicr": merge(
        RUNS,
        values_of(
            [n for n in SAMPLES if n not in APART]
            + ["aicrBinary.path", "aicrBinary.sha256", "dataPackAuth.dockerconfigjson"]
        ),
    ),
    # null drops a chart default: Helm dropped the earlier names' defaults before the
    # regrouping, and the new names get the same nil now. Only the nulls that reached a
    # working Job: the others are NULLS_REFUSED.
    "earlier names set to null": {"deployArgs": None, "criteriaPreflight": None, "rerun": None},
}

#: Earlier names whose null the chart before the regrouping rendered as "<nil>" or 0
#: into the Job: the runtime refused each at the pod's start (exit 2), so no release
#: with one ever ran. C-20 now refuses them at render: (new name, variable, rendered).
NULLS_REFUSED: dict[str, tuple[str, str, str]] = {
    "recipeConfigMap": ("recipe.configMap", "AICR_RUNNER_RECIPE__CONFIGMAP", "<nil>"),
    "statusConfigMap": ("status.configMap", "AICR_RUNNER_STATUS_CONFIGMAP", "<nil>"),
    "aicrProvenance.mode": ("aicr.provenance.mode", "AICR_RUNNER_AICR__PROVENANCE__MODE", "<nil>"),
    "aicrDownload.attempts": ("aicr.download.attempts", "AICR_RUNNER_AICR__DOWNLOAD_ATTEMPTS", "0"),
}


def render_new(values: dict[str, Any]) -> Rendered:
    """``render`` with its base criterion (accelerator=h100, under the earlier name)
    given under the new name instead: values in the new names only."""
    return render(merge({"criteria": {"accelerator": "h100"}}, values), raw=True)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_every_renamed_value_has_a_sample() -> None:
    """A new ``legacy=`` is covered here: its earlier name gets a sample value."""
    assert sorted(item.old for item in renamed_values()) == sorted(SAMPLES)
    covered = {name for values in CASES.values() for name in SAMPLES if _has(values, name)}
    assert covered == set(SAMPLES)


def _has(values: dict[str, Any], dotted: str) -> bool:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("old", sorted(SAMPLES))
def test_an_earlier_name_renders_what_its_new_name_renders(old: str) -> None:
    [item] = [item for item in renamed_values() if item.old == old]
    base = merge(RUNS, NEEDS.get(old, {}))
    by_old = render(merge(base, nested(old, SAMPLES[old])))
    by_new = render_new(merge(base, nested(item.new, SAMPLES[old])))
    assert by_old.ok, by_old.stderr
    assert by_new.ok, by_new.stderr
    assert by_old.stdout == by_new.stdout
    # Not vacuous: the sample changes what the chart renders.
    assert by_old.stdout != render(base).stdout


@pytest.mark.parametrize("case", list(CASES))
def test_an_upgrade_with_unchanged_values_renders_what_the_chart_rendered_before(case: str) -> None:
    """The chart before the regrouping rendered these values (in the earlier names) to
    exactly these bytes: the golden holds the digests of its ``helm template`` output."""
    golden = json.loads(GOLDEN.read_text())["renders"][f"helm{helm_major()}"]
    assert sorted(golden) == sorted(CASES)
    rendered = render(CASES[case])
    assert rendered.ok, rendered.stderr
    assert rendered.job  # a real rendering, Job and all
    assert digest(rendered.stdout) == golden[case]


@pytest.mark.parametrize("old", list(NULLS_REFUSED))
def test_an_earlier_name_set_to_null_that_never_ran_is_refused_at_render(old: str) -> None:
    from aicr_runner.settings.config import load

    new, variable, rendered_before = NULLS_REFUSED[old]
    rejects_with(
        nested(old, None),
        f"{new}=null: a null removes the chart's default with the key, and this value cannot be rendered "
        f"without one. Leave {new} out to keep the default, or set the value you mean.",
    )
    with pytest.raises(ConfigError, match=variable):  # what the Job got before: refused at the pod's start
        load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100", variable: rendered_before})


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("every earlier name")])
def test_the_new_names_render_the_same_as_the_earlier_ones(case: str) -> None:
    moved: dict[str, Any] = dict(RUNS)
    for item in renamed_values():
        if _has(CASES[case], item.old):
            moved = merge(moved, nested(item.new, SAMPLES[item.old]))
    by_new = render_new(moved)
    assert by_new.ok, by_new.stderr
    assert by_new.stdout == render(CASES[case]).stdout


#: (earlier name, its value, the new name's value, the two as the message shows them)
C18 = [
    ("aicrVersion", "v1.1.0", "v1.0.0", '"v1.1.0"', '"v1.0.0"'),
    ("deployArgs", ["--retries", "1"], ["--retries", "2"], '["--retries","1"]', '["--retries","2"]'),
    ("aicrDownload.attempts", 7, 9, "7", "9"),
    ("service", "eks", "aks", '"eks"', '"aks"'),
    ("accelerator", "h200", "b200", '"h200"', '"b200"'),
    ("intent", "training", "inference", '"training"', '"inference"'),
    ("os", "rhel", "ubuntu", '"rhel"', '"ubuntu"'),
    ("platform", "dynamo", "kubeflow", '"dynamo"', '"kubeflow"'),
    ("criteriaPreflight", True, False, "true", "false"),
    ("dataPack", PACK, "registry.example/acme/other:2.0.0", f'"{PACK}"', '"registry.example/acme/other:2.0.0"'),
    ("dataPackSecret", "pull-a", "pull-b", '"pull-a"', '"pull-b"'),
    # A credential: the refusal shows neither value.
    ("dataPackAuth.dockerconfigjson", AUTH, AUTH.replace("dXNlcjp0b2tlbg", "b3RoZXI6dG9rZW4"), NOT_SHOWN, NOT_SHOWN),
    ("dataPackPlainHTTP", False, True, "false", "true"),
    ("dataPackInsecureTLS", False, True, "false", "true"),
    ("dataPackPullBudgetSeconds", 900, 1200, "900", "1200"),
    ("statusConfigMap", "status-a", "status-b", '"status-a"', '"status-b"'),
    ("logFormat", "console", "json", '"console"', '"json"'),
    ("kubeWriteBudgetSeconds", 60, 90, "60", "90"),
    ("rerun", "a", "b", '"a"', '"b"'),
]


def c18_message(old: str, new: str, old_text: str, new_text: str) -> str:
    return (
        f"{old}={old_text} and {new}={new_text} are both set: {old} is the earlier name of {new} "
        f'(docs/configuration.md "Renamed values"). Keep one: delete {old}, or set it to the same value.'
    )


@pytest.mark.parametrize("case", C18, ids=[case[0] for case in C18])
def test_c18_an_earlier_name_and_its_new_name_set_apart_fail(
    case: tuple[str, Any, Any, str, str], tmp_path: Path
) -> None:
    old, old_value, new_value, old_text, new_text = case
    [item] = [item for item in renamed_values() if item.old == old]
    values = merge(nested(old, old_value), nested(item.new, new_value))
    message = c18_message(old, item.new, old_text, new_text)
    refused = rejects_with(values, message)
    if old_text == NOT_SHOWN:  # nor anywhere else in what helm says
        assert "dXNlcjp0b2tlbg" not in refused.stderr
        assert "b3RoZXI6dG9rZW4" not in refused.stderr
    # plan --values refuses the same file in the same words.
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as caught:
        load_values_file(path)
    assert caught.value.problems == [f"--values {path}: {message}"]


@pytest.mark.parametrize("case", C18, ids=[case[0] for case in C18])
def test_an_earlier_name_and_its_new_name_may_agree(case: tuple[str, Any, Any, str, str]) -> None:
    old, value = case[0], case[2]  # the new name's value: not the chart's default
    [item] = [item for item in renamed_values() if item.old == old]
    base = NEEDS.get(old, {})
    both = render(merge(base, merge(nested(old, value), nested(item.new, value))))
    assert both.ok, both.stderr
    assert both.stdout == render_new(merge(base, nested(item.new, value))).stdout


def test_plan_values_reads_the_earlier_names_under_the_new(tmp_path: Path) -> None:
    old = CASES["every earlier name, release over HTTP"]
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(old))
    document = load_values_file(path)
    for item in renamed_values():
        if _has(old, item.old):
            assert not _has(document, item.old)
            assert _has(document, item.new)
    assert document["aicr"]["version"] == "v1.1.0"
    assert document["deploy"]["args"] == ["--retries", "1"]
    assert document["criteria"] == {
        "service": "eks",
        "accelerator": "h200",
        "intent": "training",
        "os": "ubuntu",
        "platform": "kubeflow",
        "preflight": False,
    }
    assert document["pack"]["ref"] == PACK
    assert document["pack"]["secret"] == "pack-pull"
    assert document["status"] == {"configMap": "my-status"}
    assert document["job"] == {"rerun": "2026-12-06"}


def test_the_schema_accepts_the_earlier_names_and_marks_them_deprecated() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for item in renamed_values():
        node = schema
        for part in item.old.split("."):
            node = node["properties"][part]
        assert node["description"].startswith(f"Deprecated: the earlier name of {item.new} "), item.old
