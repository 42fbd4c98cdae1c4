"""The list names this project's chart at the version it ships with."""

from __future__ import annotations

from pathlib import Path

import yaml

from aicr_runner.mirror.collect import RUNNER_CHART_VERSION
from aicr_runner.mirror.command import runner_image

ROOT = Path(__file__).resolve().parents[3]


def test_the_listed_chart_version_is_the_charts_own() -> None:
    chart = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())
    assert chart["version"] == RUNNER_CHART_VERSION


def test_the_runner_image_is_what_the_chart_renders_from_the_values() -> None:
    chart = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())
    assert runner_image({}) == f"ghcr.io/nvidia-aicr/aicr-runner:{chart['appVersion']}"
    assert runner_image({"global": {"imageRegistry": "m.example:5000/ghcr"}, "image": {"tag": "1"}}) == (
        "m.example:5000/ghcr/nvidia-aicr/aicr-runner:1"
    )
    digest = "sha256:" + "b" * 64
    assert runner_image({"image": {"repository": "r.example/x", "digest": digest}}) == f"r.example/x@{digest}"
