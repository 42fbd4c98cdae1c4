"""``aicr-runner validate``: validation only, against a recorded recipe, with the fake aicr.

The recipe comes from a whole run's recipe capture (what an install records); the
validation-only run must call aicr for validate (and its version) and nothing else:
no recipe resolution, no bundle, no deploy.sh.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@pytest.fixture(scope="module")
def recorded(fake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe an install recorded (the recipe ConfigMap's recipe.yaml)."""
    tmp = tmp_path_factory.mktemp("install")
    env = clean_env(tmp, **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    assert main(["run", "--aicr-binary", str(fake), "--results-dir", str(tmp / "results")], environ=env) == 0
    return tmp / "results" / "aicr-recipe" / "recipe.yaml"


def validate(fake: Path, recipe: Path, tmp_path: Path, **extra: str) -> tuple[int, dict[str, Any], list[list[str]]]:
    calls = tmp_path / "calls.jsonl"
    env = clean_env(tmp_path, **VALIDATE, FAKE_AICR_ENV_LOG=str(calls), **extra)
    argv = ["validate", "--recipe", str(recipe), "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "out")]
    code = main(argv, environ=env)
    report = json.loads((tmp_path / "out" / "aicr-run-status" / "report.json").read_text())
    invoked = [json.loads(line)["argv"] for line in calls.read_text().splitlines()] if calls.exists() else []
    return code, report, invoked


def test_validation_only_runs_validate_against_the_recorded_recipe_and_nothing_else(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    code, report, invoked = validate(fake, recorded, tmp_path)
    assert code == 0, report["message"]
    assert [s["state"] for s in report["steps"]] == [
        "fetch", "pack", "lease", "recorded-recipe", "snapshot", "validate", "capture-verdict", "publish",
        "capture-evidence",
    ]  # fmt: skip
    assert report["phase"] == "Succeeded"
    assert report["message"].startswith("AICR validation complete")
    commands = [next((a for a in argv if not a.startswith("-")), "--version") for argv in invoked]
    assert commands == ["--version", "validate"], invoked
    validate_argv = invoked[1]
    work_recipe = tmp_path / "work" / "recipe.yaml"
    assert str(work_recipe) in validate_argv
    assert work_recipe.read_bytes() == recorded.read_bytes(), "the recorded recipe, never a re-resolution"
    step = next(s for s in report["steps"] if s["state"] == "recorded-recipe")
    assert "sha256:" in step["message"]
    ctrf = json.loads((tmp_path / "out" / "aicr-validate-result" / "ctrf.json").read_text())
    assert ctrf["reportFormat"] == "CTRF"
    assert not (tmp_path / "work" / "bundle").exists()


def test_a_recipe_stored_compressed_is_read_from_its_gz(fake: Path, recorded: Path, tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "recipe.yaml.gz").write_bytes(gzip.compress(recorded.read_bytes()))
    code, report, _ = validate(fake, mounted / "recipe.yaml", tmp_path)
    assert code == 0, report["message"]
    assert (tmp_path / "work" / "recipe.yaml").read_bytes() == recorded.read_bytes()


def test_no_recorded_recipe_is_exit_2_naming_the_path_and_nothing_is_validated(fake: Path, tmp_path: Path) -> None:
    code, report, invoked = validate(fake, tmp_path / "absent" / "recipe.yaml", tmp_path)
    assert code == 2
    assert "no recorded recipe" in report["message"]
    assert str(tmp_path / "absent" / "recipe.yaml") in report["message"]
    assert all("validate" not in argv for argv in invoked)


def test_failed_checks_are_the_same_verdict_as_a_run(fake: Path, recorded: Path, tmp_path: Path) -> None:
    code, report, _ = validate(fake, recorded, tmp_path, FAKE_AICR_VALIDATE_RESULT="fail")
    assert code == 0, "without validate.failOnError a failed validation is a caveat, as in a run"
    assert report["phase"] == "SucceededWithFailures"
    code, report, _ = validate(
        fake, recorded, tmp_path, FAKE_AICR_VALIDATE_RESULT="fail", AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true"
    )
    assert code == 8
    assert report["phase"] == "Failed"


def test_a_regression_and_a_recovery_are_said_and_the_history_holds_every_run(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "aicr-validate-result-history" / "history.json"
    validate(fake, recorded, tmp_path)
    code, report, _ = validate(fake, recorded, tmp_path, FAKE_AICR_VALIDATE_RESULT="fail")
    assert code == 0
    capture = next(s for s in report["steps"] if s["state"] == "capture-verdict")
    assert capture["status"] == "warned"
    assert "REGRESSED since" in capture["message"]
    failed = json.loads(out.read_text())[-1]["checks"]["failed"]
    assert failed, "the fake's failing run names its failed checks"
    assert ", ".join(failed) in capture["message"]
    assert any(w.startswith("validation regressed since") for w in report["warnings"])
    summary = (tmp_path / "out" / "aicr-run-status" / "summary.txt").read_text()
    assert "validation regressed since" in summary
    ctrf = json.loads((tmp_path / "out" / "aicr-validate-result" / "ctrf.json").read_text())
    assert ctrf["baseline"]["extra"]["checks"]["passed"], "the baseline is the previous (passing) verdict"
    code, report, _ = validate(fake, recorded, tmp_path)
    capture = next(s for s in report["steps"] if s["state"] == "capture-verdict")
    assert capture["status"] == "succeeded"
    assert "recovered since" in capture["message"]
    entries = json.loads(out.read_text())
    assert len(entries) == 3
    assert all(e["recipeDigest"] == entries[0]["recipeDigest"] != "" for e in entries)
    assert [bool(e["checks"].get("failed")) for e in entries] == [False, True, False]
    assert all(e["runBy"].startswith("revalidate") for e in entries)


def test_without_criteria_the_recorded_recipes_own_are_named_in_the_report(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in clean_env(tmp_path, **VALIDATE).items() if not k.startswith("AICR_RUNNER_CRITERIA__")}
    argv = ["validate", "--recipe", str(recorded), "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "out")]
    assert main(argv, environ=env) == 0
    report = json.loads((tmp_path / "out" / "aicr-run-status" / "report.json").read_text())
    assert {k: v for k, v in report["criteria"].items() if v} == {
        "service": "eks",
        "accelerator": "h100",
        "intent": "training",
        "os": "ubuntu",
    }


def test_the_history_keeps_validate_history_limit_runs(fake: Path, recorded: Path, tmp_path: Path) -> None:
    for result in ("pass", "fail", "pass"):
        validate(fake, recorded, tmp_path, FAKE_AICR_VALIDATE_RESULT=result, AICR_RUNNER_VALIDATE__HISTORY_LIMIT="2")
    entries = json.loads((tmp_path / "out" / "aicr-validate-result-history" / "history.json").read_text())
    assert [bool(e["checks"].get("failed")) for e in entries] == [True, False], "the oldest dropped"
