"""The evidence bundle ``aicr validate --emit-attestation`` wrote: published with
``aicr evidence publish`` and kept in the evidence ConfigMap.

Neither happens for a validation an install preempted (``RunFindings.preempted``):
its bundle may describe a half-installed cluster.
"""

from __future__ import annotations

from pathlib import Path

from aicr_runner import logs
from aicr_runner.aicr import argv as commands
from aicr_runner.children.process import child_env
from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import State, StepResult
from aicr_runner.steps.context import RunContext

__all__ = ["capture", "publish"]

log = logs.get_logger()

_DISCARDED = "the validation's verdict was discarded (an install took the install Lease over)"


def publish(ctx: RunContext, aicr: Path, *, validated: bool) -> StepResult:
    """``aicr evidence publish`` of the run's bundle (the token read now: a rotated Secret is picked up)."""
    pub = ctx.settings.validate.publish
    if not pub.enabled or not validated:
        return StepResult.skipped("publish.enabled=false" if not pub.enabled else "validation did not run")
    if ctx.findings.preempted:
        return StepResult.skipped(_DISCARDED)
    if not ctx.evidence_dir.is_dir():
        return StepResult.failed(1, "no evidence bundle to publish (validate emitted none)")
    token = None
    if pub.identity_token_file:
        try:
            token = Path(pub.identity_token_file).read_text().strip()
        except OSError as exc:
            return StepResult.failed(
                ExitCode.BAD_INPUT, f"identity token file {pub.identity_token_file}: {exc.strerror or exc}"
            )
        logs.register_secret(token)
    env = child_env(ctx.config.environ, docker_config=pub.registry_config_dir or None, identity_token=token)
    result = ctx.run_child(State.PUBLISH, commands.publish_argv(ctx.settings, aicr, ctx.evidence_dir), env=env)
    log.info("aicr evidence publish exited", exit_code=result.exit_code)
    if result.exit_code != 0:
        return StepResult.failed(result.exit_code, f"aicr evidence publish exited {result.exit_code}")
    return StepResult.ok(f"evidence published to {pub.ref}")


def capture(ctx: RunContext, *, validated: bool) -> StepResult:
    """The bundle as ``evidence.tgz`` (and its ``pointer.yaml``) in the evidence ConfigMap."""
    unavailable = _nothing_to_capture(ctx, validated)
    if unavailable is not None:
        return unavailable
    name = ctx.settings.validate.evidence_configmap
    data: dict[str, str] = {}
    pointer = ctx.evidence_dir / "pointer.yaml"
    if pointer.is_file():
        data["pointer.yaml"] = pointer.read_text(errors="replace")
    # The upgrade check's report beside aicr's bundle, never inside it (the bundle is aicr's, attested).
    if ctx.upgrade_report_path.is_file():
        data[ctx.upgrade_report_path.name] = ctx.upgrade_report_path.read_text(errors="replace")
    fitted = ctx.sink.fit(data, archives={"evidence.tgz": ctx.evidence_dir})
    if not fitted.data and not fitted.binary_data:
        return StepResult.warned("evidence bundle over budget and no pointer.yaml: not stored")
    ctx.sink.put(name, data=fitted.data, binary_data=fitted.binary_data or None)
    ctx.findings.evidence_stored = True
    where = ctx.sink.describe(name)
    if fitted.dropped:
        return StepResult.warned(f"evidence bundle over the ConfigMap budget: pointer only, in {where}")
    return StepResult.ok(f"Evidence artifacts written to {where}")


def _nothing_to_capture(ctx: RunContext, validated: bool) -> StepResult | None:
    v = ctx.settings.validate
    if not v.emit_evidence or not validated:
        return StepResult.skipped("validate.emitEvidence=false" if not v.emit_evidence else "validation did not run")
    if ctx.findings.preempted:
        return StepResult.skipped(_DISCARDED)
    if not ctx.evidence_dir.is_dir():
        return StepResult.warned("no evidence directory was written")
    if not v.evidence_configmap:
        return StepResult.skipped("evidence capture is off (the evidence ConfigMap name is empty)")
    return None
