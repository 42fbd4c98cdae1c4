"""FAKE_AICR_VERSION=0.11.1: the stand-in behaves as the contract says 0.11.1 does
(flags it lacks, no `evidence`, verify not closed-world, deploy.sh's 0.11 markers),
and the runner's deploy tally reads those markers for what they are."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.aicr.classify import DeployMarkers
from tests.fake_aicr import install_fake_aicr

LEGACY = {"FAKE_AICR_VERSION": "0.11.1"}
LEAF = ["--service", "eks", "--accelerator", "h100", "--intent", "training", "--os", "ubuntu"]


@pytest.fixture(scope="module")
def aicr_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("bin"))


def call(aicr: Path, cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_AICR_", "AICR_"))}
    full_env.update(env or {})
    return subprocess.run(
        [str(aicr), *args], capture_output=True, text=True, env=full_env, cwd=cwd, check=False, timeout=60
    )


def bundle(aicr: Path, tmp_path: Path, env: Mapping[str, str]) -> Path:
    assert call(aicr, tmp_path, "recipe", *LEAF, "--output", "r.yaml", env=env).returncode == 0
    result = call(aicr, tmp_path, "bundle", "--recipe", "r.yaml", "--output", "b", env=env)
    assert result.returncode == 0, result.stderr
    return tmp_path / "b"


def test_version_says_0_11(aicr_path: Path, tmp_path: Path) -> None:
    assert call(aicr_path, tmp_path, "--version", env=LEGACY).stdout.startswith("aicr version 0.11.1 (commit: ")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["bundle", "--recipe", "r.yaml", "--storage-class", "gp3"], "-storage-class"),
        (["validate", "--recipe", "r.yaml", "--emit-attestation", "ev"], "-emit-attestation"),
    ],
)
def test_flags_0_11_lacks_are_usage_errors(aicr_path: Path, tmp_path: Path, args: list[str], flag: str) -> None:
    result = call(aicr_path, tmp_path, *args, env=LEGACY)
    assert result.returncode == 1
    assert f"flag provided but not defined: {flag}" in result.stderr
    assert call(aicr_path, tmp_path, *args).stderr.count("not defined") == 0, "1.x has the flag"


def test_evidence_is_no_command_in_0_11(aicr_path: Path, tmp_path: Path) -> None:
    result = call(aicr_path, tmp_path, "evidence", "publish", "ev", env=LEGACY)
    assert result.returncode == 3
    assert "No help topic for 'evidence'" in result.stderr


@pytest.mark.parametrize(("env", "code"), [(LEGACY, 0), ({}, 4)])
def test_only_1x_verify_is_closed_world(aicr_path: Path, tmp_path: Path, env: Mapping[str, str], code: int) -> None:
    out = bundle(aicr_path, tmp_path, env)
    (out / "added-later.yaml").write_text("kind: Surprise\n")
    assert call(aicr_path, tmp_path, "verify", str(out), env=env).returncode == code


def test_0_11_deploy_sh_prints_no_success_lines_and_success_is_inferred(aicr_path: Path, tmp_path: Path) -> None:
    out = bundle(aicr_path, tmp_path, LEGACY)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAKE_AICR_")}, **LEGACY}
    result = subprocess.run(
        ["bash", str(out / "deploy.sh"), "--best-effort", "--no-wait"],
        capture_output=True,
        text=True,
        env={**env, "FAKE_AICR_DEPLOY_FAIL": "nfd"},
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "Installing gpu-operator (gpu-operator)..." in lines
    assert "WARNING: nfd install failed, continuing (--best-effort)" in lines
    assert "WARNING: the following components failed: nfd" in lines
    assert not any("└─" in line or "┌─" in line for line in lines)
    assert "ERROR: nfd helm install failed after 6 attempts" in lines  # the real 0.11.1 wording
    assert "Deployment complete." in lines
    markers = DeployMarkers()
    for line in lines:
        markers.feed(line)
    assert markers.failure_report
    # A component counts as installed once the next one starts, the last at "Deployment complete.".
    assert markers.counts() == "14/15 installed, 1 failed (nfd)"


def test_no_markers_at_all_is_not_0_of_0() -> None:
    markers = DeployMarkers()
    markers.feed("Deployment complete.")
    assert markers.counts() == "no component started"


def ctrf_after(aicr: Path, tmp_path: Path, outcome: str, env: Mapping[str, str]) -> tuple[int, dict[str, Any], str]:
    assert call(aicr, tmp_path, "recipe", *LEAF, "--output", "r.yaml", env=env).returncode == 0
    (tmp_path / "c.json").unlink(missing_ok=True)
    result = call(
        aicr, tmp_path, "--log-json", "validate", "--recipe", "r.yaml", "--phase", "deployment", "-o", "c.json",
        env={**env, "FAKE_AICR_VALIDATE_RESULT": outcome},
    )  # fmt: skip
    report = json.loads((tmp_path / "c.json").read_text())
    return result.returncode, report["results"], result.stderr


@pytest.mark.parametrize(("env", "code"), [(LEGACY, 0), ({}, 8)], ids=["0.11", "1.x"])
def test_a_crashed_check_exits_0_only_in_0_11(
    aicr_path: Path, tmp_path: Path, env: Mapping[str, str], code: int
) -> None:
    exit_code, results, _ = ctrf_after(aicr_path, tmp_path, "other", env)
    assert exit_code == code
    assert results["summary"]["other"] == 1


@pytest.mark.parametrize(("env", "phase"), [(LEGACY, "passed"), ({}, "skipped")], ids=["0.11", "1.x"])
def test_every_check_skipped_exits_0_and_0_11_calls_the_phase_passed(
    aicr_path: Path, tmp_path: Path, env: Mapping[str, str], phase: str
) -> None:
    exit_code, results, stderr = ctrf_after(aicr_path, tmp_path, "skip", env)
    assert exit_code == 0
    assert results["summary"]["skipped"] == results["summary"]["tests"] == 4
    assert {t["message"] for t in results["tests"]} == {"no GPU nodes found in the cluster"}
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert [(r["phase"], r["status"]) for r in records if r["msg"] == "phase result"] == [("deployment", phase)]
