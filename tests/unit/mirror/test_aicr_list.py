"""aicr 1.x's ``aicr mirror list`` (the fake, contract §13) compared with our list;
an aicr without the command (0.11) is not asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicr_runner.mirror.aicr_list import differences
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.settings.config import load
from tests.fake_aicr import install_fake_aicr

RECIPE = """\
kind: RecipeResult
apiVersion: aicr.run/v1beta1
componentRefs:
  - {name: kai-scheduler, chart: kai-scheduler, source: oci://ghcr.io/nvidia/kai-scheduler, version: v0.13.0}
  - {name: cert-manager, chart: cert-manager, source: https://charts.jetstack.io, version: v1.17.2}
"""

OURS = [
    Item(Kind.IMAGE, "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04", ("gpu-operator (ClusterPolicy spec.driver)",)),
    Item(Kind.IMAGE, "quay.io/jetstack/cert-manager-controller:v1.17.2", ("cert-manager (Deployment)",)),
    Item(
        Kind.CHART,
        "oci://ghcr.io/nvidia/kai-scheduler/kai-scheduler:v0.13.0",
        ("kai-scheduler (deploy.sh)",),
        chart_name="kai-scheduler",
        version="v0.13.0",
    ),
]


def _settings(tmp_path: Path, binary: Path) -> object:
    work = tmp_path / "work"
    work.mkdir()
    (work / "recipe.yaml").write_text(RECIPE)
    env = {"AICR_RUNNER_AICR__BINARY": str(binary), "AICR_RUNNER_WORK_DIR": str(work)}
    return load({**env, "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"})


def test_every_difference_from_aicrs_own_list_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = install_fake_aicr(tmp_path / "bin")
    # aicr's list lacks the node-OS driver tag and adds an image ours has not.
    monkeypatch.setenv(
        "FAKE_AICR_MIRROR_IMAGES", "nvcr.io/nvidia/driver:580.105.08,quay.io/jetstack/cert-manager-controller:v1.17.2"
    )
    lines = differences(_settings(tmp_path, binary), OURS)  # type: ignore[arg-type]
    assert lines == [
        "aicr mirror list names image nvcr.io/nvidia/driver:580.105.08; our list does not",
        "our list names image nvcr.io/nvidia/driver:580.105.08-ubuntu24.04 "
        "(gpu-operator (ClusterPolicy spec.driver)); aicr mirror list does not",
        "aicr mirror list names chart cert-manager v1.17.2; our list does not",
    ]


def test_an_aicr_without_mirror_list_is_not_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = install_fake_aicr(tmp_path / "bin")
    monkeypatch.setenv("FAKE_AICR_VERSION", "0.11.1")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_AICR_ENV_LOG", str(log))
    assert differences(_settings(tmp_path, binary), OURS) == []  # type: ignore[arg-type]
    # Only --help was run: no 'mirror' call reached the binary.
    assert [json.loads(line)["argv"] for line in log.read_text().splitlines()] == [["--help"]]
