"""The deploy step: the Helm releases a dead predecessor left pending, settled first;
then deploy.sh, its helm behind the guard, its output relayed and read by the
markers, its per-component progress published as it goes; then its verdict.

Imported by the step when it runs: a plan or a validation never loads helm's modules."""

from __future__ import annotations

import os

from aicr_runner.aicr import argv as commands
from aicr_runner.aicr import classify
from aicr_runner.aicr.classify import Outcome
from aicr_runner.aicr.progress import ComponentTable, ProgressPublisher
from aicr_runner.aicr.relays import aicr_relay, deploy_relay
from aicr_runner.children.process import child_env
from aicr_runner.errors import HelmReleasePendingError, InterruptedRun
from aicr_runner.helm import apply
from aicr_runner.helm.guard import install_guard, real_helm
from aicr_runner.helm.pending import PendingReleases
from aicr_runner.run.machine import State, StepResult
from aicr_runner.steps import upgrade
from aicr_runner.steps.context import RunContext

__all__ = ["bundled_components", "deployed", "helm_apply_flag", "pending_releases", "run_deploy_sh"]


def deployed(ctx: RunContext) -> StepResult:
    """The deploy step of an install (``deploy.enabled``): pending releases settled,
    deploy.sh run, its exit code and markers classified."""
    apply_flag = helm_apply_flag(ctx)  # refused before any release is touched
    summary, lease = ctx.findings.recipe_summary, ctx.externals.lease
    try:
        recovered = pending_releases(ctx).settle(summary, lease)
    except HelmReleasePendingError as exc:
        return StepResult.failed(exc.exit_code, exc.message, classification="helm-release-pending")
    if lease is not None and summary is not None:
        lease.announce(f"{c.namespace}/{c.name}" for c in summary.components)
    # An aicr known to print no per-component results is said to, whatever it printed.
    markers = classify.DeployMarkers(
        results_reported=ctx.behaviour.per_component_results,
        components=ComponentTable(total=bundled_components(ctx)),
    )
    exit_code = run_deploy_sh(ctx, markers, apply_flag)
    upgrade.record_installed(ctx)
    ctx.report.failed_components = markers.all_failed
    # What deploy.sh reported, for the operator: "13/15 installed, 2 failed (nfd, aws-efa)".
    tally = "pre-flight checks failed" if markers.preflight_failed else markers.counts()
    if recovered:
        tally += f"; recovered first: {', '.join(recovered)}"
    return _judged(ctx, exit_code, markers, tally)


def _judged(ctx: RunContext, exit_code: int, markers: classify.DeployMarkers, tally: str) -> StepResult:
    verdict = classify.classify_deploy(
        exit_code,
        failure_report=markers.failure_report,
        dra_deferred=markers.dra_deferred,
        best_effort=ctx.settings.deploy.best_effort,
    )
    if verdict.outcome is Outcome.FAILED:
        return StepResult.failed(
            verdict.exit_code,
            f"AICR install FAILED (deploy.sh exit {exit_code}): {verdict.reason}; {tally}",
            classification="deploy-failed",
        )
    if verdict.outcome is Outcome.WARNED:
        return StepResult.warned(f"{verdict.reason}; {tally}", classification="deploy-warned")
    return StepResult.ok(f"AICR install complete: {tally}", classification="deployed")


def bundled_components(ctx: RunContext) -> int:
    """How many components deploy.sh will install, for a deploy.sh that does not
    say (0.11, flat layout: one folder per component); 0 when unknown."""
    summary = ctx.findings.recipe_summary
    if summary is None or ctx.behaviour.per_component_results:
        return 0
    return sum(1 for c in summary.components if (ctx.bundle_dir / c.name).is_dir())


def pending_releases(ctx: RunContext) -> PendingReleases:
    """The run's view of the Helm releases an interrupted helm left pending."""
    return PendingReleases(
        ctx.externals.processes,
        ctx.config.environ,
        ctx.work,
        relay=aicr_relay(State.DEPLOY.value),
        recoveries=ctx.report.recoveries,
        progress=ctx.handlers.progress,
    )


def helm_apply_flag(ctx: RunContext) -> str:
    """The flag deploy.helmApply gives deploy.sh's helm (``helm.apply``); "" without a helm."""
    helm = real_helm(ctx.config.environ.get("PATH"))
    if helm is None:
        return ""
    log_path = ctx.work / "logs" / "helm-version.log"
    return apply.apply_flag(ctx.settings.deploy.helm_apply, helm, ctx.externals.processes, ctx.config.environ, log_path)


def run_deploy_sh(ctx: RunContext, markers: classify.DeployMarkers, apply_flag: str) -> int:
    """deploy.sh's exit code; its helm behind the guard (when there is a helm), which
    puts ``apply_flag`` (``helm_apply_flag``) into each install and upgrade; its output
    relayed and read by ``markers``, its progress published as it goes."""
    guard = install_guard(ctx.config.environ.get("PATH"), ctx.work / "helm-guard", apply_flag)
    env = child_env(ctx.config.environ)
    if guard is not None:
        env["PATH"] = os.pathsep.join([str(guard.bin_dir), env.get("PATH", "")])
    record = ctx.report.step(State.DEPLOY.value)
    table = markers.components

    def publish() -> None:
        record.progress = table.snapshot()
        ctx.handlers.progress()
        ctx.handlers.on_deploy_progress(record.progress)

    try:
        with ProgressPublisher(publish) as publisher:
            markers.on_component = publisher.changed
            result = ctx.run_child(
                State.DEPLOY,
                commands.deploy_argv(ctx.settings, ctx.bundle_dir),
                env=env,
                on_block=deploy_relay(State.DEPLOY.value, markers),
                cwd=ctx.bundle_dir,
                safe_stop=guard,
            )
    except InterruptedRun:
        table.finish(exit_code=143, interrupted=True)
        record.progress = table.snapshot()
        raise
    table.finish(exit_code=result.exit_code, interrupted=result.interrupted)
    record.progress = table.snapshot()
    return result.exit_code
