"""The runner with the real aicr v0.11.1 (``AICR_TEST_RELEASES_DIR``, see tests/support/real_aicr.py).

- fetch: the release folder served as a release mirror on loopback (the runner's
  ``AICR__RELEASE_BASE_URL``): checksum, extraction, version; the default
  provenance mode refuses it (it has no NVIDIA attestation), off and warn run it;
- plan: criteria combinations planned by the runner and compared with what the
  same aicr gives when run directly (components, recipe.yaml, checksums.txt),
  thin and unknown-value criteria included;
- each gap the real binary showed, closed and checked with the real binary: a
  build without a release version is probed, unknown values exit 2 with the
  values aicr lists, dropped values are warned about from the applied overlays,
  refusals speak for 0.11.1, a validate without a cluster is not a failed check,
  a failed bundle says why;
- the v0.11.1 catalog: scripts/gen-catalog.py regenerates it from the binary, and
  it predicts what the binary applies for every combination tried here.

Direct aicr calls are cached per session (tests/support/real_aicr.py): the same inputs
give the same outputs, which the byte-for-byte comparisons below also show.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.aicr.recipe import dropped_values, parse_recipe
from aicr_runner.cli import main
from aicr_runner.settings import criteria_catalog as runtime_catalog
from aicr_runner.settings.config import Criteria
from aicr_runner.settings.names import CRITERIA_DIMENSIONS
from tests.support.real_aicr import ARCHIVE, LEAVES, TAG, THIN, UNKNOWN, FolderMirror, RealAicr, combo, release_dir

ROOT = Path(__file__).resolve().parents[2]
V0_11_CATALOG = ROOT / "tests" / "data" / "criteria-catalog-v0.11.1.json"
#: The binary in the archive (README of the release folder).
BINARY_SHA256 = "3d6b94fcea6a648ce5da54f62bdb9bc46e8057484d3d8da54c44e42ed9739119"
#: aicr v0.11.1's criteria values, as its `recipe --help` lists them.
KNOWN = {
    "service": ["aks", "eks", "gke", "kind", "oke"],
    "accelerator": ["a100", "b200", "gb200", "h100", "l40"],
    "os": ["amazonlinux", "cos", "rhel", "ubuntu"],
    "platform": ["dynamo", "kubeflow"],
}


def label(criteria: dict[str, str]) -> str:
    return "+".join(criteria.values())


@dataclass
class Plan:
    code: int
    output: Path
    work: Path
    log: str

    def report(self) -> dict[str, Any]:
        return dict(json.loads((self.output / "aicr-run-status" / "report.json").read_text()))

    def step(self, state: str) -> dict[str, Any]:
        return dict(next(s for s in self.report()["steps"] if s["state"] == state))

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.splitlines() if line.startswith("{")]


def runner_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBERNETES_"))}
    env.pop("KUBECONFIG", None)
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "AICR_RUNNER_WORK_DIR": str(tmp_path / "work"),
            "AICR_RUNNER_LOG_FORMAT": "json",
            "AICR_RUNNER_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
            "AICR_RUNNER_AICR__PROVENANCE__MODE": "off",  # no NVIDIA attestation in this release
        }
    )
    env.update(extra)
    return env


def plan(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    criteria: dict[str, str],
    *,
    binary: Path | None,
    **extra: str,
) -> Plan:
    env = runner_env(tmp_path, **extra)
    env.update({f"AICR_RUNNER_CRITERIA__{name.upper()}": value for name, value in criteria.items()})
    argv = ["plan", "--output", str(tmp_path / "plan")]
    if binary is not None:
        argv += ["--aicr-binary", str(binary)]
    capsys.readouterr()
    code = main(argv, environ=env)
    out = capsys.readouterr()
    return Plan(code, tmp_path / "plan", tmp_path / "work", out.out + out.err)


def components_of(recipe_file: Path) -> list[dict[str, str]]:
    return [c.as_row() for c in parse_recipe(recipe_file.read_text()).components]


# -- fetch from a release mirror ----------------------------------------------------------------


@pytest.fixture(scope="module")
def mirror(real_aicr_release: Path) -> Any:
    with FolderMirror(real_aicr_release.parent) as served:
        yield served


def mirror_env(mirror: FolderMirror, mode: str) -> dict[str, str]:
    return {
        "AICR_RUNNER_AICR__RELEASE_BASE_URL": mirror.base_url,
        "AICR_RUNNER_AICR__VERSION": TAG,
        "AICR_RUNNER_AICR__ARCH": "amd64",
        "AICR_RUNNER_AICR__PROVENANCE__MODE": mode,
    }


def test_the_default_provenance_mode_refuses_the_release_saying_how_to_opt_out(
    mirror: FolderMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leaf = LEAVES[0]
    result = plan(capsys, tmp_path, leaf, binary=None, **mirror_env(mirror, "require"))
    assert result.code == 29, result.log[-3000:]
    fetch = result.step("fetch")
    assert fetch["status"] == "failed"
    assert "no aicr-attestation.sigstore.json beside" in fetch["message"]
    assert (
        "set AICR_RUNNER_AICR__PROVENANCE__MODE=warn or off explicitly (chart: aicr.provenance.mode)"
        in (fetch["message"])
    )
    assert result.report()["provenance"]["status"] == "failed"
    assert result.step("recipe")["status"] == "skipped", "aicr never ran"
    assert f"/{TAG}/{ARCHIVE}" in mirror.requests
    assert f"/{TAG}/aicr_checksums.txt" in mirror.requests


@pytest.mark.parametrize("mode", ["off", "warn"])
def test_provenance_off_or_warn_fetches_checks_and_runs_the_real_release(
    mirror: FolderMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    result = plan(capsys, tmp_path, LEAVES[0], binary=None, **mirror_env(mirror, mode))
    assert result.code == 0, result.log[-3000:]
    report = result.report()
    assert report["aicrVersion"] == "v0.11.1"
    fetch = result.step("fetch")
    digest = (release_dir() / "aicr_checksums.txt").read_text().split()[0]
    source = f"aicr v0.11.1 from {mirror.base_url}/{TAG}/{ARCHIVE} (sha256 {digest})"
    assert fetch["message"].startswith(source), fetch["message"]
    if mode == "off":
        assert fetch["status"] == "succeeded"
        assert fetch["message"].endswith("provenance not checked (mode off)")
    else:
        assert (fetch["status"], fetch["classification"]) == ("warned", "provenance-unverified")
        assert "no aicr-attestation.sigstore.json" in fetch["message"]
    binary = result.work / "aicr-release" / "aicr"
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == BINARY_SHA256, "the archive's binary runs"
    assert report["message"].startswith("AICR plan complete")


# -- plan, compared with the same aicr run directly --------------------------------------------------


@pytest.mark.parametrize("criteria", LEAVES + THIN, ids=label)
def test_plan_gives_what_the_same_aicr_gives_directly(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str], criteria: dict[str, str]
) -> None:
    result = plan(capsys, tmp_path, criteria, binary=real_aicr.binary)
    assert result.code == 0, result.log[-3000:]
    direct, recipe_file = real_aicr.recipe(criteria)
    assert direct.exit_code == 0, direct.stderr
    bundled, bundle_dir = real_aicr.bundle(criteria)
    assert bundled.exit_code == 0, bundled.stderr
    assert result.report()["components"] == components_of(recipe_file), "the component table"
    assert (result.work / "recipe.yaml").read_bytes() == recipe_file.read_bytes()
    assert (result.work / "bundle" / "checksums.txt").read_bytes() == (bundle_dir / "checksums.txt").read_bytes()
    verify = result.step("verify")
    assert verify["status"] == "succeeded"
    assert "not closed-world" in verify["message"], "v0.11.1's verify does not see added files"
    check = result.step("check-recipe")
    dropped = [w for w in check["message"].split("; ") if "no applied overlay carries it" in w]
    if criteria in THIN:
        assert check["status"] == "warned", check
        assert dropped, check["message"]
        assert "resolution is a full leaf" not in check["message"]
    else:
        assert not dropped, check["message"]


def test_a_dropped_accelerator_is_named_with_the_overlays_aicr_applied(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = plan(capsys, tmp_path, THIN[0], binary=real_aicr.binary)
    assert result.code == 0
    message = result.step("check-recipe")["message"]
    assert (
        "accelerator='a100' was stated but no applied overlay carries it (applied: base, monitoring-hpa, eks, "
        "eks-training): aicr resolved a recipe without it (11 components)"
    ) in message
    recipe = yaml.safe_load((result.work / "recipe.yaml").read_text())
    assert recipe["criteria"]["accelerator"] == "a100", "v0.11.1 echoes the requested value back"


@pytest.mark.parametrize("unknown", UNKNOWN, ids=[f"{d}={v}" for _, d, v in UNKNOWN])
def test_an_unknown_value_exits_2_with_the_values_this_aicr_knows(
    real_aicr: RealAicr,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    unknown: tuple[dict[str, str], str, str],
) -> None:
    criteria, dimension, value = unknown
    direct, _ = real_aicr.recipe(criteria)
    assert direct.exit_code == 8, "aicr itself: INTERNAL wrapping the invalid value, no list"
    assert f"invalid {dimension} type: {value}" in direct.stderr
    result = plan(capsys, tmp_path, criteria, binary=real_aicr.binary)
    assert result.code == 2, result.log[-3000:]
    step = result.step("recipe")
    assert (step["status"], step["exitCode"], step["classification"]) == ("failed", 2, "criteria-rejected")
    listed = ", ".join(f"({dimension}={v})" for v in KNOWN[dimension])
    assert step["message"] == (
        f"aicr v0.11.1 does not know {dimension} '{value}' (aicr recipe exit 8: invalid {dimension} type: "
        f"{value}); supported combinations: {listed}"
    )
    assert result.report()["supportedCombinations"] == [f"{dimension}={v}" for v in KNOWN[dimension]]
    rejected = [r for r in result.records() if r["event"] == "CRITERIA REJECTED"]
    assert [(r["step"], r["reason"]) for r in rejected] == [("recipe", step["message"])]


# -- refusals worded for the version that runs -------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "said"),
    [
        (combo(service="self-managed", accelerator="h100"), "aicr v0.11.1 maps this alias to 'any'"),
        (combo(service="eks", accelerator="any", intent="training"), "aicr v0.11.1 reads it as no accelerator"),
    ],
    ids=["alias", "any"],
)
def test_alias_and_any_are_refused_in_the_words_of_the_aicr_that_runs(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str], criteria: dict[str, str], said: str
) -> None:
    direct, recipe_file = real_aicr.recipe(criteria)
    assert direct.exit_code == 0, "v0.11.1 accepts them, reading them as unstated"
    assert parse_recipe(recipe_file.read_text()).criteria.get("service") in ("any", "eks")
    result = plan(capsys, tmp_path, criteria, binary=real_aicr.binary)
    assert result.code == 2
    fetch = result.step("fetch")
    assert (fetch["status"], fetch["classification"]) == ("failed", "criteria-refused")
    assert said in fetch["message"]
    assert "generic" not in fetch["message"], "a 1.x fact"
    assert "answers 'no criteria provided'" not in fetch["message"], "a 1.x fact"
    assert result.report()["message"].startswith("criteria refused: ")


# -- a build without a release version ------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_build(real_aicr: RealAicr, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real v0.11.1 answering --version as a source build does (no goreleaser ldflags)."""
    wrapper = tmp_path_factory.mktemp("dev-build") / "aicr"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "aicr version dev (commit: unknown, date: unknown)"; exit 0; fi\n'
        f'exec {real_aicr.binary} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


DEV_TEXT = (
    "unknown version ('aicr version dev (commit: unknown, date: unknown)'), capabilities detected from flags: "
    "without aicr bundle --storage-class, aicr validate --emit-attestation, aicr evidence publish, "
    "aicr recipe --service k0s"
)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"AICR_RUNNER_BUNDLE__STORAGE_CLASS": "gp3"}, "bundle --storage-class"),
        (
            {"AICR_RUNNER_VALIDATE__ENABLED": "true", "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true"},
            "validate --emit-attestation",
        ),
    ],
    ids=["storageClass", "emitEvidence"],
)
def test_a_dev_build_is_probed_and_a_setting_it_lacks_is_refused_before_any_step(
    dev_build: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: dict[str, str], named: str
) -> None:
    result = plan(capsys, tmp_path, LEAVES[0], binary=dev_build, **settings)
    assert result.code == 2, result.log[-3000:]
    assert result.report()["aicrVersion"] == DEV_TEXT
    fetch = result.step("fetch")
    assert f"its --help lists no {named}" in fetch["message"]
    assert result.report()["message"].startswith("settings refused (the aicr that runs lacks what they need): ")
    assert result.step("recipe")["status"] == "skipped"
    start = next(r for r in result.records() if r["event"] == "aicr-runner starting")
    assert "capabilities detected from flags" in start["aicr"]


def test_a_dev_build_gets_the_behaviour_its_flags_show(
    dev_build: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = plan(capsys, tmp_path, LEAVES[0], binary=dev_build)
    assert result.code == 0, result.log[-3000:]
    assert result.report()["aicrVersion"] == DEV_TEXT
    assert "not closed-world" in result.step("verify")["message"], "the 0.x verify, not the pin's claim"


# -- a validate that never reached the cluster, a bundle that failed ---------------------------------


def test_a_validate_without_a_cluster_is_no_verdict_not_a_failed_check(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = runner_env(
        tmp_path,
        AICR_RUNNER_DEPLOY__ENABLED="false",
        AICR_RUNNER_VALIDATE__ENABLED="true",
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true",
        **{f"AICR_RUNNER_CRITERIA__{k.upper()}": v for k, v in LEAVES[0].items()},
    )
    code = main(["run", "--aicr-binary", str(real_aicr.binary), "--results-dir", str(tmp_path / "r")], environ=env)
    out = capsys.readouterr()
    assert code == 8, (out.out + out.err)[-3000:]
    report = json.loads((tmp_path / "r" / "aicr-run-status" / "report.json").read_text())
    validate = next(s for s in report["steps"] if s["state"] == "validate")
    assert validate["message"].startswith(
        "aicr validate could not reach the cluster, so no check ran and there is no verdict: "
        "[INTERNAL] failed to create kubernetes client"
    ), validate["message"]
    assert "one or more checks failed" not in validate["message"]
    assert next(s for s in report["steps"] if s["state"] == "capture-verdict")["status"] == "warned"


def test_a_failed_bundle_says_what_aicr_said_and_logs_it_as_an_error(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = plan(capsys, tmp_path, LEAVES[0], binary=real_aicr.binary, AICR_RUNNER_BUNDLE__ARGS='["--no-such-flag"]')
    assert result.code == 1
    assert result.step("bundle")["message"] == (
        "aicr bundle failed (exit 1): flag provided but not defined: -no-such-flag"
    )
    errors = [r for r in result.records() if r.get("level") == "error" and r.get("source") == "aicr"]
    assert any("Incorrect Usage: flag provided but not defined: -no-such-flag" in r["event"] for r in errors)


# -- the v0.11.1 catalog, generated from the binary ----------------------------------------------------


def test_gen_catalog_makes_the_v0_11_1_catalog_from_the_real_binary(real_aicr: RealAicr) -> None:
    """The same generator as the chart's catalog; v0.11.1 has no `recipe list`, so it resolves queries."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gen-catalog.py"),
            "--aicr",
            str(real_aicr.binary),
            "--check",
            "--output",
            str(V0_11_CATALOG),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr
    assert "is current (38 overlays, aicr v0.11.1)" in proc.stdout


def _flagged(problems: list[str]) -> set[str]:
    """The dimensions the chart's rule names in its problems."""
    return {m.group(1) for p in problems if (m := re.match(r"(?:no recipe provides )?(\w+) '", p))}


@pytest.mark.parametrize("criteria", LEAVES + THIN + [u[0] for u in UNKNOWN], ids=label)
def test_the_v0_11_1_catalog_agrees_with_the_binary(real_aicr: RealAicr, criteria: dict[str, str]) -> None:
    """What the catalog predicts aicr applies is what aicr applied; the chart's rule
    refuses exactly the criteria whose stated values the resolution dropped (or
    that aicr does not know)."""
    doc = json.loads(V0_11_CATALOG.read_text())
    problems = runtime_catalog.problems(criteria, doc)
    call, recipe_file = real_aicr.recipe(criteria)
    if call.exit_code != 0:
        assert call.exit_code == 8
        assert "invalid" in call.stderr
        assert any(p.startswith("no recipe provides") for p in problems), "the catalog has no such value either"
        return
    summary = parse_recipe(recipe_file.read_text())
    stated = {d: v for d, v in criteria.items() if v != "any"}
    predicted = {
        e["name"] for e in doc["entries"] if all(e[d] in ("any", stated.get(d, "")) for d in CRITERIA_DIMENSIONS)
    }
    assert predicted == set(summary.applied_overlays)
    known = runtime_catalog.overlay_criteria("v0.11.1", doc)
    dropped = dropped_values(summary, Criteria(**criteria), known)
    assert _flagged(problems) == set(dropped), (problems, dropped)
    assert dropped == dropped_values(summary, Criteria(**criteria)), "overlay names tell the same as the catalog"
