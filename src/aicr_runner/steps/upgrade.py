"""The upgrade check: an install that crosses an aicr pin runs ``aicr upgrade-check``
before the install Lease and the deploy, and stops before it breaks a converged cluster.

What the release installed last is the recipe ConfigMap's ``recipe.yaml``, read by
the recipe capture before it writes the new one. Until a deploy has run, the
capture keeps the installed one beside it (``installed-recipe.yaml``): a stopped
upgrade re-run with the same values still crosses from what is installed, never
from the recipe it refused to install.

The check's report is kept in ``<recipe ConfigMap>-upgrade-check``, in the run
report (``upgradeCheck``, and the summary), in the verdict report (one result per
component) and in the evidence ConfigMap of a run that went on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from aicr_runner.aicr import capabilities, recipe, upgrade_check
from aicr_runner.aicr.crossing import Crossing, Move, MoveKind, RecipeFacts, crossing_of
from aicr_runner.aicr.upgrade_check import Action, Assessment, Verdict
from aicr_runner.errors import AicrContractError, ExitCode, RecipeFormatError, RunnerError
from aicr_runner.kube.openreports import Entry
from aicr_runner.kube.sink import Sink
from aicr_runner.run.machine import State, StepResult
from aicr_runner.settings.config import UnknownPolicy
from aicr_runner.steps.context import Mode, RunContext
from aicr_runner.text import one_line

__all__ = [
    "INSTALLED_KEY",
    "blocked",
    "check",
    "entries",
    "installed_data",
    "planned",
    "read_installed",
    "record_installed",
    "report_name",
]

#: The recipe ConfigMap's key for the installed recipe while a newer one waits for its deploy
#: (empty once deployed: recipe.yaml is the installed one).
INSTALLED_KEY = "installed-recipe.yaml"
#: Warning Event reasons on the Job.
STOPPED_REASON = "UpgradeStopped"
NOT_ASSESSED_REASON = "UpgradeNotAssessed"
UNKNOWN_WARNED_REASON = "UpgradeUnknownComponents"
#: Report results by verdict (blocked fails; manual, unknown and not assessed warn).
_RESULT = {
    Verdict.SAFE: "pass",
    Verdict.MANUAL: "warn",
    Verdict.BLOCKED: "fail",
    Verdict.UNKNOWN: "warn",
    Verdict.UNVERSIONED: "warn",
    Verdict.NOT_ASSESSED: "warn",
}


def report_name(ctx: RunContext) -> str:
    """The check's ConfigMap, beside the recipe's."""
    return f"{ctx.settings.recipe.configmap}-upgrade-check"


def read_installed(ctx: RunContext) -> None:
    """The recipe the release installed last, before the capture replaces it. One
    that cannot be read is never taken for a first install: a damaged compressed
    copy is an unknown crossing (``upgradeCheck.onUnknown``); an API that does not
    answer fails the check with the API's exit code (the Job retries)."""
    name = ctx.settings.recipe.configmap
    if not name or ctx.mode is not Mode.RUN:
        return
    try:
        ctx.findings.installed_recipe = _recorded(ctx.sink, name)
    except RunnerError as exc:
        ctx.findings.installed_unread = exc


def _recorded(sink: Sink, name: str) -> bytes | None:
    """The kept installed recipe, else ``recipe.yaml`` (in that order: a refused
    upgrade's recipe.yaml is not what is installed), each as text or gzip-compressed
    under ``<key>.gz`` (a recipe over the ConfigMap's budget); None on a first install."""
    data, binary = sink.get_payload(name)
    for key in (INSTALLED_KEY, "recipe.yaml"):
        if data.get(key):
            return data[key].encode()
        if binary.get(f"{key}.gz"):
            return recipe.inflate_recorded(binary[f"{key}.gz"], f"{sink.describe(name)} {key}.gz")
    return None


def installed_data(ctx: RunContext, raw: bytes) -> dict[str, bytes]:
    """What the capture keeps beside the new recipe (fitted like it: as text, or
    compressed): the installed one, while it differs."""
    installed = ctx.findings.installed_recipe
    if installed is None or installed == raw:
        return {}
    return {INSTALLED_KEY: installed}


def record_installed(ctx: RunContext) -> None:
    """Once deploy.sh has run, the captured recipe is the installed one: the kept
    installed recipe is dropped (advisory: a failure is a warning)."""
    captured = ctx.findings.recipe_capture
    kept_gz = f"{INSTALLED_KEY}.gz"
    if captured is None or not (captured[0].get(INSTALLED_KEY) or captured[1].get(kept_gz)):
        return
    # Empty, not dropped: a results directory keeps the keys a write leaves out.
    data = {**captured[0], INSTALLED_KEY: ""}
    binary = {**captured[1], **({kept_gz: b""} if kept_gz in captured[1] else {})}
    try:
        ctx.sink.put(ctx.settings.recipe.configmap, data=data, binary_data=binary or None)
    except RunnerError as exc:
        ctx.report.warnings.append(f"the recipe ConfigMap still names the previous recipe as installed: {exc}")


def _installed(ctx: RunContext, raw: bytes | None, source: str) -> tuple[RecipeFacts | None, str]:
    """What the install crosses from (``raw``, read from ``source``), and what aicr is told (``--from``)."""
    if raw is None:
        return None, ""
    path = ctx.work / "installed-recipe.yaml"
    path.write_bytes(raw)
    return RecipeFacts.of(raw, where=source), str(path)


def check(ctx: RunContext, aicr: Path) -> StepResult:
    """An install's upgrade check: from the recipe the release installed last."""
    ctx.upgrade_report_path.unlink(missing_ok=True)
    if not ctx.settings.deploy.enabled:
        return StepResult.skipped("assert-only run: nothing is deployed, nothing crossed")
    unread = ctx.findings.installed_unread
    if isinstance(unread, RecipeFormatError):
        return _unread(ctx, one_line(str(unread), 500))
    if unread is not None:
        # The API did not answer: the Job's next pod tries again; nothing is deployed meanwhile.
        return StepResult.failed(
            unread.exit_code,
            f"the recorded recipe could not be read, so what this install crosses is not known; nothing is "
            f"deployed: {one_line(str(unread), 500)}",
            classification="upgrade-unread",
        )
    return _checked(ctx, aicr, lambda: _installed(ctx, ctx.findings.installed_recipe, INSTALLED_KEY))


def planned(ctx: RunContext, aicr: Path) -> StepResult:
    """``plan --upgrade-from``: from the recipe it names (a file; ``cm://ns/name`` aicr reads itself)."""
    ctx.upgrade_report_path.unlink(missing_ok=True)
    source = ctx.config.upgrade_from
    if not source:
        return StepResult.skipped("plan: no --upgrade-from")
    if source.startswith("cm://"):
        return _checked(ctx, aicr, lambda: (None, source))
    return _checked(ctx, aicr, lambda: _installed(ctx, Path(source).read_bytes(), source))


def _checked(ctx: RunContext, aicr: Path, installed_by: Callable[[], tuple[RecipeFacts | None, str]]) -> StepResult:
    """The crossing from what ``installed_by`` reads (and what aicr is told) to the resolved recipe, judged."""
    if ctx.findings.recipe_summary is None or not ctx.recipe_path.is_file():
        return StepResult.skipped("no recipe")
    target = RecipeFacts.of(ctx.recipe_path.read_bytes(), where=str(ctx.recipe_path))
    installed, source = installed_by()
    if source.startswith("cm://"):
        # plan --upgrade-from cm://: aicr reads it; every component it reports is a move.
        crossing = Crossing(RecipeFacts("", "", (), unread=source), target, ())
    else:
        found = crossing_of(installed, target)
        if found is None:
            return StepResult.skipped(
                "first install: no recorded recipe to cross from"
                if installed is None
                else f"recipe unchanged since the last install ({target.digest[:19]}): no crossing"
            )
        crossing = found
    # The moves are in the summary whatever the check then says (or fails to say).
    ctx.report.upgrade_check = {"crossing": crossing.text(), **crossing.to_dict()}
    version = ctx.findings.aicr_version
    if version is not None and not capabilities.has_upgrade_check(version):
        return _not_assessed(ctx, crossing, f"aicr {version.text}")
    return _assess(ctx, aicr, crossing, source)


def _unread(ctx: RunContext, why: str) -> StepResult:
    """The installed recipe could not be read: what is crossed is unknown, never a first install."""
    message = f"the recorded recipe was not read, so what this install crosses is unknown: {why}"
    if ctx.settings.upgrade_check.on_unknown is UnknownPolicy.WARN:
        ctx.handlers.on_upgrade_check(UNKNOWN_WARNED_REASON, message)
        return StepResult.warned(f"{message}; going on (upgradeCheck.onUnknown=warn)", classification="upgrade-unknown")
    ctx.handlers.on_upgrade_check(STOPPED_REASON, message)
    return StepResult.failed(
        ExitCode.UPGRADE_STOPPED,
        f"upgrade stopped before deploy: {message}; set upgradeCheck.onUnknown=warn to go on",
        classification="upgrade-unknown",
    )


def _not_assessed(ctx: RunContext, crossing: Crossing, aicr: str) -> StepResult:
    assessment = upgrade_check.not_assessed(crossing, ctx.settings.upgrade_check, aicr)
    _keep(ctx, assessment)
    message = f"{aicr} has no upgrade-check: this crossing was not assessed ({crossing.text()})"
    ctx.handlers.on_upgrade_check(NOT_ASSESSED_REASON, message)
    if ctx.settings.upgrade_check.require_assessment:
        return StepResult.failed(
            ExitCode.UPGRADE_STOPPED,
            f"upgrade stopped before deploy: {message}; upgradeCheck.requireAssessment is set",
            classification="upgrade-not-assessed",
        )
    return StepResult.warned(message, classification="upgrade-not-assessed")


def _run(ctx: RunContext, aicr: Path, source: str) -> tuple[upgrade_check.ComponentVerdict, ...]:
    output = ctx.work / "aicr-upgrade-check.json"
    output.unlink(missing_ok=True)
    argv = upgrade_check.argv(aicr, source, ctx.recipe_path, output)
    result = ctx.run_child(State.UPGRADE_CHECK, argv)
    if result.exit_code not in (0, upgrade_check.CONFLICT_EXIT):
        raise RunnerError(f"aicr upgrade-check failed (exit {result.exit_code})", exit_code=result.exit_code)
    if not output.is_file():
        raise AicrContractError(
            f"aicr broke its contract: aicr upgrade-check exited {result.exit_code} "
            f"but wrote no report (--output {output})"
        )
    return upgrade_check.parse_report(output.read_text(encoding="utf-8", errors="replace"))


def _assess(ctx: RunContext, aicr: Path, crossing: Crossing, source: str) -> StepResult:
    components = _run(ctx, aicr, source)
    if crossing.installed.unread:
        # plan --upgrade-from cm://: aicr read what it crosses from; its report names the moves.
        moves = tuple(Move(c.name, MoveKind.MOVED, c.source, c.target) for c in components if c.source != c.target)
        crossing = Crossing(crossing.installed, crossing.target, moves)
    judged = tuple(upgrade_check.judge(components, ctx.settings.upgrade_check))
    assessment = Assessment(crossing, judged)
    _keep(ctx, assessment)
    stops = assessment.stops
    if stops:
        message = f"{assessment.headline} (" + "; ".join(f"{j.component.name}: {j.todo}" for j in stops) + ")"
        ctx.handlers.on_upgrade_check(STOPPED_REASON, message)
        worst = "upgrade-blocked" if any(j.component.verdict is Verdict.BLOCKED for j in stops) else "upgrade-stopped"
        return StepResult.failed(ExitCode.UPGRADE_STOPPED, f"stopped before deploy: {message}", classification=worst)
    warned = [j for j in judged if j.action is Action.WARN]
    if warned:
        message = "crossing not fully judged, going on (upgradeCheck.onUnknown=warn): " + ", ".join(
            j.component.move for j in warned
        )
        ctx.handlers.on_upgrade_check(UNKNOWN_WARNED_REASON, message)
        return StepResult.warned(message, classification="upgrade-unknown")
    acknowledged = sum(1 for j in judged if j.component.verdict is Verdict.MANUAL)
    note = f", {acknowledged} manual move(s) acknowledged" if acknowledged else ""
    return StepResult.ok(f"crossing assessed ({crossing.text()}): {len(judged)} component(s) may go on{note}")


def _keep(ctx: RunContext, assessment: Assessment) -> None:
    """The report in the run report, the work directory (the evidence ConfigMap
    takes it from there) and its own ConfigMap (advisory: a failed write is a warning)."""
    ctx.findings.upgrade = assessment
    body = assessment.to_dict()
    ctx.report.upgrade_check = body
    text = json.dumps(body, indent=2, ensure_ascii=False)
    ctx.upgrade_report_path.write_text(text, encoding="utf-8")
    if not ctx.settings.recipe.configmap:
        return
    table = upgrade_check.table(assessment.judged)
    try:
        ctx.sink.put(
            report_name(ctx),
            data={ctx.upgrade_report_path.name: text, "summary.txt": f"{body['crossing']}\n\n{table}\n"},
        )
    except RunnerError as exc:
        ctx.report.warnings.append(f"the upgrade check's report was not kept: {exc}")
    ctx.handlers.progress()


def blocked(ctx: RunContext) -> tuple[str, ...]:
    """The components the upgrade check found blocked (they stopped the install)."""
    assessment = ctx.findings.upgrade
    if assessment is None:
        return ()
    return tuple(j.component.name for j in assessment.stops if j.component.verdict is Verdict.BLOCKED)


def entries(ctx: RunContext) -> list[Entry]:
    """One verdict report result per component the check judged."""
    assessment = ctx.findings.upgrade
    if assessment is None:
        return []
    return [
        Entry(
            j.component.name,
            "upgrade-check",
            "upgrade-check",
            _RESULT[j.component.verdict],
            j.todo,
            {"from": j.component.source, "to": j.component.target, "verdict": j.component.verdict.value},
        )
        for j in assessment.judged
    ]
