"""A validation-only run holds the install Lease for its validation; an install that
starts meanwhile takes it over at once and the validation discards its verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from aicr_runner.errors import ExitCode
from aicr_runner.kube.lease import HELD_FOR_ANNOTATION, InstallLease
from aicr_runner.kube.sink import ConfigMapSink
from aicr_runner.run.machine import State
from aicr_runner.run.report import StepStatus
from aicr_runner.settings.config import LeaseSettings
from aicr_runner.steps.context import Mode, RunContext
from tests.support.fakes import FakeKubeApi
from tests.unit.steps.test_steps import StubProcesses, context, resolved, rewired, step, validated

LEASE = ("ns", "nvidia-aicr-install")
CTRF = {
    "reportFormat": "CTRF",
    "results": {"summary": {"tests": 1, "passed": 1}, "tests": [{"name": "operator-health", "status": "passed"}]},
}
ON = {"AICR_RUNNER_VALIDATE__ENABLED": "true"}


def validation(
    tmp_path: Path,
    api: FakeKubeApi,
    told: list[object],
    during: Callable[[], object] = lambda: None,
    *,
    mode: Mode = Mode.VALIDATE,
    env: Mapping[str, str] | None = None,
) -> RunContext:
    """A run whose ``aicr validate`` calls ``during`` and then writes a passing CTRF
    (and, asked for evidence, a bundle)."""

    def aicr(argv: Sequence[str]) -> None:
        if "validate" in argv:
            during()
            Path(argv[argv.index("--output") + 1]).write_text(json.dumps(CTRF))
            if "--emit-attestation" in argv:
                bundle = Path(argv[argv.index("--emit-attestation") + 1])
                bundle.mkdir(parents=True, exist_ok=True)
                (bundle / "pointer.yaml").write_text("bundle: x\n")

    base = context(tmp_path, StubProcesses(effect=aicr), sink=ConfigMapSink(api, "ns"), **ON, **(env or {}))
    lease = InstallLease(api, "ns", base.settings.lease.model_copy(update={"name": LEASE[1], "pod_name": "pod-v"}))
    ctx = rewired(
        base,
        mode=mode,
        lease=lease,
        on_verdict_change=lambda regressed, recovered, since: told.append((regressed, recovered)),
    )
    resolved(ctx, b"kind: RecipeResult\n")
    ctx.recipe_path.write_text("kind: RecipeResult\n")
    return ctx


def test_a_validation_holds_the_lease_and_keeps_its_verdict_when_no_install_came(tmp_path: Path) -> None:
    api = FakeKubeApi()
    ctx = validation(tmp_path, api, [])
    status, _, message = step(ctx, State.LEASE)
    assert status is StepStatus.SUCCEEDED, message
    assert "held for this validation" in message
    assert api.leases[LEASE].annotations[HELD_FOR_ANNOTATION] == "validation"
    assert step(ctx, State.VALIDATE)[0] is StepStatus.SUCCEEDED
    validated(ctx, 0)  # as the machine records it
    status, _, message = step(ctx, State.CAPTURE_VERDICT)
    assert status is StepStatus.SUCCEEDED, message
    assert ("ns", "aicr-validate-result") in api.objects
    assert ctx.externals.lease is not None
    ctx.externals.lease.release()
    assert api.leases[LEASE].holder == "", "handed back"


def test_an_install_during_the_validation_voids_its_verdict_with_exit_33(tmp_path: Path) -> None:
    api = FakeKubeApi()
    told: list[object] = []
    install = InstallLease(api, "ns", LeaseSettings(name=LEASE[1], pod_name="pod-i", job_name="job-i"))
    # At once while aicr validate runs: a validation never makes an install wait.
    evidence = {"AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true"}
    ctx = validation(tmp_path, api, told, install.acquire, env=evidence)
    assert step(ctx, State.LEASE)[0] is StepStatus.SUCCEEDED
    step(ctx, State.VALIDATE)
    validated(ctx, 0)

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
    writes = len(api.lease_writes)
    assert ctx.externals.lease is not None
    ctx.externals.lease.release()
    assert len(api.lease_writes) == writes, "the validation never writes the install's Lease"
    assert api.leases[LEASE].holder == install.holder, "the install keeps it"
    install.release()


def test_an_install_runs_own_verdict_is_never_voided(tmp_path: Path) -> None:
    """An install run's own capture is not a validation's: losing nothing, it keeps its verdict."""
    api = FakeKubeApi()
    ctx = validation(tmp_path, api, [], mode=Mode.RUN)
    assert ctx.externals.lease is not None
    ctx.externals.lease.acquire()
    step(ctx, State.VALIDATE)
    validated(ctx, 0)
    assert step(ctx, State.CAPTURE_VERDICT)[0] is StepStatus.SUCCEEDED
    ctx.externals.lease.release()
