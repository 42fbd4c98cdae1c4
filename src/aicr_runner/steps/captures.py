"""The captures of what a run found: the recipe (before anything is deployed) and the verdict.

Each fits its payload into the sink's budget (``Sink.fit``) and says what it cut:
a recipe over it even compressed leaves the summary only (a warning); a verdict
over it fails the capture (exit 26), never silently dropped.
"""

from __future__ import annotations

from aicr_runner.aicr import recipe as recipes
from aicr_runner.errors import CaptureError
from aicr_runner.mirror import rewrite as mirror_sources
from aicr_runner.run.machine import UNREADABLE, State, StepResult
from aicr_runner.steps import upgrade
from aicr_runner.steps.context import RunContext

__all__ = ["recipe", "verdict"]


def recipe(ctx: RunContext) -> StepResult:
    """The resolved recipe and its summary in the recipe ConfigMap (advisory: nothing is deployed yet)."""
    name = ctx.settings.recipe.configmap
    if not name:
        return StepResult.skipped("recipe capture is off (the recipe ConfigMap name is empty)")
    if ctx.findings.recipe_summary is None:
        return StepResult.skipped("no recipe was resolved")
    pack = ctx.settings.pack.ref or ctx.config.pack_dir
    text = recipes.summary_text(
        ctx.settings, pack=pack, completion_line=ctx.findings.completion_line, summary=ctx.findings.recipe_summary
    )
    raw = ctx.recipe_path.read_bytes() if ctx.recipe_path.is_file() else b""
    upgrade.read_installed(ctx)
    summary = {"summary.txt": text, **mirror_sources.recorded(ctx.recipe_path)}
    # The installed recipe first: a refused upgrade's next run crosses from it.
    fitted = ctx.sink.fit(summary, large={**upgrade.installed_data(ctx, raw), "recipe.yaml": raw})
    try:
        ctx.sink.put(name, data=fitted.data, binary_data=fitted.binary_data or None)
        ctx.findings.recipe_capture = (fitted.data, fitted.binary_data)
    except CaptureError as exc:
        # Advisory, as in the bash chart: this runs before anything is deployed.
        return StepResult.warned(f"recipe capture failed: {exc}")
    where = ctx.sink.describe(name)
    if fitted.dropped:
        return StepResult.warned(
            f"recipe written to {where} (recipe.yaml is {len(raw)} bytes, over budget even compressed: summary only)"
        )
    compressed = f" (recipe.yaml is {len(raw)} bytes: stored gzip-compressed as recipe.yaml.gz)"
    return StepResult.ok(f"recipe written to {where}{compressed if fitted.compressed else ''}")


def verdict(ctx: RunContext, validate_exit: int | None) -> StepResult:
    """The CTRF verdict in the result ConfigMap, compared with the history of the same recipe."""
    if validate_exit is None:
        return StepResult.skipped("validation did not run")
    if not ctx.ctrf_path.is_file():
        return StepResult.warned(f"no ctrf.json (exit={validate_exit})")
    from aicr_runner.steps import revalidate  # only a run that validated gets here

    lost = revalidate.preempted(ctx)
    if lost is not None:
        return lost
    name = ctx.settings.validate.result_configmap
    if not name:
        return StepResult.skipped("verdict capture is off (the result ConfigMap name is empty)")
    if ctx.report.step(State.VALIDATE.value).classification == UNREADABLE:
        return revalidate.unreadable_captured(ctx, name)
    raw, change = revalidate.record_history(ctx, ctx.ctrf_path.read_bytes())
    fitted = ctx.sink.fit({}, large={"ctrf.json": raw})
    if fitted.dropped:
        raise CaptureError(f"ctrf.json is {len(raw)} bytes, over the ConfigMap budget even compressed")
    ctx.sink.put(name, data=fitted.data, binary_data=fitted.binary_data or None)
    return revalidate.captured(f"CTRF verdict written to {ctx.sink.describe(name)}", change)
