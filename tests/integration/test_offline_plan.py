"""`aicr-runner plan` without a network: criteria refused before any download,
and a failed download that says how to plan offline."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicr_runner.cli import main
from tests.integration.test_runs import clean_env
from tests.support.hostile_server import ReleaseServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReleaseServer]:
    with ReleaseServer(tmp_path / "releases") as srv:
        yield srv


@pytest.mark.parametrize(
    ("criteria", "problem"),
    [
        (["--accelerator", "sparc"], "no recipe provides accelerator 'sparc' (values with a recipe: a100, b200"),
        (
            ["--service", "gke", "--accelerator", "h100", "--os", "ubuntu"],
            "no recipe provides service 'gke' with accelerator=h100, os=ubuntu; supported combinations: (os=cos)",
        ),
    ],
)
def test_plan_refuses_unsupported_criteria_before_any_download(
    server: ReleaseServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    criteria: list[str],
    problem: str,
) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=server.url)
    for name in ("SERVICE", "ACCELERATOR", "INTENT", "OS"):
        env.pop(f"AICR_RUNNER_CRITERIA__{name}")
    code = main(["plan", *criteria, "--output", str(tmp_path / "plan")], environ=env)
    err = capsys.readouterr().err
    assert code == 2
    assert server.requests == [], "nothing was downloaded"
    assert err.startswith("aicr-runner: criteria (")
    assert "are not supported by aicr v1.2.0: " in err
    assert problem in err
    assert not (tmp_path / "work").exists(), "refused before the run started"


def test_a_failed_download_in_plan_says_how_to_plan_offline(
    server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=server.url)  # serves nothing: 404
    code = main(["plan", "--output", str(tmp_path / "plan")], environ=env)
    err = capsys.readouterr().err
    assert code == 20
    assert "HTTP 404" in err
    assert "--aicr-binary PATH" in err
    assert "AICR_RUNNER_AICR__RELEASE_BASE_URL" in err


def test_the_offline_demo_says_it_runs_the_stand_in(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_"))}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dry-run.sh")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "offline demo: this runs the test suite's stand-in aicr (tests/fake_aicr), not NVIDIA's aicr" in result.stderr
    )
    assert "commit: test-stand-in" in result.stderr, "the detected version line names the stand-in"
    assert "AICR plan complete" in result.stderr + result.stdout
