"""Snapshots with the fake aicr: an install and a re-validation, each taking one.

The install snapshots before deploy and passes the snapshot to validate; a
re-validation of the same release (the same results directory: its
``aicr-cluster-snapshot``) snapshots again and reports what changed in the
cluster. A failed snapshot never fails the run: validate then takes its own.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env

ON = {**VALIDATE, "AICR_RUNNER_SNAPSHOT__ENABLED": "true"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


def go(fake: Path, tmp: Path, argv: list[str], **extra: str) -> tuple[int, dict[str, Any], list[list[str]]]:
    calls = tmp / "calls.jsonl"
    calls.unlink(missing_ok=True)
    env = clean_env(tmp, **{**ON, "FAKE_AICR_ENV_LOG": str(calls), **extra})
    code = main([*argv, "--aicr-binary", str(fake), "--results-dir", str(tmp / "results")], environ=env)
    report = json.loads((tmp / "results" / "aicr-run-status" / "report.json").read_text())
    invoked = [json.loads(line)["argv"] for line in calls.read_text().splitlines()]
    return code, report, invoked


def subcommand(argv: list[str]) -> str:
    return next((a for a in argv[1:] if not a.startswith("-")), "--version")


def step(report: dict[str, Any], state: str) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["state"] == state)


def evidence_files(tmp: Path) -> dict[str, bytes]:
    """The runner's evidence archive (``aicr-evidence-bundle``'s ``evidence.tgz``, the
    directory ``evidence/``): path in the directory -> bytes."""
    archive = (tmp / "results" / "aicr-evidence-bundle" / "evidence.tgz").read_bytes()
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                files[member.name.removeprefix("evidence/")] = extracted.read()
    return files


def test_an_install_snapshots_before_deploy_and_a_revalidation_reports_what_changed(fake: Path, tmp_path: Path) -> None:
    code, report, invoked = go(fake, tmp_path, ["run"])
    assert code == 0, report["message"]
    states = [s["state"] for s in report["steps"]]
    assert states.index("lease") < states.index("snapshot") < states.index("deploy")
    snap = step(report, "snapshot")
    assert snap["status"] == "succeeded", snap
    assert "8x NVIDIA H100 80GB HBM3 (driver 560.35.03)" in snap["message"]
    assert "the first snapshot kept: nothing to compare" in snap["message"]
    commands = [subcommand(argv) for argv in invoked]
    assert commands.index("snapshot") < commands.index("validate")
    snapshot_file = str(tmp_path / "work" / "snapshot.yaml")
    validate = invoked[commands.index("validate")]
    assert validate[validate.index("--snapshot") + 1] == snapshot_file
    kept = tmp_path / "results" / "aicr-cluster-snapshot"
    assert json.loads((kept / "facts.json").read_text())["facts"]["GPU driver"] == "560.35.03"
    assert (kept / "snapshot.yaml").read_text().startswith("kind: Snapshot")
    assert report["clusterChanges"] == []
    # The snapshot validate was given is kept with the evidence, beside aicr's summary bundle.
    files = evidence_files(tmp_path)
    assert files["snapshot.yaml"] == (kept / "snapshot.yaml").read_bytes()
    assert any(name.startswith("summary-bundle/") for name in files), sorted(files)
    assert step(report, "capture-evidence")["status"] == "succeeded"

    # The driver and Kubernetes were upgraded; a node was added.
    recipe = tmp_path / "results" / "aicr-recipe" / "recipe.yaml"
    changed = json.dumps(
        {"GPU.smi.driver": "570.86.15", "K8s.server.version": "v1.34.1", "NodeTopology.summary.node-count": 4}
    )
    code, report, invoked = go(fake, tmp_path, ["validate", "--recipe", str(recipe)], FAKE_AICR_SNAPSHOT_FACTS=changed)
    assert code == 0, report["message"]
    assert [subcommand(argv) for argv in invoked] == ["--version", "snapshot", "validate"]
    assert report["clusterChanges"] == [
        "Kubernetes version: v1.33.5 -> v1.34.1",
        "GPU driver: 560.35.03 -> 570.86.15",
        "node count: 3 -> 4",
    ]
    assert "cluster changed since" in step(report, "snapshot")["message"]
    summary = (tmp_path / "results" / "aicr-run-status" / "summary.txt").read_text()
    assert "cluster changed since " in summary
    assert "- GPU driver: 560.35.03 -> 570.86.15" in summary
    assert json.loads((kept / "facts.json").read_text())["facts"]["GPU driver"] == "570.86.15"


def test_a_failed_snapshot_never_fails_the_install_and_validate_takes_its_own(fake: Path, tmp_path: Path) -> None:
    code, report, invoked = go(fake, tmp_path, ["run"], FAKE_AICR_SNAPSHOT_RESULT="job-failed")
    assert code == 0, report["message"]
    assert report["phase"] == "Succeeded"
    snap = step(report, "snapshot")
    assert snap["status"] == "warned"
    assert snap["classification"] == "snapshot-failed"
    assert "aicr snapshot failed (exit 8): [INTERNAL] job failed" in snap["message"]
    assert "advisory" in snap["message"]
    assert step(report, "deploy")["status"] == "succeeded"
    validate = next(argv for argv in invoked if subcommand(argv) == "validate")
    assert "--snapshot" not in validate
    assert any(w.startswith("snapshot: aicr snapshot failed") for w in report["warnings"])
    assert not (tmp_path / "results" / "aicr-cluster-snapshot").exists()


def test_off_by_default_no_snapshot_is_taken(fake: Path, tmp_path: Path) -> None:
    code, report, invoked = go(fake, tmp_path, ["run"], AICR_RUNNER_SNAPSHOT__ENABLED="false")
    assert code == 0, report["message"]
    assert (step(report, "snapshot")["status"], step(report, "snapshot")["message"]) == (
        "skipped",
        "snapshot.enabled=false",
    )
    assert "snapshot" not in [subcommand(argv) for argv in invoked]
    assert "--snapshot" not in next(argv for argv in invoked if subcommand(argv) == "validate")
    assert "snapshot.yaml" not in evidence_files(tmp_path)


def test_a_plan_takes_no_snapshot_and_shows_the_agent_a_job_would_start(fake: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    env = clean_env(
        tmp_path,
        **ON,
        FAKE_AICR_ENV_LOG=str(calls),
        AICR_RUNNER_SNAPSHOT__PRIVILEGED="false",
        AICR_RUNNER_SNAPSHOT__IMAGE="mirror.example/aicr/agent:v1.2.0",
        AICR_RUNNER_SNAPSHOT__NODE_SELECTOR='["nodeGroup=gpu"]',
    )
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=env)
    report = json.loads((tmp_path / "plan" / "aicr-run-status" / "report.json").read_text())
    assert code == 0, report["message"]
    snap = step(report, "snapshot")
    assert snap["status"] == "skipped"
    assert snap["message"] == (
        "plan: no snapshot; in a Job the run would start: aicr --log-json snapshot --namespace aicr-validation "
        "--image mirror.example/aicr/agent:v1.2.0 --job-name aicr-runner-snapshot "
        "--service-account-name aicr-runner-snapshot --privileged=false --timeout 300s "
        "--node-selector nodeGroup=gpu --output cm://aicr-validation/aicr-runner-snapshot"
    )
    invoked = [json.loads(line)["argv"] for line in calls.read_text().splitlines()]
    assert "snapshot" not in [subcommand(argv) for argv in invoked]


def test_a_plan_with_snapshots_off_says_only_that_it_takes_none(fake: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path, **{**ON, "AICR_RUNNER_SNAPSHOT__ENABLED": "false"})
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=env)
    report = json.loads((tmp_path / "plan" / "aicr-run-status" / "report.json").read_text())
    assert code == 0, report["message"]
    assert (step(report, "snapshot")["status"], step(report, "snapshot")["message"]) == ("skipped", "plan: no snapshot")
