"""With ``mirror.registry`` set, the real aicr v0.11.1's deploy.sh names only the
mirror for every chart, and ``aicr verify`` still passes (recipe
eks/h100/training/ubuntu: 11 charts; a data pack's registry.yaml redirects 2).

Runs ``aicr-runner plan`` with the real binary (tests/support/real_aicr.py): the
rewrite sits between ``aicr recipe`` and ``aicr bundle``, and the original sources
and the mapping are captured with the recipe.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from aicr_runner.cli import main
from tests.support.real_aicr import RealAicr

CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
MIRROR = "mirror.example:5000/air"


def _plan(tmp_path: Path, binary: Path, **extra: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBERNETES_"))}
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "AICR_RUNNER_WORK_DIR": str(tmp_path / "work"),
            "AICR_RUNNER_LOG_FORMAT": "json",
            "AICR_RUNNER_AICR__PROVENANCE__MODE": "off",  # no NVIDIA attestation in this release
            **{f"AICR_RUNNER_CRITERIA__{k.upper()}": v for k, v in CRITERIA.items()},
            **extra,
        }
    )
    return main(["plan", "--aicr-binary", str(binary), "--output", str(tmp_path / "plan")], environ=env)


def _installs(deploy_sh: Path) -> dict[str, tuple[str, str | None]]:
    """Each ``helm upgrade --install NAME CHART [--repo URL]`` of deploy.sh: name -> (chart, repo)."""
    text = deploy_sh.read_text().replace("\\\n", " ")
    installs: dict[str, tuple[str, str | None]] = {}
    for line in text.splitlines():
        if "helm upgrade --install" not in line:
            continue
        words = shlex.split(line.split("helm upgrade --install", 1)[1])
        repo = words[words.index("--repo") + 1] if "--repo" in words else None
        installs[words[0]] = (words[1], repo)
    return installs


def _report_step(plan: Path, state: str) -> dict[str, object]:
    report = json.loads((plan / "aicr-run-status" / "report.json").read_text())
    return dict(next(s for s in report["steps"] if s["state"] == state))


def test_every_chart_comes_from_the_mirror_and_verify_passes(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _plan(tmp_path, real_aicr.binary, AICR_RUNNER_MIRROR__REGISTRY=MIRROR) == 0, capsys.readouterr().err
    installs = _installs(tmp_path / "work" / "bundle" / "deploy.sh")
    assert len(installs) == 11
    for name, (chart, repo) in installs.items():
        assert repo is None, f"{name}: deploy.sh still passes --repo {repo}"
        assert chart.startswith(f"oci://{MIRROR}/"), f"{name}: {chart}"
    assert installs["gpu-operator"][0] == f"oci://{MIRROR}/helm.ngc.nvidia.com/nvidia/gpu-operator"
    assert installs["kai-scheduler"][0] == f"oci://{MIRROR}/ghcr.io/nvidia/kai-scheduler/kai-scheduler"
    assert _report_step(tmp_path / "plan", "verify")["status"] == "succeeded"
    assert "11 of 11 chart sources rewritten" in str(_report_step(tmp_path / "plan", "recipe")["message"])
    # The captured recipe names the mirror; the mapping beside it keeps the upstream sources.
    captured = tmp_path / "plan" / "aicr-recipe"
    mapping = json.loads((captured / "mirror-sources.json").read_text())
    upstream = {m["component"]: m["source"] for m in mapping["components"]}
    assert upstream["cert-manager"] == "https://charts.jetstack.io"
    assert upstream["nvsentinel"] == "oci://ghcr.io/nvidia"
    sources = {r["name"]: r["source"] for r in yaml.safe_load((captured / "recipe.yaml").read_text())["componentRefs"]}
    assert sources["cert-manager"] == f"oci://{MIRROR}/charts.jetstack.io"


def test_a_chart_repository_takes_the_repository_charts_and_leaves_oci_ones(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _plan(tmp_path, real_aicr.binary, AICR_RUNNER_MIRROR__CHART_REPOSITORY="https://charts.mirror.example")
    assert code == 0, capsys.readouterr().err
    installs = _installs(tmp_path / "work" / "bundle" / "deploy.sh")
    oci = {name for name, (chart, _) in installs.items() if chart.startswith("oci://")}
    assert oci == {"kai-scheduler", "nvsentinel"}
    assert {repo for name, (_, repo) in installs.items() if name not in oci} == {"https://charts.mirror.example"}


def test_without_a_mirror_the_recipe_keeps_its_sources(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _plan(tmp_path, real_aicr.binary) == 0, capsys.readouterr().err
    installs = _installs(tmp_path / "work" / "bundle" / "deploy.sh")
    assert installs["cert-manager"] == ("cert-manager", "https://charts.jetstack.io")
    assert not (tmp_path / "plan" / "aicr-recipe" / "mirror-sources.json").exists()
    assert not re.search(r"rewritten", str(_report_step(tmp_path / "plan", "recipe")["message"]))
