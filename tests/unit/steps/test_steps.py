"""Steps in isolation, with a stub process runner: the branches whole runs rarely hit."""

from __future__ import annotations

import gzip
import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.children.process import ProcessResult
from aicr_runner.errors import ExitCode
from aicr_runner.kube.sink import CONFIGMAP_BUDGET_BYTES, ConfigMapSink, DirectorySink
from aicr_runner.run.machine import Machine, State, StepResult
from aicr_runner.run.report import StepStatus
from aicr_runner.settings.config import load
from aicr_runner.steps import verdict_report
from aicr_runner.steps.context import Mode, RunConfig, RunContext, RunExternals
from aicr_runner.steps.table import Steps
from tests.support.fakes import FakeKubeApi


@dataclass
class StubProcesses:
    """Answers every call with ``exit_code``; ``effect`` may write files first."""

    exit_code: int = 0
    stopped: bool = False
    effect: Callable[[Sequence[str]], None] | None = None
    lines: list[str] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_block: Callable[[str], None] | None = None,
        safe_stop: object = None,
    ) -> ProcessResult:
        self.calls.append(list(argv))
        if self.effect is not None:
            self.effect(argv)
        lines = self.lines
        if not lines and list(argv[-1:]) == ["--version"]:
            lines = ["aicr version 1.2.0 (commit: abc1234, date: 2026-05-04T00:00:00Z)"]  # as aicr answers
        for line in lines:
            if on_line is not None:
                on_line(line)
            if on_block is not None:
                on_block(line + "\n")
        log_path.write_text("\n".join(lines))
        return ProcessResult(
            exit_code=self.exit_code, log_path=log_path, interrupted=self.stopped, stopped=self.stopped
        )


def context(tmp_path: Path, processes: StubProcesses, sink: object | None = None, **env: str) -> RunContext:
    settings = load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100", "AICR_RUNNER_WORK_DIR": str(tmp_path), **env})
    report = Machine.new_report(runner_version="t", aicr_version="v1.2.0", criteria={})
    ctx = RunContext(
        config=RunConfig(settings=settings, mode=Mode.RUN, environ={}),
        externals=RunExternals(sink=sink or DirectorySink(tmp_path / "results"), processes=processes),  # type: ignore[arg-type]
        report=report,
    )
    ctx.findings.aicr = tmp_path / "aicr"
    return ctx


def rewired(ctx: RunContext, **changes: Any) -> RunContext:
    """``ctx`` with some of its configuration, externals or handlers replaced (by
    field name), its report and findings kept."""

    def taken(part: Any) -> dict[str, Any]:
        names = {f.name for f in fields(part)}
        return {key: changes.pop(key) for key in list(changes) if key in names}

    config = replace(ctx.config, **taken(ctx.config))
    externals = replace(ctx.externals, **taken(ctx.externals))
    handlers = replace(ctx.handlers, **taken(ctx.handlers))
    assert not changes, f"no such part of a run: {sorted(changes)}"
    return replace(ctx, config=config, externals=externals, handlers=handlers)


def validated(ctx: RunContext, exit_code: int) -> None:
    """Record that validate ran with ``exit_code``, as the machine would."""
    record = ctx.report.step(State.VALIDATE.value)
    record.status = StepStatus.SUCCEEDED if exit_code == 0 else StepStatus.FAILED
    record.exit_code = exit_code


def resolved(ctx: RunContext, recipe_bytes: bytes) -> None:
    """Record that the recipe step resolved ``recipe_bytes``, as a run would."""
    from aicr_runner.aicr.recipe import Component, RecipeSummary

    ctx.recipe_path.write_bytes(recipe_bytes)
    ctx.findings.recipe_summary = RecipeSummary(components=(Component("gpu-operator"),))


def step(ctx: RunContext, state: State) -> tuple[StepStatus, int, str]:
    result = Steps(ctx).functions()[state]()
    return result.status, result.exit_code, result.reason


def test_an_over_budget_recipe_is_stored_compressed_not_dropped(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    recipe = "\n".join(f"- name: component-{i}\n  version: v{i}.0.0" for i in range(60_000)).encode()
    assert len(recipe) > CONFIGMAP_BUDGET_BYTES
    resolved(ctx, recipe)
    status, _, reason = step(ctx, State.CAPTURE_RECIPE)
    assert status is StepStatus.SUCCEEDED
    assert "stored gzip-compressed as recipe.yaml.gz" in reason
    stored = tmp_path / "results" / "aicr-recipe"
    assert not (stored / "recipe.yaml").exists()
    assert gzip.decompress((stored / "recipe.yaml.gz").read_bytes()) == recipe
    assert (stored / "summary.txt").read_text().startswith("criteria: ")


def test_recipe_capture_failure_only_warns(tmp_path: Path) -> None:
    api = FakeKubeApi(fail_names={"aicr-recipe"})
    ctx = context(tmp_path, StubProcesses(), sink=ConfigMapSink(api, "ns"))
    resolved(ctx, b"kind: RecipeResult\n")
    status, code, reason = step(ctx, State.CAPTURE_RECIPE)
    assert (status, code) == (StepStatus.WARNED, 0)
    assert "HTTP 403" in reason


def test_recipe_capture_can_be_turned_off(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses(), AICR_RUNNER_RECIPE__CONFIGMAP="")
    assert step(ctx, State.CAPTURE_RECIPE)[0] is StepStatus.SKIPPED
    assert not (tmp_path / "results").exists()


def test_verdict_capture_failure_is_exit_26(tmp_path: Path) -> None:
    api = FakeKubeApi(fail_names={"aicr-validate-result"})
    ctx = context(tmp_path, StubProcesses(), sink=ConfigMapSink(api, "ns"))
    validated(ctx, 8)
    ctx.ctrf_path.write_text("{}")
    status, code, _ = step(ctx, State.CAPTURE_VERDICT)
    assert (status, code) == (StepStatus.FAILED, ExitCode.CAPTURE_FAILED)


def test_missing_ctrf_is_a_warning_naming_the_validate_exit(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    validated(ctx, 5)
    status, _, reason = step(ctx, State.CAPTURE_VERDICT)
    assert status is StepStatus.WARNED
    assert reason == "no ctrf.json (exit=5)"


def test_the_step_reads_the_report_aicr_wrote_at_its_output(tmp_path: Path) -> None:
    def validate(argv: Sequence[str]) -> None:
        report = {
            "reportFormat": "CTRF",
            "results": {"summary": {"tests": 1, "skipped": 1}, "tests": [{"name": "a", "status": "skipped"}]},
        }
        Path(argv[list(argv).index("--output") + 1]).write_text(json.dumps(report))

    ctx = context(
        tmp_path,
        StubProcesses(effect=validate),
        AICR_RUNNER_VALIDATE__ENABLED="true",
        AICR_RUNNER_VALIDATE__FAIL_ON_ERROR="true",
    )
    status, code, reason = step(ctx, State.VALIDATE)
    assert (status, code) == (StepStatus.FAILED, ExitCode.VALIDATION_INCONCLUSIVE)
    assert reason.startswith("validation inconclusive: no check ran: 1 skipped")


def test_an_unexpected_error_is_exit_70_with_the_traceback_in_the_work_dir(tmp_path: Path) -> None:
    def explode(argv: Sequence[str]) -> None:
        raise KeyError("surprise")

    ctx = context(tmp_path, StubProcesses(effect=explode))
    status, code, reason = step(ctx, State.VERIFY)
    assert (status, code) == (StepStatus.FAILED, ExitCode.INTERNAL)
    assert "internal error in verify: KeyError" in reason
    assert "KeyError: 'surprise'" in (tmp_path / "logs" / "traceback.txt").read_text()


def test_an_unexpected_error_whose_traceback_cannot_be_written_still_ends_the_step(tmp_path: Path) -> None:
    def explode(argv: Sequence[str]) -> None:
        raise KeyError("surprise")

    (tmp_path / "logs" / "traceback.txt").mkdir(parents=True)  # writing the file fails
    ctx = context(tmp_path, StubProcesses(effect=explode))
    status, code, reason = step(ctx, State.VERIFY)
    assert (status, code) == (StepStatus.FAILED, ExitCode.INTERNAL)
    assert reason.endswith("(no traceback written (the work directory is not writable))")


def test_a_local_pack_without_registry_yaml_is_refused(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    ctx = rewired(ctx, pack_dir=tmp_path / "pack")
    (tmp_path / "pack").mkdir()
    status, code, reason = step(ctx, State.PACK)
    assert (status, code) == (StepStatus.FAILED, ExitCode.PACK_VERIFICATION_FAILED)
    assert "no registry.yaml" in reason


def test_signed_publish_with_an_unreadable_token_fails_with_its_path(tmp_path: Path) -> None:
    ctx = context(
        tmp_path,
        StubProcesses(),
        AICR_RUNNER_VALIDATE__ENABLED="true",
        AICR_RUNNER_VALIDATE__EMIT_EVIDENCE="true",
        AICR_RUNNER_VALIDATE__PUBLISH__ENABLED="true",
        AICR_RUNNER_VALIDATE__PUBLISH__REF="reg.example/e",
        AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE=str(tmp_path / "gone"),
    )
    validated(ctx, 0)
    ctx.evidence_dir.mkdir()
    status, code, reason = step(ctx, State.PUBLISH)
    assert (status, code) == (StepStatus.FAILED, ExitCode.BAD_INPUT)
    assert str(tmp_path / "gone") in reason
    assert ctx.externals.processes.calls == []  # type: ignore[attr-defined]


def test_publish_without_evidence_fails_like_the_anchor(tmp_path: Path) -> None:
    ctx = context(
        tmp_path,
        StubProcesses(),
        AICR_RUNNER_VALIDATE__ENABLED="true",
        AICR_RUNNER_VALIDATE__EMIT_EVIDENCE="true",
        AICR_RUNNER_VALIDATE__PUBLISH__ENABLED="true",
        AICR_RUNNER_VALIDATE__PUBLISH__MODE="unsigned",
        AICR_RUNNER_VALIDATE__PUBLISH__REF="reg.example/e",
    )
    validated(ctx, 0)
    assert step(ctx, State.PUBLISH)[:2] == (StepStatus.FAILED, 1)


def test_aicr_that_cannot_report_its_version_is_exit_27(tmp_path: Path) -> None:
    binary = tmp_path / "aicr-bin"
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(0o755)
    ctx = context(tmp_path, StubProcesses(exit_code=3), AICR_RUNNER_AICR__PROVENANCE__MODE="off")
    ctx = rewired(ctx, aicr_binary=binary)
    status, code, _ = step(ctx, State.FETCH)
    assert (status, code) == (StepStatus.FAILED, ExitCode.TOOL_MISSING)


def provenance_context(tmp_path: Path, processes: StubProcesses, **env: str) -> RunContext:
    """A preinstalled "aicr" that is really the sigstore@3.1.0 npm tarball, with that
    tarball's real provenance bundle as its attestation sidecar; real cosign, offline."""
    from aicr_runner.aicr.provenance import CosignVerifier
    from aicr_runner.children.process import SubprocessRunner
    from e2e.tools import npm_tarball
    from tests.unit.aicr.test_provenance import BUNDLE, offline_environ

    binary = tmp_path / "bin" / "aicr"
    binary.parent.mkdir()
    binary.write_bytes(npm_tarball().read_bytes())
    binary.chmod(0o755)
    (binary.parent / "aicr-attestation.sigstore.json").write_bytes(BUNDLE.read_bytes())
    ctx = context(tmp_path, processes, **env)
    ctx = rewired(ctx, aicr_binary=binary)
    home = tmp_path / "home"
    home.mkdir()
    return rewired(ctx, verifier=CosignVerifier(SubprocessRunner(), offline_environ(home)))


def test_fetch_refuses_a_binary_whose_provenance_does_not_verify_before_it_runs(tmp_path: Path) -> None:
    processes = StubProcesses()
    ctx = provenance_context(tmp_path, processes)  # the default identity: NVIDIA's release workflow
    status, code, reason = step(ctx, State.FETCH)
    assert (status, code) == (StepStatus.FAILED, ExitCode.PROVENANCE_FAILED)
    assert "signer identity mismatch" in reason
    assert "expected https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.2.0" in reason
    assert processes.calls == [], "aicr must not run, not even --version"
    assert ctx.report.provenance["status"] == "failed"


def test_fetch_records_the_verified_identity_log_index_and_time(tmp_path: Path) -> None:
    processes = StubProcesses()
    identity = "https://github.com/sigstore/sigstore-js/.github/workflows/release.yml@refs/heads/main"
    ctx = provenance_context(tmp_path, processes, AICR_RUNNER_AICR__PROVENANCE__IDENTITY=identity)
    status, code, reason = step(ctx, State.FETCH)
    assert (status, code) == (StepStatus.SUCCEEDED, 0), reason
    assert f"provenance verified: signed by {identity}" in reason
    assert "Rekor log index 168704762, integrated 2025-02-04T20:35:47Z" in reason
    assert processes.calls == [[str(ctx.config.aicr_binary), "--version"]]
    assert ctx.report.provenance["logIndex"] == 168704762
    assert ctx.report.provenance["identity"] == identity
    assert "aicr provenance: mode=require, status=verified" in ctx.report.summary_text()
    assert '"logIndex": 168704762' in ctx.report.to_json()


def test_fetch_in_warn_mode_runs_aicr_and_warns(tmp_path: Path) -> None:
    processes = StubProcesses()
    ctx = provenance_context(tmp_path, processes, AICR_RUNNER_AICR__PROVENANCE__MODE="warn")
    status, code, reason = step(ctx, State.FETCH)
    assert (status, code) == (StepStatus.WARNED, 0)
    assert "signer identity mismatch" in reason
    assert processes.calls == [[str(ctx.config.aicr_binary), "--version"]]


@pytest.mark.parametrize(
    ("state", "expected"),
    [(State.BUNDLE, "Skipping deploy"), (State.VERIFY, "assert-only"), (State.DEPLOY, "Skipping deploy")],
)
def test_assert_only_skips(tmp_path: Path, state: State, expected: str) -> None:
    ctx = context(tmp_path, StubProcesses(), AICR_RUNNER_DEPLOY__ENABLED="false", AICR_RUNNER_VALIDATE__ENABLED="true")
    status, _, reason = step(ctx, state)
    assert status is StepStatus.SKIPPED
    assert expected in reason
    assert ctx.externals.processes.calls == []  # type: ignore[attr-defined]


#: What the stub helm says to ``helm version --template {{.Version}}``.
HELM_VERSION = "v4.3.1"


def deploy_context(
    tmp_path: Path,
    helm_output: list[str],
    helm_exit: int = 0,
    *,
    helm_version: str = HELM_VERSION,
    env: Mapping[str, str] | None = None,
) -> RunContext:
    """A context whose PATH has a `helm` (``helm_version``) and whose recipe has gpu-operator in gpu-operator."""
    from aicr_runner.aicr.recipe import Component, RecipeSummary

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").write_text("#!/bin/sh\n")
    (bin_dir / "helm").chmod(0o755)

    class Processes(StubProcesses):
        def run(self, argv: Sequence[str], **kw: Any) -> ProcessResult:
            if argv[0].endswith("helm"):
                self.calls.append(list(argv))
                # deploy.helmApply asks deploy.sh's helm its version (helm.apply).
                version = argv[1] == "version"
                for line in [helm_version] if version else helm_output:
                    kw["on_line"](line)
                return ProcessResult(exit_code=0 if version else helm_exit, log_path=kw["log_path"], interrupted=False)
            return super().run(argv, **kw)

    ctx = context(tmp_path, Processes(lines=["✓ All components installed successfully."]), **(env or {}))
    ctx = rewired(ctx, environ={"PATH": str(bin_dir)})
    ctx.findings.recipe_summary = RecipeSummary(components=(Component("gpu-operator", namespace="gpu-operator"),))
    (tmp_path / "bundle").mkdir()
    return ctx


def test_a_pending_release_of_the_bundle_stops_deploy_before_deploy_sh(tmp_path: Path) -> None:
    pending = '[{"name":"gpu-operator","namespace":"gpu-operator","status":"pending-upgrade"}]'
    ctx = deploy_context(tmp_path, [pending])
    status, code, reason = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.FAILED, ExitCode.HELM_RELEASE_PENDING)
    assert "gpu-operator/gpu-operator (pending-upgrade)" in reason
    assert "helm rollback" in reason
    calls = ctx.externals.processes.calls  # type: ignore[attr-defined]
    # deploy.helmApply's version question first (it touches no release), then the pending check.
    assert [c[1:] for c in calls[:2]] == [
        ["version", "--template", "{{.Version}}"],
        ["list", "--all-namespaces", "--pending", "--output", "json"],
    ]
    assert not any("deploy.sh" in " ".join(c) for c in calls), "deploy.sh never ran"


@pytest.mark.parametrize(
    ("output", "helm_exit"),
    [
        (['[{"name":"someone-else","namespace":"apps","status":"pending-install"}]'], 0),
        # Same name, another namespace: another team's release, not this bundle's.
        (['[{"name":"gpu-operator","namespace":"team-b","status":"pending-upgrade"}]'], 0),
        (["[]"], 0),
        (["Error: Kubernetes cluster unreachable"], 1),
    ],
)
def test_no_pending_release_of_ours_lets_deploy_run(tmp_path: Path, output: list[str], helm_exit: int) -> None:
    ctx = deploy_context(tmp_path, output, helm_exit)
    status, code, _ = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.SUCCEEDED, 0)
    assert any("deploy.sh" in " ".join(c) for c in ctx.externals.processes.calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize("state", [State.RECIPE, State.BUNDLE, State.VERIFY, State.VALIDATE])
def test_a_child_stopped_after_the_grace_period_is_an_interrupted_step(tmp_path: Path, state: State) -> None:
    ctx = context(tmp_path, StubProcesses(exit_code=143, stopped=True), AICR_RUNNER_VALIDATE__ENABLED="true")
    status, code, reason = step(ctx, state)
    assert (status, code) == (StepStatus.INTERRUPTED, ExitCode.INTERRUPTED)
    assert f"{state} did not finish within the 60s grace period and was stopped (exit 143)" in reason


def test_a_recipe_over_budget_even_compressed_keeps_the_summary(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    resolved(ctx, os.urandom(CONFIGMAP_BUDGET_BYTES + 1))  # incompressible
    status, _, reason = step(ctx, State.CAPTURE_RECIPE)
    assert status is StepStatus.WARNED
    assert "over budget even compressed: summary only" in reason
    stored = sorted(p.name for p in (tmp_path / "results" / "aicr-recipe").iterdir())
    assert stored == ["summary.txt"]


def test_an_oversized_verdict_is_exit_26_not_silently_dropped(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    validated(ctx, 8)
    ctx.ctrf_path.write_bytes(os.urandom(CONFIGMAP_BUDGET_BYTES + 1))
    status, code, reason = step(ctx, State.CAPTURE_VERDICT)
    assert (status, code) == (StepStatus.FAILED, ExitCode.CAPTURE_FAILED)
    assert "over the ConfigMap budget even compressed" in reason


def test_no_resolved_recipe_means_nothing_to_capture(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    status, _, reason = step(ctx, State.CAPTURE_RECIPE)
    assert (status, reason) == (StepStatus.SKIPPED, "no recipe was resolved")
    assert not (tmp_path / "results").exists()


# -- recovery of a release a dead predecessor left pending ------------------------------------


def recovery_context(tmp_path: Path, answers: dict[str, str], announced: list[str]) -> RunContext:
    """deploy_context whose helm answers per subcommand, holding a Lease whose
    previous holders announced ``announced``."""
    from aicr_runner.kube.api import LeaseRecord
    from aicr_runner.kube.lease import RELEASES_ANNOTATION, InstallLease
    from aicr_runner.settings.config import LeaseSettings
    from tests.support.fakes import FakeKubeApi

    ctx = deploy_context(tmp_path, [])
    helm_calls: list[list[str]] = []

    class Processes(StubProcesses):
        def run(self, argv: Sequence[str], **kw: Any) -> ProcessResult:
            if argv[0].endswith("helm"):
                helm_calls.append(list(argv[1:]))
                if kw.get("on_line") is not None:
                    kw["on_line"](({"version": HELM_VERSION} | answers).get(argv[1], ""))
                return ProcessResult(exit_code=0, log_path=kw["log_path"], interrupted=False)
            return super().run(argv, **kw)

    processes = Processes(lines=["✓ All components installed successfully."])
    processes.helm_calls = helm_calls  # type: ignore[attr-defined]
    ctx = rewired(ctx, processes=processes)
    api = FakeKubeApi()
    api.leases[("aicr", "t-install")] = LeaseRecord(
        "t-install", annotations={RELEASES_ANNOTATION: json.dumps(announced)}, resource_version="1"
    )
    lease = InstallLease(api, "aicr", LeaseSettings(name="t-install", pod_name="p", job_name="j"))
    lease.acquire()
    return rewired(ctx, lease=lease)


HISTORY = json.dumps(
    [
        {"revision": 1, "status": "superseded"},
        {"revision": 2, "status": "deployed"},
        {"revision": 3, "status": "pending-upgrade"},
    ]
)


def test_a_pending_upgrade_a_predecessor_left_is_rolled_back_then_deployed(tmp_path: Path) -> None:
    pending = '[{"name":"gpu-operator","namespace":"gpu-operator","status":"pending-upgrade"}]'
    ctx = recovery_context(tmp_path, {"list": pending, "history": HISTORY}, ["gpu-operator/gpu-operator"])
    status, code, reason = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.SUCCEEDED, 0), reason
    helm_calls = ctx.externals.processes.helm_calls  # type: ignore[attr-defined]
    assert ["rollback", "gpu-operator", "2", "--namespace", "gpu-operator"] in helm_calls
    assert "recovered first: gpu-operator/gpu-operator" in reason
    [recovery] = ctx.report.recoveries
    assert recovery["release"] == "gpu-operator/gpu-operator"
    assert recovery["action"] == "rolled back from revision 3 to 2"
    assert "recovered releases:" in ctx.report.summary_text()
    assert any("deploy.sh" in " ".join(c) for c in ctx.externals.processes.calls)  # type: ignore[attr-defined]


def test_a_cut_first_install_a_predecessor_left_is_uninstalled(tmp_path: Path) -> None:
    pending = '[{"name":"gpu-operator","namespace":"gpu-operator","status":"pending-install"}]'
    history = json.dumps([{"revision": 1, "status": "pending-install"}])
    ctx = recovery_context(tmp_path, {"list": pending, "history": history}, ["gpu-operator/gpu-operator"])
    status, _, reason = step(ctx, State.DEPLOY)
    assert status is StepStatus.SUCCEEDED, reason
    helm_calls = ctx.externals.processes.helm_calls  # type: ignore[attr-defined]
    assert ["uninstall", "gpu-operator", "--namespace", "gpu-operator"] in helm_calls
    assert not any(c[0] == "rollback" for c in helm_calls)


def test_a_pending_release_no_run_of_this_release_announced_is_left_alone_with_exit_28(tmp_path: Path) -> None:
    pending = '[{"name":"gpu-operator","namespace":"gpu-operator","status":"pending-upgrade"}]'
    ctx = recovery_context(tmp_path, {"list": pending, "history": HISTORY}, ["other-ns/gpu-operator"])
    status, code, reason = step(ctx, State.DEPLOY)
    assert (status, code) == (StepStatus.FAILED, ExitCode.HELM_RELEASE_PENDING)
    assert "has no record of a run of this release operating on them" in reason
    assert "helm rollback <name> <last deployed revision>" in reason
    helm_calls = ctx.externals.processes.helm_calls  # type: ignore[attr-defined]
    assert not any(c[0] in ("rollback", "uninstall", "history") for c in helm_calls)
    assert ctx.report.recoveries == []


def test_deploy_announces_its_releases_in_the_lease_before_deploy_sh(tmp_path: Path) -> None:
    from aicr_runner.kube.lease import RELEASES_ANNOTATION

    ctx = recovery_context(tmp_path, {"list": "[]"}, [])
    step(ctx, State.DEPLOY)
    assert ctx.externals.lease is not None
    stored = ctx.externals.lease._api.leases[("aicr", "t-install")]  # type: ignore[attr-defined]
    assert json.loads(stored.annotations[RELEASES_ANNOTATION]) == ["gpu-operator/gpu-operator"]


def test_a_waiting_run_shows_whom_it_waits_for_in_the_status_while_it_waits(tmp_path: Path) -> None:
    from aicr_runner.kube.api import LeaseRecord
    from aicr_runner.kube.lease import InstallLease
    from aicr_runner.settings.config import LeaseSettings
    from tests.support.fakes import FakeKubeApi

    ctx = context(tmp_path, StubProcesses())
    api = FakeKubeApi()
    api.leases[("aicr", "t-install")] = LeaseRecord("t-install", holder="job-a/pod-a", resource_version="1")
    seen: list[str] = []

    def progress() -> None:
        seen.append(ctx.report.step(State.LEASE.value).message)
        # The holder finishes: its Lease is handed back.
        api.leases[("aicr", "t-install")] = LeaseRecord("t-install", resource_version="2")

    lease = InstallLease(api, "aicr", LeaseSettings(name="t-install", pod_name="pod-b", job_name="job-b"))
    ctx = rewired(ctx, progress=progress, lease=lease)
    status, _, reason = step(ctx, State.LEASE)
    lease.release()
    assert status is StepStatus.SUCCEEDED
    assert seen == [
        "waiting for the install Lease aicr/t-install, held by job-a/pod-a (waited 0s; gives up after 7200s)"
    ]
    assert reason.startswith("install Lease aicr/t-install held by job-b/pod-b")


def test_validation_only_ends_at_once_with_exit_33_while_an_install_holds_the_lease(tmp_path: Path) -> None:
    from aicr_runner.kube.api import LeaseRecord
    from aicr_runner.kube.lease import InstallLease
    from aicr_runner.run.report import utcnow

    api = FakeKubeApi()
    api.leases[("aicr", "nvidia-aicr-install")] = LeaseRecord(
        "nvidia-aicr-install", holder="job-a/pod-a", duration_seconds=60, renew_time=utcnow(), resource_version="3"
    )
    base = context(tmp_path, StubProcesses())
    lease = InstallLease(api, "aicr", base.settings.lease.model_copy(update={"name": "nvidia-aicr-install"}))
    ctx = rewired(base, mode=Mode.VALIDATE, lease=lease)
    status, code, message = step(ctx, State.LEASE)
    assert (status, code) == (StepStatus.FAILED, ExitCode.INSTALL_IN_PROGRESS)
    assert message.startswith("install in progress, not validated: the install Lease aicr/nvidia-aicr-install")
    assert "job-a/pod-a" in message
    api.leases[("aicr", "nvidia-aicr-install")] = replace(api.leases[("aicr", "nvidia-aicr-install")], holder="")
    assert step(ctx, State.LEASE)[0] is StepStatus.SUCCEEDED
    lease.release()


def test_the_verdict_history_lives_in_its_configmap_and_a_regression_is_told(tmp_path: Path) -> None:
    def ctrf(status: str) -> str:
        tests = [{"name": "operator-health", "status": status}]
        summary = {"tests": 1, "passed": int(status == "passed"), "failed": int(status == "failed")}
        return json.dumps({"reportFormat": "CTRF", "results": {"summary": summary, "tests": tests}})

    api = FakeKubeApi()
    told: list[tuple[list[str], list[str]]] = []
    base = context(tmp_path, StubProcesses(), sink=ConfigMapSink(api, "ns"))
    moments = (datetime(2026, 1, day, tzinfo=UTC) for day in itertools.count(1))
    ctx = rewired(
        base,
        on_verdict_change=lambda regressed, recovered, since: told.append((list(regressed), list(recovered))),
        clock=lambda: next(moments),
    )
    resolved(ctx, b"kind: RecipeResult\n")
    for status in ("passed", "failed"):
        validated(ctx, 0)
        ctx.ctrf_path.write_text(ctrf(status))
        result = step(ctx, State.CAPTURE_VERDICT)
    assert result[0] is StepStatus.WARNED
    assert "REGRESSED since" in result[2]
    assert told == [(["operator-health"], [])]
    assert ctx.findings.regressed == ("operator-health",)
    assert verdict_report.facts_of(ctx, "ns", evidence_stored=False).regressed == ("operator-health",)
    entries = json.loads(api.objects[("ns", "aicr-validate-result-history")]["data"]["history.json"])  # type: ignore[index]
    assert [e["checks"] for e in entries] == [{"passed": ["operator-health"]}, {"failed": ["operator-health"]}]
    assert entries[0]["recipeDigest"].startswith("sha256:")
    # The time each entry records is the run's clock (RunExternals.clock), not the host's.
    assert [e["time"] for e in entries] == ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"]
    captured = json.loads(api.objects[("ns", "aicr-validate-result")]["data"]["ctrf.json"])  # type: ignore[index]
    assert captured["baseline"]["extra"]["checks"] == {"passed": ["operator-health"]}


# -- the steps each mode runs: registered by state, a mode's own variant first ----------


@pytest.mark.parametrize("mode", list(Mode))
def test_every_state_of_a_modes_table_has_its_step(tmp_path: Path, mode: Mode) -> None:
    from aicr_runner.run.machine import ROUTES

    functions = Steps(rewired(context(tmp_path, StubProcesses()), mode=mode)).functions()
    assert set(ROUTES[mode]) <= set(functions)
    assert State.DONE not in functions


def test_a_state_has_one_step_per_mode() -> None:
    from aicr_runner.steps.table import step as register

    with pytest.raises(ValueError, match="two steps for lease"):
        register(State.LEASE, Mode.PLAN)(lambda steps: StepResult.ok())


def test_a_plan_skips_what_a_job_would_go_on_to_and_renders_the_bundle_even_assert_only(tmp_path: Path) -> None:
    processes = StubProcesses(effect=lambda argv: (tmp_path / "bundle").mkdir(exist_ok=True))
    assert_only = {"AICR_RUNNER_DEPLOY__ENABLED": "false", "AICR_RUNNER_VALIDATE__ENABLED": "true"}
    ctx = rewired(context(tmp_path, processes, **assert_only), mode=Mode.PLAN)
    assert step(ctx, State.LEASE) == (StepStatus.SKIPPED, 0, "plan: nothing is deployed")
    assert step(ctx, State.DEPLOY) == (StepStatus.SKIPPED, 0, "plan: nothing is deployed")
    assert step(ctx, State.VALIDATE) == (StepStatus.SKIPPED, 0, "plan: no validation")
    assert step(ctx, State.SNAPSHOT) == (StepStatus.SKIPPED, 0, "plan: no snapshot")  # snapshot.enabled=false
    assert processes.calls == []
    # deploy.enabled=false is an assert-only Job; a plan still shows the bundle it would render.
    step(ctx, State.BUNDLE)
    assert [argv[1:3] for argv in processes.calls] == [["--log-json", "bundle"]]
    run = rewired(ctx, mode=Mode.RUN)
    assert step(run, State.BUNDLE)[:1] == (StepStatus.SKIPPED,)


def test_a_plan_that_cannot_download_aicr_says_once_how_to_plan_without_it(tmp_path: Path) -> None:
    from aicr_runner.errors import DownloadError

    def failing(settings: object, dest: Path, *, cancelled: object = None) -> Any:
        raise DownloadError(given.pop(0))

    given: list[str] = []
    for mode, said in (
        (Mode.PLAN, "; to plan without downloading, give a local aicr (--aicr-binary PATH)"),
        (Mode.RUN, ""),
    ):
        given.append("download of aicr failed: HTTP 404")
        ctx = rewired(context(tmp_path, StubProcesses()), mode=mode, fetch=failing)
        status, code, reason = step(ctx, State.FETCH)
        assert (status, code) == (StepStatus.FAILED, ExitCode.DOWNLOAD_FAILED)
        assert reason.startswith(f"download of aicr failed: HTTP 404{said}")
        assert reason.count("--aicr-binary") == (1 if said else 0)


def test_a_download_over_its_budget_already_names_the_local_aicr_and_is_not_told_twice(tmp_path: Path) -> None:
    from aicr_runner.errors import DownloadError

    def failing(settings: object, dest: Path, *, cancelled: object = None) -> Any:
        raise DownloadError("the aicr download ... (--aicr-binary / aicrBinary.path)", offers_local=True)

    ctx = rewired(context(tmp_path, StubProcesses()), mode=Mode.PLAN, fetch=failing)
    assert step(ctx, State.FETCH)[2] == "the aicr download ... (--aicr-binary / aicrBinary.path)"
