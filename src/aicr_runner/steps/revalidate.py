"""The steps only a validation-only run (``aicr-runner validate``) has, or runs its own way.

A validation-only run validates the cluster against the recipe an install
recorded: it never resolves the recipe again, renders a bundle, or deploys. It
only looks at the install Lease: an install in progress ends it at once (a
half-installed cluster is never validated, and the install never waits for it).
"""

from __future__ import annotations

import hashlib

from aicr_runner.aicr import recipe
from aicr_runner.errors import ExitCode
from aicr_runner.run.machine import StepResult
from aicr_runner.steps.context import RunContext

__all__ = ["no_install_running", "recorded_recipe"]


def no_install_running(ctx: RunContext) -> StepResult:
    """The install Lease read once: held by a live install, the run ends (exit 33)."""
    lease = ctx.lease
    if lease is None:
        return StepResult.skipped("no install Lease to look at (outside a cluster, or lease.name is empty)")
    holder = lease.live_holder()
    if holder is not None:
        return StepResult.failed(
            ExitCode.INSTALL_IN_PROGRESS,
            f"install in progress, not validated: the install Lease {lease.where} is held by {holder}; "
            "the next scheduled validation checks the installed cluster",
            classification="install-in-progress",
        )
    return StepResult.ok(f"no install in progress (install Lease {lease.where} is free)")


def recorded_recipe(ctx: RunContext) -> StepResult:
    """The recipe recorded at install: ``--recipe``, a file or the recipe ConfigMap
    mounted in the pod (``recipe.yaml``, or ``recipe.yaml.gz`` when stored compressed)."""
    given = ctx.recipe_file
    if given is None:
        return StepResult.skipped("not a validation-only run")
    raw = recipe.read_recorded(given)
    ctx.recipe_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.recipe_path.write_bytes(raw)
    summary = recipe.load_recipe(ctx.recipe_path)
    ctx.findings.recipe_summary = summary
    ctx.report.components = [c.as_row() for c in summary.components]
    digest = hashlib.sha256(raw).hexdigest()
    ctx.findings.recipe_digest = f"sha256:{digest}"
    return StepResult.ok(
        f"recipe recorded at install: {given} (sha256:{digest[:12]}, {len(summary.components)} components)"
    )
