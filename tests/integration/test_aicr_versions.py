"""The runner with an aicr that is not the pinned v1.2.0: the stand-in switched to
0.11-style (FAKE_AICR_VERSION=0.11.1), and one that breaks its contract."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, Run, clean_env, run


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


def records(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_an_0_11_aicr_is_named_everywhere_and_its_results_read_for_what_they_are(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(fake, tmp_path, capsys, FAKE_AICR_VERSION="0.11.1")
    assert r.code == 0, r.output[-3000:]
    start = next(rec for rec in records(r.output) if rec["event"] == "aicr-runner starting")
    assert start["aicr"] == "v0.11.1", "the start line names the binary that runs, not the pin"
    assert r.report()["aicrVersion"] == "v0.11.1"
    assert "aicr: v0.11.1" in r.result("aicr-run-status", "summary.txt").decode()
    assert r.termination.endswith("[aicr v0.11.1]")
    assert r.step("fetch")["message"].startswith("aicr v0.11.1 from preinstalled")
    verify = str(r.step("verify")["message"])
    assert "not closed-world" in verify, "verify says what this aicr checked"
    deploy = str(r.step("deploy")["message"])
    # 0.11's deploy.sh names each component it installs and each that failed
    # (tests/data/aicr-0.11.1-deploy: the real v0.11.1's output): read as a tally.
    assert deploy == "AICR install complete: 15/15 installed"
    assert r.step("deploy")["progress"]["installed"] == 15
    assert "0/0" not in deploy


def test_the_pinned_1x_aicr_keeps_its_closed_world_reason_and_tally(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(fake, tmp_path, capsys)
    assert r.code == 0
    assert r.step("verify")["message"] == (
        "bundle verified: every file listed and matching, and nothing unlisted (closed-world)"
    )
    assert r.step("deploy")["message"] == "AICR install complete: 15/15 installed"
    assert r.termination.endswith("[aicr v1.2.0]")


@pytest.mark.parametrize(
    ("settings", "named", "feature"),
    [
        ({"AICR_RUNNER_BUNDLE__STORAGE_CLASS": "gp3"}, "AICR_RUNNER_BUNDLE__STORAGE_CLASS", "bundle --storage-class"),
        (VALIDATE, "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE", "validate --emit-attestation"),
        (
            {
                **VALIDATE,
                "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__MODE": "unsigned",
                "AICR_RUNNER_VALIDATE__PUBLISH__REF": "reg.example/acme/evidence",
            },
            "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED",
            "aicr evidence publish",
        ),
    ],
)
def test_a_setting_the_aicr_lacks_is_refused_before_any_step_uses_it(  # noqa: PLR0917 - fixtures + parameters
    fake: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, str],
    named: str,
    feature: str,
) -> None:
    calls = tmp_path / "aicr-calls.jsonl"
    r = run(fake, tmp_path, capsys, FAKE_AICR_VERSION="0.11.1", FAKE_AICR_ENV_LOG=str(calls), **settings)
    assert r.code == 2, r.output[-3000:]
    fetch = r.step("fetch")
    assert fetch["status"] == "failed"
    message = str(fetch["message"])
    assert named in message
    assert feature in message
    assert "aicr v0.11.1 does not have" in message
    assert "minimum version v1.0.0" in message
    argv = [json.loads(line)["argv"] for line in calls.read_text().splitlines()]
    assert argv, "aicr was asked its version"
    assert all(a == ["--version"] for a in argv), "nothing but the version question reached this aicr"
    assert r.step("recipe")["status"] == "skipped"
    assert r.termination.startswith("Failed (exit 2): settings refused (the aicr that runs lacks what they need): ")
    assert "fetch failed" not in r.termination, "nothing failed to fetch"


@pytest.mark.parametrize("command", ["recipe", "validate"])
def test_aicr_exiting_0_without_its_output_file_broke_its_contract(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    r = run(
        fake, tmp_path, capsys, FAKE_AICR_SKIP_OUTPUT=command, **VALIDATE, AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true"
    )
    assert r.code == 30, r.output[-3000:]
    step = r.step(command)
    assert (step["status"], step["exit_code"] if "exit_code" in step else step.get("exitCode")) == ("failed", 30)
    assert "aicr broke its contract" in str(step["message"])
    assert "aicr broke its contract" in r.termination
    assert "internal error" not in r.termination


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_aicr_binary_flag_counts_as_the_binary_setting_for_its_sha256(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_AICR__BINARY_SHA256=sha256(fake))
    assert main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=env) == 0
    assert "BINARY is empty" not in capsys.readouterr().err
    env = clean_env(tmp_path, AICR_RUNNER_AICR__BINARY_SHA256="0" * 64)
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan2")], environ=env)
    assert code == 21, "the hash is enforced on the flag's binary"
    assert "sha256 mismatch" in capsys.readouterr().err


def test_a_plan_ends_with_a_plan_message_not_a_job_one(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=clean_env(tmp_path))
    out = capsys.readouterr()
    assert code == 0
    text = out.out + out.err
    assert "AICR plan complete" in text
    assert "AICR Job complete" not in text
    report = json.loads((tmp_path / "plan" / "aicr-run-status" / "report.json").read_text())
    assert report["message"].startswith("AICR plan complete")


def test_criteria_rejected_lists_the_combinations_once(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Run = run(fake, tmp_path, capsys, AICR_RUNNER_CRITERIA__SERVICE="gke", AICR_RUNNER_CRITERIA__OS="ubuntu")
    assert r.code == 2
    line = next(rec for rec in records(r.output) if rec["event"] == "CRITERIA REJECTED")
    assert line["step"] == "recipe"
    assert str(line["reason"]).count("supported combinations:") == 1, line["reason"]
    assert r.termination.count("supported combinations:") == 1, r.termination


def test_the_start_line_never_runs_a_binary_whose_provenance_is_to_be_verified(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = tmp_path / "aicr-calls.jsonl"
    r = run(fake, tmp_path, capsys, AICR_RUNNER_AICR__PROVENANCE__MODE="require", FAKE_AICR_ENV_LOG=str(calls))
    assert r.code == 29, "the stand-in has no attestation"
    assert not calls.exists(), "aicr never ran, not even --version for the start line"
    start = next(rec for rec in records(r.output) if rec["event"] == "aicr-runner starting")
    assert "version reported once its provenance is verified" in str(start["aicr"])


def test_an_aicr_built_without_release_version_data_is_probed_not_taken_for_the_pin(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A source build without goreleaser's ldflags prints "aicr version dev (commit: unknown, ...)":
    its --help says what it can do (the stand-in's dev build has every 1.x flag)."""
    r = run(fake, tmp_path, capsys, FAKE_AICR_VERSION="dev", AICR_RUNNER_BUNDLE__STORAGE_CLASS="gp3")
    assert r.code == 0, r.output[-3000:]
    reported = str(r.report()["aicrVersion"])
    assert reported.startswith(
        "unknown version ('aicr version dev (commit: test-stand-in, date: 2026-05-04T00:00:00Z)'), "
        "capabilities detected from flags: with aicr bundle --storage-class, aicr validate --emit-attestation, "
        "aicr evidence publish, aicr recipe --service k0s"
    ), reported
    start = next(rec for rec in records(r.output) if rec["event"] == "aicr-runner starting")
    assert "capabilities detected from flags" in str(start["aicr"])
    warning = next(rec for rec in records(r.output) if str(rec["event"]).startswith("aicr names no release version"))
    assert warning["behaves_as"] == "aicr >= v1.0.0"
    assert "closed-world" in str(r.step("verify")["message"]), "every 1.x flag: the 1.x behaviour"
    assert (r.work / "logs" / "help-bundle.log").is_file(), "the probe's answers are kept, not relayed"


def test_a_preinstalled_aicrs_criteria_refusal_follows_the_version_it_reports(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(fake, tmp_path, capsys, FAKE_AICR_VERSION="0.11.1", AICR_RUNNER_CRITERIA__SERVICE="self-managed")
    assert r.code == 2, r.output[-3000:]
    fetch = r.step("fetch")
    assert (fetch["status"], fetch["classification"]) == ("failed", "criteria-refused")
    assert "aicr v0.11.1 maps this alias to 'any'" in str(fetch["message"])
    assert r.termination.startswith("Failed (exit 2): criteria refused: AICR_RUNNER_CRITERIA__SERVICE='self-managed'")
    assert r.step("recipe")["status"] == "skipped"
