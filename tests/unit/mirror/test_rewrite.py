"""The recipe's chart sources mapped to the mirror (one mapping, shared with the copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aicr_runner.mirror.rewrite import SOURCES_FILE, UPSTREAM_RECIPE, apply, mirrored_source


@pytest.mark.parametrize(
    ("source", "chart_repository", "mirrored"),
    [
        ("oci://ghcr.io/nvidia/kai-scheduler", "", "oci://m.example:5000/air/ghcr.io/nvidia/kai-scheduler"),
        ("https://helm.ngc.nvidia.com/nvidia", "", "oci://m.example:5000/air/helm.ngc.nvidia.com/nvidia"),
        ("https://charts.jetstack.io/", "", "oci://m.example:5000/air/charts.jetstack.io"),
        ("https://charts.jetstack.io", "https://charts.m.example", "https://charts.m.example"),
        ("oci://ghcr.io/nvidia", "https://charts.m.example", "oci://m.example:5000/air/ghcr.io/nvidia"),
    ],
)
def test_each_source_has_one_place_in_the_mirror(source: str, chart_repository: str, mirrored: str) -> None:
    assert mirrored_source(source, "m.example:5000/air/", chart_repository) == mirrored


def test_a_chart_repository_alone_leaves_oci_sources_as_they_are() -> None:
    assert mirrored_source("oci://ghcr.io/nvidia", "", "https://charts.m.example") == "oci://ghcr.io/nvidia"


RECIPE = """\
kind: RecipeResult
apiVersion: aicr.nvidia.com/v1alpha1
componentRefs:
  - {name: cert-manager, chart: cert-manager, source: https://charts.jetstack.io, version: v1.17.2, namespace: cm}
  - {name: skyhook-customizations, namespace: skyhook, source: "", manifestFiles: [a.yaml]}
deploymentOrder: [cert-manager, skyhook-customizations]
"""


def test_the_recipe_is_rewritten_in_place_and_the_upstream_one_and_the_mapping_kept(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    note = apply(recipe, "m.example/air", "")
    assert note == "; 1 of 1 chart sources rewritten to the mirror m.example/air"
    doc = yaml.safe_load(recipe.read_text())
    assert [r["source"] for r in doc["componentRefs"]] == ["oci://m.example/air/charts.jetstack.io", ""]
    assert doc["deploymentOrder"] == ["cert-manager", "skyhook-customizations"]
    assert (tmp_path / UPSTREAM_RECIPE).read_text() == RECIPE
    record = json.loads((tmp_path / SOURCES_FILE).read_text())
    assert record["components"] == [
        {
            "component": "cert-manager",
            "chart": "cert-manager",
            "version": "v1.17.2",
            "source": "https://charts.jetstack.io",
            "mirrored": "oci://m.example/air/charts.jetstack.io",
        }
    ]


def test_no_mirror_leaves_the_recipe_and_no_stale_mapping(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    (tmp_path / SOURCES_FILE).write_text("{}")  # a previous run's, in a reused work directory
    assert apply(recipe, "", "") == ""
    assert recipe.read_text() == RECIPE
    assert not (tmp_path / SOURCES_FILE).exists()
