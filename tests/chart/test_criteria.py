"""Fail fast on criteria: the render-time catalog check agrees with aicr.

The chart's catalog (chart/files/criteria-catalog.json) must be what
scripts/gen-catalog.py produces from the aicr the chart pins; here that is the
contract-faithful fake in tests/fake_aicr. For a spread of criteria, the chart
must accept exactly what `aicr recipe` accepts, and name the same problem.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import CHART, ROOT, load_script, rejects_with, render, renders
from tests.fake_aicr import install_fake_aicr

DIMENSIONS = ("service", "accelerator", "intent", "os", "platform")
TAIL = (
    ". State a supported combination (`aicr recipe list` lists them; chart files/criteria-catalog.json holds "
    "the same, written from aicr v1.2.0's documented contract, not generated from a v1.2.0 binary (none was "
    "available; scripts/gen-catalog.py ran on the contract-faithful fake aicr)), set pack.ref if your pack "
    "provides this combination, or set criteria.preflight=false if aicr v1.2.0 accepts it."
)
TRAINING_CARRIERS = (
    "(service=aks), (service=bcm), (service=cks, os=ubuntu), (service=eks), (service=generic, "
    "accelerator=gb300, os=ubuntu), (service=gke, os=cos), (service=k0s, os=ubuntu), (service=kind), "
    "(service=lke), (service=metal3, accelerator=gb200, os=ubuntu), (service=ocp), (service=oke, os=ol), "
    "(service=rke2)"
)


gen_catalog = load_script("gen-catalog")


@pytest.fixture(scope="module")
def aicr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-aicr"))


def catalog() -> dict[str, Any]:
    return json.loads((CHART / "files" / "criteria-catalog.json").read_text())  # type: ignore[no-any-return]


# -- the catalog file ----------------------------------------------------------------------------------


def test_catalog_shape() -> None:
    doc = catalog()
    assert doc["aicrVersion"] == "v1.2.0"
    # Provenance: hand-made from the v1.2.0 contract today, generated from the real binary later.
    assert "v1.2.0" in doc["source"]
    entries = doc["entries"]
    assert len(entries) > 50
    names = [entry["name"] for entry in entries]
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for entry in entries:
        assert list(entry) == ["name", *DIMENSIONS, "leaf"], entry
        assert all(isinstance(entry[d], str) and entry[d] for d in DIMENSIONS), entry
        assert isinstance(entry["leaf"], bool)
    assert any(entry["leaf"] for entry in entries)
    assert not all(entry["leaf"] for entry in entries)
    # The file is in the generator's format (one overlay per line).
    assert (CHART / "files" / "criteria-catalog.json").read_text() == gen_catalog.dump_catalog(doc)


def test_catalog_pins_the_same_aicr_as_the_chart() -> None:
    import yaml

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert catalog()["aicrVersion"] == values["aicr"]["version"] == chart["annotations"]["aicr.run/aicr-version"]


def test_catalog_is_what_gen_catalog_produces_from_aicr(aicr: Path, tmp_path: Path) -> None:
    """Stale check: regenerate from the pinned aicr (the fake here) and compare."""
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            str(ROOT / "scripts" / "gen-catalog.py"),
            "--aicr",
            str(aicr),
            "--check",
            "--output",
            str(CHART / "files" / "criteria-catalog.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # --check really compares: a catalog with one overlay missing is stale.
    stale = catalog()
    stale["entries"] = stale["entries"][1:]
    (tmp_path / "stale.json").write_text(gen_catalog.dump_catalog(stale))
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            str(ROOT / "scripts" / "gen-catalog.py"),
            "--aicr",
            str(aicr),
            "--check",
            "--output",
            str(tmp_path / "stale.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "is stale" in proc.stderr
    assert "+ {" in proc.stderr


def test_gen_catalog_reads_recipe_list_json() -> None:
    payload = [
        {
            "name": "eks",
            "criteria": {
                "Service": "eks",
                "Accelerator": "any",
                "Intent": "",
                "OS": "any",
                "Platform": "any",
            },
            "is_leaf": False,
            "source": "embedded",
        },
        {"name": "acme", "criteria": {"Service": "acme"}, "is_leaf": True, "source": "external"},
        {
            "name": "h100-eks-training",
            "criteria": {
                "Service": "eks",
                "Accelerator": "h100",
                "Intent": "training",
                "OS": "any",
                "Platform": "any",
            },
            "is_leaf": True,
            "source": "embedded",
            "health": {"status": "pass"},
        },
    ]
    assert gen_catalog.entries_from_recipe_list(payload) == [
        {
            "name": "eks",
            "service": "eks",
            "accelerator": "any",
            "intent": "any",
            "os": "any",
            "platform": "any",
            "leaf": False,
        },
        {
            "name": "h100-eks-training",
            "service": "eks",
            "accelerator": "h100",
            "intent": "training",
            "os": "any",
            "platform": "any",
            "leaf": True,
        },
    ]
    assert gen_catalog.parse_version("aicr version 1.2.0 (commit: abc, date: x)") == "v1.2.0"


# -- the chart agrees with aicr ---------------------------------------------------------------------------

COMBINATIONS: list[dict[str, str]] = [
    {"accelerator": "a100"},
    {"accelerator": "h100", "service": "eks"},
    {"accelerator": "h100", "service": "eks", "intent": "training"},
    {"accelerator": "h100", "service": "eks", "intent": "training", "os": "ubuntu"},
    {"accelerator": "h100", "service": "eks", "intent": "training", "os": "ubuntu", "platform": "kubeflow"},
    {"accelerator": "h100", "service": "eks", "intent": "training", "os": "ubuntu", "platform": "dynamo"},
    {"accelerator": "h100", "service": "eks", "intent": "inference", "os": "amazonlinux"},
    {"accelerator": "l40", "service": "eks"},
    {"accelerator": "h100", "service": "k0s"},
    {"accelerator": "h200", "service": "k0s", "intent": "training"},
    {"accelerator": "h200", "service": "k0s", "intent": "training", "os": "ubuntu"},
    {"accelerator": "h200", "service": "k0s", "intent": "inference", "os": "ubuntu"},
    {"service": "gke", "intent": "training"},
    {"service": "gke", "intent": "training", "os": "cos"},
    {"service": "gke", "intent": "training", "os": "ubuntu"},
    {"service": "oke", "intent": "inference", "os": "ol"},
    {"service": "oke", "intent": "inference"},
    {"service": "cks", "intent": "training"},
    {"service": "bcm", "intent": "inference"},
    {"accelerator": "h100", "service": "metal3"},
    {"accelerator": "gb200", "service": "metal3", "intent": "training", "os": "ubuntu"},
    {"accelerator": "h100", "service": "generic"},
    {"accelerator": "vr200"},
    {"accelerator": "vr200", "service": "rke2", "intent": "training", "os": "ubuntu"},
    {"accelerator": "h100", "platform": "runai"},
    {"accelerator": "h100", "os": "talos"},
    {"accelerator": "h100", "os": "ubuntu"},
    {"accelerator": "b300", "service": "lke", "intent": "inference"},
]


def _aicr_recipe(aicr: Path, criteria: dict[str, str], tmp_path: Path) -> tuple[int, str]:
    argv = [str(aicr), "recipe", "-o", str(tmp_path / "recipe.yaml")]
    for dim in DIMENSIONS:
        if dim in criteria:
            argv += [f"--{dim}", criteria[dim]]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    message = ""
    for line in proc.stderr.splitlines():
        if "command failed" in line and "[INVALID_REQUEST] " in line:
            message = line.split("[INVALID_REQUEST] ", 1)[1].rsplit(" exitCode=", 1)[0]
    return proc.returncode, message


@pytest.mark.parametrize("criteria", COMBINATIONS, ids=lambda c: "+".join(c.values()))
def test_the_chart_accepts_exactly_what_aicr_accepts(aicr: Path, tmp_path: Path, criteria: dict[str, str]) -> None:
    code, message = _aicr_recipe(aicr, criteria, tmp_path)
    result = render(criteria, raw=True)
    if code == 0:
        assert result.ok, f"aicr accepts {criteria} but the chart refuses it:\n{result.stderr}"
        return
    assert code == 2, f"aicr exited {code}, expected 0 or 2"
    assert message, "aicr refused without an INVALID_REQUEST message"
    assert not result.ok, f"aicr refuses {criteria} ({message}) but the chart renders it"
    assert result.error, result.stderr
    if message.startswith("invalid "):
        # A value aicr does not know at all: the chart says no recipe provides it.
        dim, value = message.removeprefix("invalid ").split(" type: ")
        assert f"no recipe provides {dim} '{value}' (values with a recipe: " in result.error
    else:
        # aicr stops at the first dimension it cannot carry; the chart names it the same way.
        assert message in result.error, f"\naicr:  {message}\nchart: {result.error}"


# -- exact messages per rejected class ----------------------------------------------------------------


def test_rejects_a_value_no_recipe_provides() -> None:
    rejects_with(
        {"service": "acme", "accelerator": "h100"},
        "criteria (service=acme, accelerator=h100) are not supported by aicr v1.2.0: no recipe provides "
        "service 'acme' (values with a recipe: aks, bcm, cks, eks, generic, gke, k0s, kind, lke, metal3, "
        "ocp, oke, rke2)" + TAIL,
        raw=True,
    )


def test_rejects_a_service_without_a_recipe_for_the_accelerator() -> None:
    rejects_with(
        {"service": "metal3", "accelerator": "h100"},
        "criteria (service=metal3, accelerator=h100) are not supported by aicr v1.2.0: no recipe provides "
        "service 'metal3' with accelerator=h100; supported combinations: (accelerator=gb200, "
        "intent=training, os=ubuntu)" + TAIL,
        raw=True,
    )


def test_rejects_an_intent_that_needs_an_os() -> None:
    rejects_with(
        {"service": "k0s", "accelerator": "h200", "intent": "training"},
        "criteria (service=k0s, accelerator=h200, intent=training) are not supported by aicr v1.2.0: intent "
        f"'training' requires additional criteria; supported combinations: {TRAINING_CARRIERS}" + TAIL,
        raw=True,
    )


def test_rejects_an_os_the_service_does_not_declare() -> None:
    rejects_with(
        {"service": "gke", "intent": "training", "os": "ubuntu"},
        f"criteria (service=gke, intent=training, os=ubuntu) are not supported by aicr v1.2.0: no recipe "
        f"provides service 'gke' with intent=training, os=ubuntu; supported combinations: (os=cos); no "
        f"recipe provides intent 'training' with service=gke, os=ubuntu; supported combinations: "
        f"{TRAINING_CARRIERS}; no recipe provides os 'ubuntu' with service=gke, intent=training; supported "
        f"combinations: (service=aks), (service=bcm), (service=cks), (service=eks), (service=generic, "
        f"accelerator=gb300, intent=training), (service=k0s), (service=kind), (service=lke), "
        f"(service=metal3, accelerator=gb200, intent=training), (service=rke2)" + TAIL,
        raw=True,
    )


def test_rejects_a_platform_the_combination_does_not_have() -> None:
    rejects_with(
        {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu", "platform": "dynamo"},
        "criteria (service=eks, accelerator=h100, intent=training, os=ubuntu, platform=dynamo) are not "
        "supported by aicr v1.2.0: no recipe provides platform 'dynamo' with service=eks, accelerator=h100, "
        "intent=training, os=ubuntu; supported combinations: (service=eks, intent=inference, os=ubuntu), "
        "(service=gke, intent=inference, os=cos)" + TAIL,
    )


def test_rejects_an_accelerator_that_needs_a_service() -> None:
    rejects_with(
        {"accelerator": "vr200"},
        "criteria (accelerator=vr200) are not supported by aicr v1.2.0: accelerator 'vr200' requires "
        "additional criteria; supported combinations: (service=rke2, intent=training, os=ubuntu)" + TAIL,
    )


# -- when the check steps aside ---------------------------------------------------------------------

UNSUPPORTED = {"service": "acme", "accelerator": "h100", "intent": "training"}


def test_a_data_pack_skips_the_catalog_check() -> None:
    assert not render(UNSUPPORTED).ok
    result = renders({**UNSUPPORTED, "dataPack": "ghcr.io/acme/aicr-pack:1.0.0"})
    assert result.env["AICR_RUNNER_CRITERIA__SERVICE"] == "acme"


def test_criteria_preflight_false_skips_the_catalog_check() -> None:
    renders({**UNSUPPORTED, "criteriaPreflight": False})


def test_another_aicr_version_skips_the_catalog_check() -> None:
    renders({**UNSUPPORTED, "aicrVersion": "v1.3.0"})
    assert not render({**UNSUPPORTED, "aicrVersion": "1.2.0"}).ok, "the leading v is optional"


def test_a_preinstalled_aicr_skips_the_catalog_check_as_plan_aicr_binary_does() -> None:
    """A preinstalled aicr may be any version: aicr v0.11.1 resolves kind + h100 +
    inference + dynamo fully (h100-kind-inference-dynamo), the v1.2.0 catalog has no
    such recipe. The runtime asks the binary and lists what it supports."""
    kind_dynamo = {"service": "kind", "accelerator": "h100", "intent": "inference", "platform": "dynamo"}
    assert not render(kind_dynamo).ok, "the v1.2.0 catalog refuses it"
    result = renders({**kind_dynamo, "aicrBinary": {"path": "/usr/local/bin/aicr"}})
    assert result.env["AICR_RUNNER_CRITERIA__PLATFORM"] == "dynamo"
    assert result.env["AICR_RUNNER_AICR__BINARY"] == "/usr/local/bin/aicr"
    renders({**UNSUPPORTED, "aicrBinary": {"path": "/usr/local/bin/aicr"}})


def test_the_check_is_one_named_helper_reading_the_catalog() -> None:
    templates = {path.name: path.read_text() for path in (CHART / "templates").iterdir()}
    definers = [name for name, text in templates.items() if '{{- define "nvidia-aicr.criteriaSupported"' in text]
    readers = [
        name for name, text in templates.items() if "files/criteria-catalog.json" in text and "Files.Get" in text
    ]
    assert definers == readers == ["_criteria.tpl"]
