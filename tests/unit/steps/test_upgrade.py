"""The upgrade-check step between verify and the Lease: each install of a release
against the ConfigMaps the previous one left, ``aicr upgrade-check`` answered by
the contract's fake aicr (a real child process), its report kept everywhere."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.aicr.capabilities import AicrVersion
from aicr_runner.children.process import ProcessResult
from aicr_runner.errors import CaptureError, ExitCode
from aicr_runner.fleet.rows import rows_from_configmaps, rows_from_reports
from aicr_runner.kube.events import JobEvents
from aicr_runner.kube.report_writer import ReportTarget
from aicr_runner.kube.sink import ConfigMapSink
from aicr_runner.run.machine import TRANSITIONS, Machine, State, StepResult, final_exit
from aicr_runner.run.report import StepStatus
from aicr_runner.steps import upgrade, verdict_report
from aicr_runner.steps.context import RunContext
from aicr_runner.steps.table import Steps
from tests.fake_aicr import install_fake_aicr
from tests.support.fakes import FakeKubeApi
from tests.unit.aicr.test_upgrade_check import recipe
from tests.unit.kube.test_report_writer import BOTH, NS, REPORT, FakeRequests
from tests.unit.steps.test_steps import StubProcesses, context, rewired

OLD = recipe("v1.1.0", gpu_operator="v25.10.1", nfd="0.17.3", cert_manager="v1.17.2")
NEW = recipe("v1.2.0", gpu_operator="v26.3.3", nfd="v0.18.2", cert_manager="v1.17.2")
BLOCKED = {"gpu-operator": {"verdict": "blocked", "earliestFrom": "v25.10.2", "reference": "UPGRADING.md"}}
MANUAL = {"nfd": {"verdict": "manual", "steps": ["relabel the GPU nodes"]}}
SAFE = {"gpu-operator": {"verdict": "safe"}, "nfd": {"verdict": "safe"}}


@dataclass
class FakeAicr(StubProcesses):
    """``aicr upgrade-check`` answered by the fake aicr; everything else by the stub."""

    launcher: Path = Path()
    transitions: Mapping[str, Any] | None = None

    def run(self, argv: Sequence[str], **kwargs: Any) -> ProcessResult:
        if "upgrade-check" not in argv:
            return super().run(argv, **kwargs)
        self.calls.append(list(argv))
        env = {"PATH": os.environ["PATH"], "FAKE_AICR_UPGRADE_TRANSITIONS": json.dumps(self.transitions or {})}
        proc = subprocess.run([str(self.launcher), *argv[1:]], env=env, capture_output=True, check=False, timeout=60)
        kwargs["log_path"].write_bytes(proc.stdout + proc.stderr)
        return ProcessResult(exit_code=proc.returncode, log_path=kwargs["log_path"], interrupted=False)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-aicr"))


@dataclass
class Release:
    """One release's cluster across installs: its ConfigMaps, its Events, its report."""

    tmp_path: Path
    launcher: Path
    api: FakeKubeApi
    told: list[tuple[str, str]]
    requests: FakeRequests
    runs: int = 0

    def install(
        self, raw: bytes, transitions: Mapping[str, Any] | None = None, aicr: str = "1.2.0", **env: str
    ) -> RunContext:
        """Resolve ``raw``, capture it and run the upgrade check, as a run gets there."""
        self.runs += 1
        processes = FakeAicr(launcher=self.launcher, transitions=transitions)
        env = {"AICR_RUNNER_NAMESPACE": NS, "AICR_RUNNER_REPORTS__NAME": "aicr-gpu", **env}
        base = context(self.tmp_path / f"run-{self.runs}", processes, sink=ConfigMapSink(self.api, NS), **env)
        ctx = rewired(
            base,
            on_upgrade_check=lambda reason, note: self.told.append((reason, note)),
            report_target=ReportTarget(self.requests, NS),
        )
        ctx.findings.aicr_version = AicrVersion.parse(f"aicr version {aicr}")
        ctx.recipe_path.parent.mkdir(parents=True, exist_ok=True)
        ctx.recipe_path.write_bytes(raw)
        from aicr_runner.aicr.recipe import load_recipe

        ctx.findings.recipe_summary = load_recipe(ctx.recipe_path)
        functions = Steps(ctx).functions()
        assert functions[State.CAPTURE_RECIPE]().went_well
        ctx.report.step(State.UPGRADE_CHECK.value).status = record(functions[State.UPGRADE_CHECK](), ctx)
        return ctx

    def deployed(self, ctx: RunContext) -> None:
        """deploy.sh ran: the captured recipe is now the installed one."""
        upgrade.record_installed(ctx)

    def recipe_configmap(self) -> dict[str, str]:
        data: dict[str, str] = dict(self.api.objects[(NS, "aicr-recipe")]["data"])  # type: ignore[call-overload]
        return data

    def check_configmap(self) -> dict[str, Any]:
        data = self.api.objects[(NS, "aicr-recipe-upgrade-check")]["data"]
        return dict(json.loads(data["upgrade-check.json"]))  # type: ignore[index]


def record(result: StepResult, ctx: RunContext) -> StepStatus:
    step = ctx.report.step(State.UPGRADE_CHECK.value)
    step.exit_code, step.message, step.classification = result.exit_code, result.reason, result.classification
    return result.status


@pytest.fixture
def release(tmp_path: Path, launcher: Path) -> Release:
    return Release(tmp_path, launcher, FakeKubeApi(), [], FakeRequests(BOTH))


def outcome(ctx: RunContext) -> tuple[StepStatus, int, str]:
    step = ctx.report.step(State.UPGRADE_CHECK.value)
    return step.status, step.exit_code or 0, step.message


def test_a_first_install_and_an_unchanged_recipe_run_no_check(release: Release) -> None:
    first = release.install(OLD, BLOCKED)
    assert outcome(first)[0] is StepStatus.SKIPPED
    assert "first install" in outcome(first)[2]
    release.deployed(first)
    same = release.install(OLD, BLOCKED)
    assert outcome(same)[0] is StepStatus.SKIPPED
    assert "recipe unchanged since the last install" in outcome(same)[2]
    assert not [c for c in same.externals.processes.calls if "upgrade-check" in c]  # type: ignore[attr-defined]
    assert same.report.upgrade_check == {}
    assert release.told == []


def test_a_blocked_move_stops_before_deploy_and_the_report_is_kept_everywhere(release: Release) -> None:
    release.deployed(release.install(OLD))
    ctx = release.install(NEW, {**BLOCKED, **MANUAL}, AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE='["nfd:0.17.3:v0.18.2"]')
    status, code, message = outcome(ctx)
    assert (status, code) == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    assert ctx.report.step(State.UPGRADE_CHECK.value).classification == "upgrade-blocked"
    assert message.startswith("stopped before deploy: upgrade blocked: gpu-operator v25.10.1 → v26.3.3")
    assert "upgrade to v25.10.2 (the earliest recorded starting point) first" in message
    # aicr was asked as the contract says: from the installed recipe, to the new one, helm, JSON.
    [argv] = [c for c in ctx.externals.processes.calls if "upgrade-check" in c]  # type: ignore[attr-defined]
    assert argv[argv.index("--deployer") + 1] == "helm"
    assert argv[argv.index("--format") + 1] == "json"
    assert Path(argv[argv.index("--from") + 1]).read_bytes() == OLD
    # the Warning Event names the components
    assert [reason for reason, _ in release.told] == ["UpgradeStopped"]
    assert "gpu-operator v25.10.1 → v26.3.3" in release.told[0][1]
    # the ConfigMap beside the recipe
    kept = release.check_configmap()
    verdicts = {c["component"]: (c["verdict"], c["action"]) for c in kept["components"]}
    assert verdicts == {
        "cert-manager": ("safe", "go"),
        "gpu-operator": ("blocked", "stop"),
        "nfd": ("manual", "go"),
    }
    assert kept["fromAicrVersion"] == "v1.1.0"
    assert kept["toAicrVersion"] == "v1.2.0"
    # the run summary: the moves and the table
    summary = ctx.report.summary_text()
    assert "upgrade: aicr v1.1.0 → v1.2.0; gpu-operator v25.10.1 → v26.3.3, nfd 0.17.3 → v0.18.2" in summary
    assert "gpu-operator  v25.10.1  v26.3.3  blocked" in summary
    # the verdict report: one result per component, fail for blocked, warn for manual
    verdict_report.write_after_stopped_upgrade(ctx)
    results = release.requests.objects[REPORT]["results"]
    assert sorted((r["policy"], r["category"], r["result"]) for r in results) == [
        ("cert-manager", "upgrade-check", "pass"),
        ("gpu-operator", "upgrade-check", "fail"),
        ("nfd", "upgrade-check", "warn"),
    ]
    # the count the chart's AicrUpgradeBlocked alert reads (kube-state-metrics)
    assert release.requests.objects[REPORT]["metadata"]["annotations"]["aicr.nvidia.com/upgrade-blocked"] == "1"
    # the fleet row, from the report and from the status ConfigMap
    [row] = rows_from_reports("prod", "Report", [release.requests.objects[REPORT]])
    assert row.detail == "upgrade blocked: gpu-operator v25.10.1 → v26.3.3"
    assert row.phase == "Failed"
    status_cm = {
        "metadata": {"namespace": NS, "name": "aicr-run-status"},
        "data": {"report.json": ctx.report.to_json()},
    }
    assert rows_from_configmaps("prod", [status_cm], set())[0].detail.startswith("upgrade blocked: gpu-operator")


def test_a_stopped_upgrade_re_run_still_crosses_from_what_is_installed(release: Release) -> None:
    release.deployed(release.install(OLD))
    assert outcome(release.install(NEW, BLOCKED))[0] is StepStatus.FAILED
    assert release.recipe_configmap()[upgrade.INSTALLED_KEY].encode() == OLD
    # The same values again (a Job re-created, a GitOps re-sync): never "unchanged".
    again = release.install(NEW, BLOCKED)
    assert outcome(again)[:2] == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    # Once a deploy ran, the new recipe is the installed one.
    ok = release.install(NEW, SAFE)
    assert outcome(ok)[0] is StepStatus.SUCCEEDED
    release.deployed(ok)
    assert release.recipe_configmap()[upgrade.INSTALLED_KEY] == ""
    assert outcome(release.install(NEW, BLOCKED))[0] is StepStatus.SKIPPED


def test_a_manual_move_stops_unless_that_exact_move_is_acknowledged(release: Release) -> None:
    release.deployed(release.install(OLD))
    stopped = release.install(NEW, {**SAFE, **MANUAL}, AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE='["nfd:0.17.3:v0.19.0"]')
    status, code, message = outcome(stopped)
    assert (status, code) == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    assert "upgrade needs manual steps: nfd 0.17.3 → v0.18.2" in message
    assert "relabel the GPU nodes" in message
    went = release.install(NEW, {**SAFE, **MANUAL}, AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE='["nfd:0.17.3:v0.18.2"]')
    status, _, message = outcome(went)
    assert status is StepStatus.SUCCEEDED, message
    assert "1 manual move(s) acknowledged" in message
    assert went.upgrade_report_path.is_file(), "kept for the evidence ConfigMap"


@pytest.mark.parametrize(("policy", "status"), [("stop", StepStatus.FAILED), ("warn", StepStatus.WARNED)])
def test_an_unknown_move_follows_the_policy(release: Release, policy: str, status: StepStatus) -> None:
    release.deployed(release.install(OLD))
    ctx = release.install(NEW, {"nfd": {"verdict": "safe"}}, AICR_RUNNER_UPGRADE_CHECK__ON_UNKNOWN=policy)
    assert outcome(ctx)[0] is status
    assert "gpu-operator v25.10.1 → v26.3.3" in outcome(ctx)[2]
    assert release.told[-1][0] == ("UpgradeStopped" if policy == "stop" else "UpgradeUnknownComponents")


def test_aicr_0_11_1_reports_the_crossing_as_not_assessed(release: Release) -> None:
    release.deployed(release.install(OLD, aicr="0.11.1"))
    ctx = release.install(NEW, aicr="0.11.1")
    status, code, message = outcome(ctx)
    assert (status, code) == (StepStatus.WARNED, 0)
    assert message.startswith("aicr v0.11.1 has no upgrade-check: this crossing was not assessed")
    assert "gpu-operator v25.10.1 → v26.3.3" in message
    assert not [c for c in ctx.externals.processes.calls if "upgrade-check" in c]  # type: ignore[attr-defined]
    assert release.told == [("UpgradeNotAssessed", message)]
    assert {c["verdict"] for c in release.check_configmap()["components"]} == {"not-assessed"}
    required = release.install(NEW, aicr="0.11.1", AICR_RUNNER_UPGRADE_CHECK__REQUIRE_ASSESSMENT="true")
    status, code, message = outcome(required)
    assert (status, code) == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    assert "upgradeCheck.requireAssessment is set" in message


def test_an_aicr_that_fails_or_writes_no_report_is_not_a_pass(release: Release, tmp_path: Path) -> None:
    release.deployed(release.install(OLD))
    broken = tmp_path / "broken-aicr"
    broken.write_text("#!/bin/sh\nexit 0\n")
    broken.chmod(0o755)
    release.launcher = broken
    status, code, message = outcome(release.install(NEW))
    assert (status, code) == (StepStatus.FAILED, ExitCode.AICR_CONTRACT_BROKEN), message
    broken.write_text("#!/bin/sh\nexit 8\n")
    status, code, message = outcome(release.install(NEW))
    assert (status, code) == (StepStatus.FAILED, 8)
    assert "aicr upgrade-check failed (exit 8)" in message


def test_the_step_sits_between_verify_and_the_lease_and_a_stop_ends_the_run_with_exit_35() -> None:
    assert TRANSITIONS[State.VERIFY] == (State.UPGRADE_CHECK, State.DONE)
    assert TRANSITIONS[State.UPGRADE_CHECK] == (State.LEASE, State.VERDICT_REPORT)
    ran: list[State] = []

    def stub(state: State) -> Any:
        def run() -> StepResult:
            ran.append(state)
            if state is State.UPGRADE_CHECK:
                return StepResult.failed(35, "stopped before deploy: upgrade blocked: x", "upgrade-blocked")
            return StepResult.ok()

        return run

    report = Machine.new_report(runner_version="t", aicr_version="v1.2.0", criteria={})
    machine = Machine({s: stub(s) for s in TRANSITIONS}, report, on_change=lambda r: None, interrupted=lambda: False)
    machine.run()
    assert ran[-2:] == [State.UPGRADE_CHECK, State.VERDICT_REPORT], "a stopped upgrade is still reported"
    assert State.LEASE not in ran
    assert State.DEPLOY not in ran
    code, message = final_exit(report, validate_gate=False, publish_gate=False)
    assert (code, message) == (35, "upgrade check: stopped before deploy: upgrade blocked: x")


def test_the_event_is_a_warning_on_the_job() -> None:
    api = FakeKubeApi()
    api.job_uids[("ns", "job")] = "uid-1"
    JobEvents(api, namespace="ns", job="job", pod="pod").upgrade_checked("UpgradeStopped", "upgrade blocked: a")
    [(_, body)] = api.job_events
    assert (body["type"], body["reason"], body["note"]) == ("Warning", "UpgradeStopped", "upgrade blocked: a")
    assert body["action"] == "UpgradeCheck"


def test_a_re_validation_validates_what_is_installed_not_the_refused_recipe(tmp_path: Path) -> None:
    from aicr_runner.steps import revalidate

    mounted = tmp_path / "recipe-configmap"
    mounted.mkdir()
    (mounted / "recipe.yaml").write_bytes(NEW)
    ctx = rewired(context(tmp_path / "work", StubProcesses()), recipe_file=mounted / "recipe.yaml")
    assert revalidate.recorded_recipe(ctx).went_well
    assert ctx.recipe_path.read_bytes() == NEW
    (mounted / upgrade.INSTALLED_KEY).write_bytes(b"")  # deployed: recipe.yaml is the installed one
    assert revalidate.recorded_recipe(ctx).went_well
    assert ctx.recipe_path.read_bytes() == NEW
    (mounted / upgrade.INSTALLED_KEY).write_bytes(OLD)  # an upgrade the check stopped left both
    result = revalidate.recorded_recipe(ctx)
    assert result.went_well, result.reason
    assert ctx.recipe_path.read_bytes() == OLD
    assert str(mounted / upgrade.INSTALLED_KEY) in result.reason
    # The same, the installed recipe stored compressed (over the ConfigMap's budget).
    import gzip

    (mounted / upgrade.INSTALLED_KEY).unlink()
    (mounted / f"{upgrade.INSTALLED_KEY}.gz").write_bytes(gzip.compress(BIG_OLD))
    result = revalidate.recorded_recipe(ctx)
    assert result.went_well, result.reason
    assert ctx.recipe_path.read_bytes() == BIG_OLD


def test_in_a_results_directory_the_installed_recipe_is_dropped_once_deployed(tmp_path: Path, launcher: Path) -> None:
    """``run --results-dir``: the directory holds what a ConfigMap would, key for key."""
    from aicr_runner.kube.sink import DirectorySink

    sink = DirectorySink(tmp_path / "results")
    sink.put("aicr-recipe", data={"recipe.yaml": OLD.decode(), "summary.txt": "x"})
    processes = FakeAicr(launcher=launcher, transitions=SAFE)
    ctx = context(tmp_path / "work", processes, sink=sink)
    ctx.recipe_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.findings.aicr_version = AicrVersion.parse("aicr version 1.2.0")
    ctx.recipe_path.write_bytes(NEW)
    from aicr_runner.aicr.recipe import load_recipe

    ctx.findings.recipe_summary = load_recipe(ctx.recipe_path)
    functions = Steps(ctx).functions()
    assert functions[State.CAPTURE_RECIPE]().went_well
    assert (tmp_path / "results" / "aicr-recipe" / upgrade.INSTALLED_KEY).read_bytes() == OLD
    assert functions[State.UPGRADE_CHECK]().status is StepStatus.SUCCEEDED
    upgrade.record_installed(ctx)
    assert (tmp_path / "results" / "aicr-recipe" / upgrade.INSTALLED_KEY).read_bytes() == b""
    assert (tmp_path / "results" / "aicr-recipe" / "recipe.yaml").read_bytes() == NEW


#: A recipe over the ConfigMap's budget: the capture stores it gzip-compressed (recipe.yaml.gz).
PADDING = b"\n# " + b"x" * 1_000_000 + b"\n"
BIG_OLD, BIG_NEW = OLD + PADDING, NEW + PADDING


def recipe_binary(release: Release) -> dict[str, bytes]:
    stored: dict[str, bytes] = dict(release.api.objects[(NS, "aicr-recipe")]["binaryData"])  # type: ignore[call-overload]
    return stored


def test_a_recipe_stored_compressed_is_still_crossed_from(release: Release) -> None:
    release.deployed(release.install(BIG_OLD))
    assert "recipe.yaml.gz" in recipe_binary(release)
    stopped = release.install(BIG_NEW, BLOCKED)
    assert outcome(stopped)[:2] == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    # The refused recipe is recorded; the installed one kept beside it, compressed too.
    assert recipe_binary(release)[f"{upgrade.INSTALLED_KEY}.gz"]
    again = release.install(BIG_NEW, BLOCKED)
    assert outcome(again)[:2] == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
    ok = release.install(BIG_NEW, SAFE)
    assert outcome(ok)[0] is StepStatus.SUCCEEDED
    release.deployed(ok)
    assert recipe_binary(release)[f"{upgrade.INSTALLED_KEY}.gz"] == b""
    assert outcome(release.install(BIG_NEW, BLOCKED))[0] is StepStatus.SKIPPED


@pytest.mark.parametrize("policy", ["stop", "warn"])
def test_a_recorded_recipe_that_cannot_be_read_is_an_unknown_crossing_never_a_first_install(
    release: Release, policy: str
) -> None:
    release.deployed(release.install(BIG_OLD))
    release.api.objects[(NS, "aicr-recipe")]["binaryData"] = {"recipe.yaml.gz": b"\x1f\x8bnot gzip"}
    ctx = release.install(NEW, SAFE, AICR_RUNNER_UPGRADE_CHECK__ON_UNKNOWN=policy)
    status, code, message = outcome(ctx)
    assert ctx.report.step(State.UPGRADE_CHECK.value).classification == "upgrade-unknown"
    assert "the recorded recipe was not read, so what this install crosses is unknown" in message
    assert f"configmap {NS}/aicr-recipe recipe.yaml.gz" in message
    if policy == "stop":
        assert (status, code) == (StepStatus.FAILED, ExitCode.UPGRADE_STOPPED)
        assert release.told[-1][0] == upgrade.STOPPED_REASON
    else:
        assert status is StepStatus.WARNED
        assert release.told[-1][0] == upgrade.UNKNOWN_WARNED_REASON


def test_a_recorded_recipe_the_api_does_not_give_fails_the_check_with_the_apis_exit_code(
    release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    release.deployed(release.install(OLD))

    def unanswered(namespace: str, name: str) -> None:
        raise CaptureError(f"reading ConfigMap {namespace}/{name} failed: gave up after 1 attempt(s)")

    monkeypatch.setattr(release.api, "get_configmap_payload", unanswered)
    ctx = release.install(NEW, SAFE)
    status, code, message = outcome(ctx)
    # Retried by the Job (26 is no FailJob code), never deployed as a first install.
    assert (status, code) == (StepStatus.FAILED, ExitCode.CAPTURE_FAILED)
    assert ctx.report.step(State.UPGRADE_CHECK.value).classification == "upgrade-unread"
    assert message.startswith("the recorded recipe could not be read, so what this install crosses is not known")
    assert f"reading ConfigMap {NS}/aicr-recipe failed" in message
    assert not [c for c in ctx.externals.processes.calls if "upgrade-check" in c]  # type: ignore[attr-defined]
