"""A validation-only run holds the install Lease for its validation; an install that
starts meanwhile takes it over at once and the validation discards its verdict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from aicr_runner.errors import ExitCode
from aicr_runner.kube.lease import HELD_FOR_ANNOTATION, InstallLease
from aicr_runner.kube.sink import ConfigMapSink
from aicr_runner.run.machine import State
from aicr_runner.run.report import StepStatus
from aicr_runner.steps.context import Mode, RunContext
from tests.support.fakes import FakeKubeApi
from tests.unit.steps.test_steps import StubProcesses, context, resolved, step, validated

LEASE = ("ns", "nvidia-aicr-install")
CTRF = {"results": {"summary": {"tests": 1, "passed": 1}, "tests": [{"name": "operator-health", "status": "passed"}]}}


def validation(tmp_path: Path, api: FakeKubeApi, told: list[object], **env: str) -> RunContext:
    base = context(tmp_path, StubProcesses(), sink=ConfigMapSink(api, "ns"), **env)
    lease = InstallLease(api, "ns", base.settings.lease.model_copy(update={"name": LEASE[1], "pod_name": "pod-v"}))
    return replace(
        base,
        mode=Mode.VALIDATE,
        lease=lease,
        on_verdict_change=lambda regressed, recovered, since: told.append((regressed, recovered)),
    )


def validated_with_a_verdict(ctx: RunContext) -> None:
    resolved(ctx, b"kind: RecipeResult\n")
    validated(ctx, 0)
    ctx.ctrf_path.write_text(json.dumps(CTRF))


def test_a_validation_holds_the_lease_and_keeps_its_verdict_when_no_install_came(tmp_path: Path) -> None:
    api = FakeKubeApi()
    ctx = validation(tmp_path, api, [])
    status, _, message = step(ctx, State.LEASE)
    assert status is StepStatus.SUCCEEDED, message
    assert "held for this validation" in message
    assert api.leases[LEASE].annotations[HELD_FOR_ANNOTATION] == "validation"
    validated_with_a_verdict(ctx)
    status, _, message = step(ctx, State.CAPTURE_VERDICT)
    assert status is StepStatus.SUCCEEDED, message
    assert ("ns", "aicr-validate-result") in api.objects
    assert ctx.lease is not None
    ctx.lease.release()


def test_an_install_during_the_validation_voids_its_verdict_with_exit_33(tmp_path: Path) -> None:
    api = FakeKubeApi()
    told: list[object] = []
    ctx = validation(tmp_path, api, told, AICR_RUNNER_VALIDATE__EMIT_EVIDENCE="true")
    assert step(ctx, State.LEASE)[0] is StepStatus.SUCCEEDED
    install = InstallLease(api, "ns", ctx.settings.lease.model_copy(update={"name": LEASE[1], "pod_name": "pod-i"}))
    install.acquire()  # at once: a validation never makes an install wait
    validated_with_a_verdict(ctx)
    ctx.evidence_dir.mkdir(parents=True)
    (ctx.evidence_dir / "pointer.yaml").write_text("bundle: x\n")

    status, code, message = step(ctx, State.CAPTURE_VERDICT)
    assert (status, code) == (StepStatus.FAILED, ExitCode.INSTALL_IN_PROGRESS)
    assert int(ExitCode.INSTALL_IN_PROGRESS) == 33
    assert message.startswith("an install took the install Lease ns/nvidia-aicr-install over during the validation")
    assert "not captured, compared or kept in history" in message
    assert ("ns", "aicr-validate-result") not in api.objects
    assert ("ns", "aicr-validate-result-history") not in api.objects
    assert told == [], "no ValidationRegressed or Recovered from a voided verdict"
    status, _, message = step(ctx, State.CAPTURE_EVIDENCE)
    assert status is StepStatus.SKIPPED
    assert "discarded" in message
    assert ("ns", "aicr-evidence-bundle") not in api.objects
    assert ctx.lease is not None
    ctx.lease.release()
    assert api.leases[LEASE].holder == install.holder, "the install keeps it"
    install.release()


def test_an_install_lease_an_install_holds_is_never_voided_in_an_install_run(tmp_path: Path) -> None:
    """An install run's own capture is not a validation's: losing nothing, it keeps its verdict."""
    api = FakeKubeApi()
    base = context(tmp_path, StubProcesses(), sink=ConfigMapSink(api, "ns"))
    lease = InstallLease(api, "ns", base.settings.lease.model_copy(update={"name": LEASE[1]}))
    lease.acquire()
    ctx = replace(base, lease=lease)
    validated_with_a_verdict(ctx)
    assert step(ctx, State.CAPTURE_VERDICT)[0] is StepStatus.SUCCEEDED
    lease.release()
