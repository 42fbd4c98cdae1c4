"""``aicr-runner plan --upgrade-from``: the same upgrade check a Job runs, locally,
before anyone touches the cluster; the per-component table on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import clean_env, run

TRANSITIONS = {
    "gpu-operator": {"verdict": "blocked", "earliestFrom": "v25.10.2", "reference": "UPGRADING.md"},
    "nfd": {"verdict": "manual", "steps": ["relabel the GPU nodes"]},
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-aicr"))


def older(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The recipe a plan resolves today, with gpu-operator and nfd at older versions."""
    env = clean_env(tmp_path / "first")
    assert main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "first")], environ=env) == 0
    capsys.readouterr()
    doc = yaml.safe_load((tmp_path / "first" / "aicr-recipe" / "recipe.yaml").read_text())
    for ref in doc["componentRefs"]:
        ref["version"] = {"gpu-operator": "v25.3.0", "nfd": "0.16.0"}.get(ref["name"], ref["version"])
    path = tmp_path / "installed.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_plan_prints_each_components_verdict_and_what_to_do(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = older(fake, tmp_path, capsys)
    env = clean_env(tmp_path, FAKE_AICR_UPGRADE_TRANSITIONS=json.dumps(TRANSITIONS))
    argv = ["plan", "--aicr-binary", str(fake), "--upgrade-from", str(installed), "--output", str(tmp_path / "plan")]
    code = main(argv, environ=env)
    out = capsys.readouterr().out
    assert code == 35
    assert "upgrade blocked: gpu-operator v25.3.0 → v25.10.1; manual: nfd 0.16.0 → 0.17.3" in out
    table = out.split("\nCOMPONENT ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = {line.split()[0]: line.split()[1:4] for line in table}
    assert len(rows) == len(yaml.safe_load(installed.read_text())["componentRefs"])
    assert rows["gpu-operator"] == ["v25.3.0", "v25.10.1", "blocked"]
    assert rows["nfd"] == ["0.16.0", "0.17.3", "manual"]
    assert rows["cert-manager"] == ["v1.17.2", "v1.17.2", "safe"]
    assert "upgrade to v25.10.2 (the earliest recorded starting point) first" in out
    assert "add {component: nfd, from: 0.16.0, to: 0.17.3} to upgradeCheck.acknowledge" in out
    # The report is also a file of the plan's results.
    kept = json.loads((tmp_path / "plan" / "aicr-recipe-upgrade-check" / "upgrade-check.json").read_text())
    assert {c["component"]: c["verdict"] for c in kept["components"]}["gpu-operator"] == "blocked"


def test_a_configmap_is_handed_to_aicr_which_names_the_moves(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = older(fake, tmp_path, capsys)
    stored = tmp_path / "configmaps" / "aicr" / "aicr-recipe"
    stored.mkdir(parents=True)
    (stored / "recipe.yaml").write_bytes(installed.read_bytes())
    env = clean_env(
        tmp_path,
        FAKE_AICR_UPGRADE_TRANSITIONS=json.dumps({"gpu-operator": {"verdict": "safe"}, "nfd": {"verdict": "safe"}}),
        FAKE_AICR_CONFIGMAP_DIR=str(tmp_path / "configmaps"),
    )
    argv = ["plan", "--aicr-binary", str(fake), "--upgrade-from", "cm://aicr/aicr-recipe"]
    code = main([*argv, "--output", str(tmp_path / "plan")], environ=env)
    out = capsys.readouterr().out
    assert code == 0, out
    moves = "nfd 0.16.0 → 0.17.3, gpu-operator v25.3.0 → v25.10.1"
    assert f"upgrade: from cm://aicr/aicr-recipe to aicr v1.2.0; {moves}" in out
    calls = [line for line in out.splitlines() if line.startswith("upgrade-check ")]
    assert calls[0].split()[1] == "succeeded"


def test_without_the_flag_plan_runs_no_check(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = clean_env(tmp_path, FAKE_AICR_UPGRADE_TRANSITIONS=json.dumps(TRANSITIONS))
    assert main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=env) == 0
    report = json.loads((tmp_path / "plan" / "aicr-run-status" / "report.json").read_text())
    step = next(s for s in report["steps"] if s["state"] == "upgrade-check")
    assert (step["status"], step["message"]) == ("skipped", "plan: no --upgrade-from")
    capsys.readouterr()


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("missing.yaml", "cannot read the recipe"),
        ("cm://Bad/name", "allowed: cm://NAMESPACE/NAME"),
        ("cm://ns", "allowed: cm://NAMESPACE/NAME"),
        ("notarecipe.yaml", "expected a RecipeResult mapping"),
    ],
)
def test_a_bad_upgrade_from_is_refused_before_any_step(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, problem: str
) -> None:
    (tmp_path / "notarecipe.yaml").write_text("- a list\n")
    value = given if given.startswith("cm://") else str(tmp_path / given)
    argv = ["plan", "--aicr-binary", str(fake), "--upgrade-from", value, "--output", str(tmp_path / "plan")]
    code = main(argv, environ=clean_env(tmp_path))
    err = capsys.readouterr().err
    assert code == 2
    assert "--upgrade-from" in err
    assert problem in err
    assert not (tmp_path / "work").exists(), "refused before the run started"


def test_whole_runs_into_one_results_directory_cross_from_what_the_last_one_installed(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run --results-dir`` twice: the leaf criteria add three components to the
    accelerator-only recipe; added components have no installed version (unversioned)."""
    thin = {"AICR_RUNNER_CRITERIA__SERVICE": "", "AICR_RUNNER_CRITERIA__INTENT": "", "AICR_RUNNER_CRITERIA__OS": ""}
    first = run(fake, tmp_path, capsys, **thin)
    assert first.code == 0, first.output
    assert first.step("upgrade-check")["status"] == "skipped"
    stopped = run(fake, tmp_path, capsys)
    assert stopped.code == 35, stopped.output
    assert stopped.step("deploy")["status"] == "skipped"
    check = stopped.report()["upgradeCheck"]
    added = {m["component"] for m in check["moves"] if m["kind"] == "added"}
    assert added == {"aws-ebs-csi-driver", "aws-efa", "kubeflow-trainer"}
    assert {c["component"] for c in check["components"] if c["verdict"] == "unversioned"} == added
    assert stopped.termination.startswith("Failed (exit 35): upgrade check: stopped before deploy: upgrade not judged:")
    went = run(fake, tmp_path, capsys, AICR_RUNNER_UPGRADE_CHECK__ON_UNKNOWN="warn")
    assert went.code == 0, went.output
    assert went.step("upgrade-check")["status"] == "warned"
    assert went.step("deploy")["status"] == "succeeded"
    again = run(fake, tmp_path, capsys)
    assert again.step("upgrade-check")["status"] == "skipped", "the leaf recipe is installed now"
