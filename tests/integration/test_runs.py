"""Whole runs of the real runner against the contract-faithful fake aicr.

Each test drives ``aicr-runner run`` (or ``plan``) end to end with real child
processes (aicr, bash deploy.sh) and results written to a directory, then checks
the exit code, the run report, the captured results and the log.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr

FULL_LEAF = {
    "AICR_RUNNER_CRITERIA__SERVICE": "eks",
    "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
    "AICR_RUNNER_CRITERIA__INTENT": "training",
    "AICR_RUNNER_CRITERIA__OS": "ubuntu",
}
VALIDATE = {
    "AICR_RUNNER_VALIDATE__ENABLED": "true",
    "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true",
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@dataclass
class Run:
    code: int
    results: Path
    work: Path
    output: str
    termination: str

    def report(self) -> dict[str, Any]:
        return json.loads((self.results / "aicr-run-status" / "report.json").read_text())  # type: ignore[no-any-return]

    def step(self, name: str) -> dict[str, Any]:
        steps = self.report()["steps"]
        assert isinstance(steps, list)
        return next(s for s in steps if s["state"] == name)

    def result(self, configmap: str, key: str) -> bytes:
        return (self.results / configmap / key).read_bytes()

    def events(self) -> list[dict[str, Any]]:
        """The pod log's events (its JSON lines)."""
        return [json.loads(line) for line in self.output.splitlines() if line.startswith("{")]

    def logged(self, event: str, **fields: object) -> list[dict[str, Any]]:
        """The pod log's events named ``event`` that hold ``fields``."""
        return [r for r in self.events() if r["event"] == event and fields.items() <= r.items()]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_"))}
    env.update(FULL_LEAF)
    env["AICR_RUNNER_WORK_DIR"] = str(tmp_path / "work")
    env["AICR_RUNNER_LOG_FORMAT"] = "json"
    env["AICR_RUNNER_TERMINATION_MESSAGE_PATH"] = str(tmp_path / "termination-log")
    # The fake aicr carries no real attestation; provenance is tested with real
    # Sigstore material in tests/unit/aicr/test_provenance.py and tests/unit/steps/test_steps.py.
    env["AICR_RUNNER_AICR__PROVENANCE__MODE"] = "off"
    env.update(extra)
    return env


def run(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], **extra: str) -> Run:
    env = clean_env(tmp_path, **extra)
    code = main(["run", "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "results")], environ=env)
    out = capsys.readouterr()
    term = tmp_path / "termination-log"
    return Run(
        code, tmp_path / "results", tmp_path / "work", out.out + out.err, term.read_text() if term.exists() else ""
    )


def test_full_run_captures_everything_and_exits_zero(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__PUBLISH__ENABLED="true",
        AICR_RUNNER_VALIDATE__PUBLISH__MODE="unsigned",
        AICR_RUNNER_VALIDATE__PUBLISH__REF="reg.example/acme/evidence",
    )
    assert r.code == 0, r.output
    report = r.report()
    assert report["phase"] == "Succeeded"
    statuses = {s["state"]: s["status"] for s in report["steps"]}
    assert statuses.pop("pack") == "skipped", "no data pack was given"
    assert statuses.pop("lease") == "skipped", "a --results-dir run has no cluster and no install Lease"
    assert statuses.pop("snapshot") == "skipped", "snapshot.enabled is off by default"
    assert statuses.pop("upgrade-check") == "skipped", "a first install crosses nothing"
    assert set(statuses.values()) == {"succeeded"}, statuses
    summary = r.result("aicr-recipe", "summary.txt").decode()
    assert "criteria: service=eks, accelerator=h100, os=ubuntu, intent=training" in summary
    assert "recipe generation completed" in summary
    assert "components=15" in summary
    assert b"kind: RecipeResult" in r.result("aicr-recipe", "recipe.yaml")
    ctrf = json.loads(r.result("aicr-validate-result", "ctrf.json"))
    assert ctrf["reportFormat"] == "CTRF"
    with tarfile.open(fileobj=io.BytesIO(r.result("aicr-evidence-bundle", "evidence.tgz"))) as tar:
        assert any(n.endswith("summary-bundle/recipe.yaml") for n in tar.getnames())
    pointer = r.result("aicr-evidence-bundle", "pointer.yaml").decode()
    assert "reg.example/acme/evidence" in pointer, "pointer.yaml is captured after publish filled it in"
    assert r.step("deploy")["message"] == "AICR install complete: 15/15 installed"
    [outcome] = r.logged("run ended")
    assert outcome["message"].startswith("AICR Job complete")
    assert (outcome["exit_code"], outcome["level"]) == (0, "info")
    assert r.logged("aicr validate exited", step="validate", exit_code=0)
    assert r.logged("aicr evidence publish exited", step="publish", exit_code=0)
    assert r.termination.startswith("Succeeded (exit 0)")
    assert (r.work / "logs" / "deploy.log").read_text().count("installed") >= 15


def test_assert_only_run_skips_bundle_and_deploy_but_captures_the_verdict(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(fake, tmp_path, capsys, **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    assert r.code == 0, r.output
    for state in ("bundle", "verify", "deploy"):
        assert r.step(state)["status"] == "skipped"
    assert r.logged(
        "step ended", step="deploy", outcome="skipped", reason="Skipping deploy (deploy.enabled=false): assert-only run"
    )
    assert not (r.work / "bundle").exists()
    assert json.loads(r.result("aicr-validate-result", "ctrf.json"))["results"]["summary"]["tests"] >= 1


def test_component_failure_without_best_effort_fails_with_deploy_code(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_DEPLOY__FLAGS="--retries 0",
        FAKE_AICR_DEPLOY_FAIL="gpu-operator",
    )
    assert r.code == 1
    assert r.step("deploy")["status"] == "failed"
    assert "AICR install FAILED (deploy.sh exit 1)" in str(r.step("deploy")["message"])
    assert "failed (gpu-operator)" in str(r.step("deploy")["message"]), "the reason names the failed component"
    assert r.step("validate")["status"] == "skipped", "anchor R-24: no validation after a failed deploy"
    assert r.termination.startswith("Failed (exit 1): deploy failed")


def test_best_effort_failure_report_warns_and_continues(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(fake, tmp_path, capsys, **VALIDATE, FAKE_AICR_DEPLOY_FAIL="gpu-operator")
    assert r.code == 0, r.output
    assert r.step("deploy")["status"] == "warned"
    assert r.step("validate")["status"] == "succeeded"
    assert any("deploy" in w for w in r.report()["warnings"])


@pytest.mark.parametrize(("flags", "code", "status"), [("--best-effort", 0, "warned"), ("", 2, "failed")])
def test_dra_deferral_is_tolerated_only_with_best_effort(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *, flags: str, code: int, status: str
) -> None:
    r = run(fake, tmp_path, capsys, AICR_RUNNER_DEPLOY__FLAGS=flags, FAKE_AICR_DEPLOY_DRA_DEFERRED="1")
    assert r.code == code, r.output
    assert r.step("deploy")["status"] == status


@pytest.mark.parametrize(("fail_on_error", "code"), [("true", 8), ("false", 0)])
def test_failed_validation_is_captured_before_the_gate(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_on_error: str, code: int
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR=fail_on_error,
        FAKE_AICR_VALIDATE_RESULT="fail",
    )
    assert r.code == code
    ctrf = json.loads(r.result("aicr-validate-result", "ctrf.json"))
    assert ctrf["results"]["summary"]["failed"] >= 1, "the failing verdict is stored either way"
    assert r.result("aicr-evidence-bundle", "evidence.tgz")
    if code:
        assert "Validation FAILED (exit 8)" in r.termination


@pytest.mark.parametrize(
    ("fail_on_error", "code", "phase"), [("true", 32, "Failed"), ("false", 0, "SucceededInconclusive")]
)
def test_a_validation_where_every_check_skipped_is_never_green(  # noqa: PLR0917 - fixtures and a row
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_on_error: str, code: int, phase: str
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR=fail_on_error,
        FAKE_AICR_VALIDATE_RESULT="skip",
    )
    assert r.code == code, r.output
    report = r.report()
    assert (report["phase"], report["exitCode"]) == (phase, code)
    validate = r.step("validate")
    assert validate["classification"] == "validation-inconclusive"
    assert validate["message"].startswith("validation inconclusive: no check ran: 4 skipped (skipped: operator-health")
    assert "(no GPU nodes found in the cluster)" in validate["message"]
    assert r.termination.startswith(f"{phase} (exit {code}): ")
    assert (r.results / "aicr-run-status" / "summary.txt").read_text().startswith(f"phase: {phase}\n")
    ctrf = json.loads(r.result("aicr-validate-result", "ctrf.json"))
    assert ctrf["results"]["summary"]["skipped"] == 4, "the report is captured either way"


def test_a_crashed_check_fails_the_run_although_aicr_0_11_exits_0(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        AICR_RUNNER_VALIDATE__ENABLED="true",  # no evidence: 0.11 cannot emit it
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true",
        FAKE_AICR_VERSION="0.11.1",
        FAKE_AICR_VALIDATE_RESULT="other",
    )
    assert r.code == 8, r.output
    assert r.logged("aicr validate exited", step="validate", exit_code=0)
    assert r.termination.startswith("Failed (exit 8): Validation FAILED (exit 8): validation failed: 1 crashed")
    assert "aicr validate exited 0 all the same" in r.step("validate")["message"]


def test_publish_failure_gate(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__PUBLISH__ENABLED="true",
        AICR_RUNNER_VALIDATE__PUBLISH__MODE="unsigned",
        AICR_RUNNER_VALIDATE__PUBLISH__REF="reg.example/e",
        AICR_RUNNER_VALIDATE__PUBLISH__FAIL_ON_ERROR="true",
        FAKE_AICR_PUBLISH_FAIL="unauthorized",
    )
    assert r.code == 4
    assert "Evidence publish FAILED (exit 4)" in r.termination
    assert r.step("capture-evidence")["status"] == "succeeded", "evidence is captured before the gate"


def test_rejected_criteria_list_supported_combinations_everywhere(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        AICR_RUNNER_CRITERIA__SERVICE="k0s",
        AICR_RUNNER_CRITERIA__ACCELERATOR="h200",
        AICR_RUNNER_CRITERIA__OS="",
    )
    assert r.code == 2
    supported = r.report()["supportedCombinations"]
    assert supported, "aicr's list of supported combinations reaches the status report"
    assert "os=ubuntu" in " ".join(supported)
    assert "supported combinations:" in r.termination
    assert r.logged("CRITERIA REJECTED", step="recipe", level="error")
    assert r.step("bundle")["status"] == "skipped"
    assert not (r.work / "bundle").exists()


def test_unmet_expectations_stop_before_bundle(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        AICR_RUNNER_RECIPE__EXPECT__MIN_COMPONENTS="20",
        AICR_RUNNER_RECIPE__EXPECT__COMPONENTS='["gpu-operator", "no-such-thing"]',
    )
    assert r.code == 25
    message = str(r.step("check-recipe")["message"])
    assert "no-such-thing" in message
    assert "15" in message, "the message says what resolved"
    assert r.step("bundle")["status"] == "skipped"
    assert b"kind: RecipeResult" in r.result("aicr-recipe", "recipe.yaml"), "the recipe is still captured"


def test_thin_resolution_is_a_warning(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(
        fake,
        tmp_path,
        capsys,
        AICR_RUNNER_CRITERIA__SERVICE="",
        AICR_RUNNER_CRITERIA__INTENT="",
        AICR_RUNNER_CRITERIA__OS="",
        AICR_RUNNER_CRITERIA__ACCELERATOR="a100",
    )
    assert r.code == 0, r.output
    assert r.step("check-recipe")["status"] == "warned"
    assert r.report()["warnings"]


def test_a_bundle_changed_before_verify_never_deploys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = install_fake_aicr(tmp_path / "real-bin")
    wrapper = tmp_path / "aicr"
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        f'"{real}" "$@"; rc=$?\n'
        'if [[ " $* " == *" bundle "* && $rc == 0 ]]; then\n'
        '  out=""; prev=""; for a in "$@"; do [[ $prev == --output || $prev == -o ]] && out=$a; prev=$a; done\n'
        '  echo "# injected" >> "$out/deploy.sh"\n'
        "fi\nexit $rc\n"
    )
    wrapper.chmod(0o755)
    r = run(wrapper, tmp_path, capsys)
    assert r.code == 4
    assert r.step("verify")["status"] == "failed"
    assert "Bundle verification FAILED (exit 4)" in str(r.step("verify")["message"])
    assert r.step("deploy")["status"] == "skipped"
    assert not (r.work / "logs" / "deploy.log").exists()


def test_credentials_reach_only_the_publish_call_and_never_any_output(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password = "pub-s3cret-Pa55"
    token = "eyJ-identity-token-abc123"
    auth = base64.b64encode(f"robot:{password}".encode()).decode()
    registry_dir = tmp_path / "publish-auth"
    registry_dir.mkdir()
    (registry_dir / "config.json").write_text(json.dumps({"auths": {"reg.example": {"auth": auth}}}))
    token_file = tmp_path / "token"
    token_file.write_text(token)
    env_log = tmp_path / "env.jsonl"
    # A careless tool echoing what it was given: redaction must still hold.
    leaky = tmp_path / "leaky-aicr"
    leaky.write_text(
        "#!/usr/bin/env bash\n"
        'echo "debug: token=${COSIGN_IDENTITY_TOKEN:-none}" >&2\n'
        'if [[ -n "${DOCKER_CONFIG:-}" ]]; then cat "$DOCKER_CONFIG/config.json" >&2; fi\n'
        f'exec "{fake}" "$@"\n'
    )
    leaky.chmod(0o755)
    r = run(
        leaky,
        tmp_path,
        capsys,
        **VALIDATE,
        AICR_RUNNER_VALIDATE__PUBLISH__ENABLED="true",
        AICR_RUNNER_VALIDATE__PUBLISH__REF="reg.example/acme/evidence",
        AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR=str(registry_dir),
        AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE=str(token_file),
        FAKE_AICR_ENV_LOG=str(env_log),
    )
    assert r.code == 0, r.output
    calls = [json.loads(line) for line in env_log.read_text().splitlines()]
    publish = [c for c in calls if c["argv"][:2] == ["evidence", "publish"] or "publish" in c["argv"]]
    others = [c for c in calls if c not in publish]
    assert len(publish) == 1
    assert publish[0]["env"].get("DOCKER_CONFIG") == str(registry_dir)
    assert publish[0]["env"].get("COSIGN_IDENTITY_TOKEN") == token
    assert "--identity-token" not in publish[0]["argv"], "argv is visible in /proc and logs"
    assert others, "recipe, bundle, verify and validate were recorded"
    for call in calls:
        assert not any(k.startswith("AICR_RUNNER_") for k in call["env"]), call
    for call in others:
        assert "DOCKER_CONFIG" not in call["env"]
        assert "COSIGN_IDENTITY_TOKEN" not in call["env"]
    captured = [r.output, r.termination]
    captured += [p.read_text(errors="replace") for p in r.work.rglob("*.log")]
    captured += [p.read_text(errors="replace") for p in r.results.rglob("*") if p.is_file()]
    for text in captured:
        for secret in (password, token, auth):
            assert secret not in text


def test_over_budget_evidence_keeps_the_pointer(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(fake, tmp_path, capsys, **VALIDATE, FAKE_AICR_EVIDENCE_BYTES=str(1_500_000))
    assert r.code == 0, r.output
    assert r.step("capture-evidence")["status"] == "warned"
    assert "pointer only" in str(r.step("capture-evidence")["message"])
    assert (r.results / "aicr-evidence-bundle" / "pointer.yaml").is_file()
    assert not (r.results / "aicr-evidence-bundle" / "evidence.tgz").exists()


def test_plan_prints_the_component_table(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = clean_env(tmp_path)
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=env)
    out = capsys.readouterr().out
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("NAME"))
    assert header.split() == ["NAME", "VERSION", "NAMESPACE", "CHART"]
    assert "gpu-operator" in out
    assert (tmp_path / "plan" / "aicr-recipe" / "recipe.yaml").is_file()
    assert (tmp_path / "work" / "bundle" / "deploy.sh").is_file(), "plan renders the bundle"
    assert (tmp_path / "work" / "logs" / "verify.log").is_file(), "and verifies it"
    assert not (tmp_path / "work" / "logs" / "deploy.log").exists(), "plan never deploys"


def test_plan_with_rejected_criteria_prints_the_supported_combinations(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = clean_env(tmp_path)
    code = main(
        [
            "plan",
            "--aicr-binary",
            str(fake),
            "--output",
            str(tmp_path / "plan"),
            "--service",
            "k0s",
            "--accelerator",
            "h200",
            "--os",
            "",
        ],
        environ=env,
    )
    out = capsys.readouterr().out
    assert code == 2
    assert "criteria rejected; supported combinations:" in out
    assert "os=ubuntu" in out


def test_sigterm_during_deploy_gives_helm_its_grace_then_exits_143(fake: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path, FAKE_AICR_DEPLOY_SLEEP="60", AICR_RUNNER_SHUTDOWN_GRACE_SECONDS="1")
    results = tmp_path / "results"
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    with pod_log.open("wb") as out_file:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(results)],
            env=env,
            stdout=out_file,
            stderr=subprocess.STDOUT,
        )
    status = results / "aicr-run-status" / "report.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # deploy.sh is running (its relayed line is in the pod log) before the signal.
        if "simulating a slow install" in pod_log.read_text(errors="replace"):
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("deploy never started")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 143, pod_log.read_text()[-2000:]
    assert time.monotonic() - sent < 15, "bounded: grace 1 s, then TERM, then KILL"
    report = json.loads(status.read_text())
    deploy = next(s for s in report["steps"] if s["state"] == "deploy")
    assert deploy["status"] == "interrupted"
    assert report["phase"] == "Interrupted"
    assert next(s for s in report["steps"] if s["state"] == "validate")["status"] == "skipped"


def test_a_relative_aicr_binary_still_runs_from_the_work_dir(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(fake.parent)
    env = clean_env(tmp_path)
    code = main(["plan", "--aicr-binary", fake.name, "--output", str(tmp_path / "plan")], environ=env)
    assert code == 0, capsys.readouterr().err[-2000:]


def test_sigterm_mid_deploy_stops_deploy_sh_at_the_next_safe_point_and_is_never_green(
    fake: Path, tmp_path: Path
) -> None:
    env = clean_env(tmp_path, **VALIDATE, FAKE_AICR_DEPLOY_SLEEP="60", AICR_RUNNER_SHUTDOWN_GRACE_SECONDS="30")
    results = tmp_path / "results"
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    with pod_log.open("wb") as out_file:
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(results)],
            env=env,
            stdout=out_file,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while "simulating a slow install" not in pod_log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "deploy never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    report = json.loads((results / "aicr-run-status" / "report.json").read_text())
    steps = {s["state"]: s for s in report["steps"]}
    # No helm operation is in flight during the stand-in's slow phase, so the helm
    # guard stops deploy.sh there (between helm operations) instead of waiting.
    assert steps["deploy"]["status"] == "interrupted", "deploy.sh is stopped at the next safe point"
    assert steps["validate"]["status"] == "skipped", "no new work after SIGTERM"
    assert proc.returncode == 143, "the run did not finish, so it is not green"
    assert report["phase"] == "Interrupted"


def test_plan_reads_a_chart_values_file(fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("service: k0s\naccelerator: h200\nintent: training\n")
    env = {k: v for k, v in clean_env(tmp_path).items() if not k.startswith("AICR_RUNNER_CRITERIA__")}
    args = ["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan"), "--values", str(values)]
    assert main(args, environ=env) == 2, "the values' criteria are used: k0s training needs os ubuntu"
    assert "os=ubuntu" in capsys.readouterr().out
    values.write_text("service: k0s\naccelerator: h200\nintent: training\nos: ubuntu\n")
    assert main(args, environ=env) == 0
    assert "gpu-operator" in capsys.readouterr().out


def test_plan_refuses_a_values_file_that_is_not_a_mapping(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("- just\n- a list\n")
    code = main(["plan", "--aicr-binary", str(fake), "--values", str(values)], environ=clean_env(tmp_path))
    err = capsys.readouterr().err
    assert code == 2
    assert f"--values {values}: must be a mapping of chart values, found list" in err
    assert "Traceback" not in err


def test_the_status_shows_per_component_progress_while_deploy_sh_is_still_running(fake: Path, tmp_path: Path) -> None:
    """deploy.sh holds gpu-operator's install (its start line printed) until the test,
    having seen the progress in the status report, writes to the FIFO."""
    fifo = tmp_path / "release-deploy"
    os.mkfifo(fifo)
    env = clean_env(
        tmp_path,
        FAKE_AICR_DEPLOY_FAIL="nfd",
        FAKE_AICR_DEPLOY_HOLD_AT="gpu-operator",
        FAKE_AICR_DEPLOY_HOLD_FIFO=str(fifo),
    )
    results = tmp_path / "results"
    status = results / "aicr-run-status" / "report.json"
    runner = Path(sys.executable).parent / "aicr-runner"
    with (tmp_path / "pod.log").open("wb") as out_file:
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(results)],
            env=env,
            stdout=out_file,
            stderr=subprocess.STDOUT,
        )
    try:
        progress = wait_for_progress(status, lambda p: p["current"] == "gpu-operator")
        names = [row["name"] for row in progress["components"]]
        held = names.index("gpu-operator")
        assert progress["done"] == held, "every component before the held one has ended"
        assert progress["failed"] == 1
        assert progress["total"] == 15
        rows = {row["name"]: row for row in progress["components"]}
        assert rows["nfd"]["status"] == "failed"
        assert rows["gpu-operator"] == {
            "name": "gpu-operator",
            "namespace": "gpu-operator",
            "status": "running",
            "attempts": 1,
            "durationSeconds": None,
        }
        assert proc.poll() is None, "deploy.sh is still running"
        summary = (results / "aicr-run-status" / "summary.txt").read_text()
        assert f"deploy progress: {held}/15 done ({held - 1} installed, 1 failed), current: gpu-operator" in summary
    finally:
        with fifo.open("w") as release:
            release.write("go\n")
        proc.wait(timeout=120)
    assert proc.returncode == 0
    report = json.loads(status.read_text())
    assert report["phase"] == "SucceededWithFailures"
    assert report["failedComponents"] == ["nfd"]
    deploy = next(s for s in report["steps"] if s["state"] == "deploy")
    assert deploy["progress"]["done"] == 15
    assert deploy["progress"]["installed"] == 14
    assert all(row["durationSeconds"] is not None for row in deploy["progress"]["components"])
    termination = (tmp_path / "termination-log").read_text()
    assert termination.startswith("SucceededWithFailures (exit 0): AICR Job complete, but components failed: nfd")


def wait_for_progress(status: Path, seen: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The deploy step's progress in the status report once ``seen`` holds (a file
    the runner replaces atomically; the run is held, so this is bounded by the
    publisher's interval, not by a guess)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if status.is_file():
            report = json.loads(status.read_text())
            deploy = next(s for s in report["steps"] if s["state"] == "deploy")
            if deploy.get("progress") and seen(deploy["progress"]):
                return dict(deploy["progress"])
        time.sleep(0.1)
    raise AssertionError(f"progress never seen: {status.read_text() if status.is_file() else 'no report'}")


def test_failed_components_fail_the_run_with_the_gate_after_validation(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(
        fake,
        tmp_path,
        capsys,
        **VALIDATE,
        FAKE_AICR_DEPLOY_FAIL="nfd",
        AICR_RUNNER_DEPLOY__FAIL_ON_COMPONENT_FAILURE="true",
    )
    assert result.code == 1
    assert result.step("validate")["status"] == "succeeded"
    assert result.step("capture-verdict")["status"] == "succeeded"
    assert result.report()["phase"] == "Failed"
    assert result.termination.startswith(
        "Failed (exit 1): Components FAILED (nfd) and deploy.failOnComponentFailure is set"
    )
