"""The snapshot step: ``aicr snapshot`` before deploy (an install) or before validate (a re-validation).

aicr deploys its agent Job in ``snapshot.namespace``; the agent writes the snapshot
to the ConfigMap ``aicr-runner-snapshot`` there (``-o cm://…``), which the
validate step then passes on (``validate --snapshot cm://…``, so validate starts no
agent of its own). Outside a cluster (``run --results-dir``) the snapshot is a file
in the work directory instead.

The runner keeps the readings it compares (``facts.json``) and the document
(``snapshot.yaml``, or ``snapshot.yaml.gz`` when large; left out when even that is
over the ConfigMap budget) in ``snapshot.configmap`` in its own namespace,
replaced each run: the previous run's facts are read from there first, and what
changed goes into the run summary and a ``ClusterChanged`` Event. When validate
writes an evidence directory, the document goes into it too (``snapshot.yaml``,
beside aicr's ``summary-bundle/``, whose signed contents it does not touch), so
the evidence the runner keeps carries the cluster it was taken on.

Advisory, always: a diagnostics snapshot never blocks an install or a
re-validation. A failed snapshot is a warned step (its reason in the summary's
warnings) and validate then takes its own snapshot, as it does without one.
"""

from __future__ import annotations

import json
import shlex
from collections import deque
from pathlib import Path

from aicr_runner.aicr import argv as commands
from aicr_runner.aicr import recipe, snapshot_diff
from aicr_runner.errors import RunnerError
from aicr_runner.run.machine import State, StepResult
from aicr_runner.steps.context import RunContext
from aicr_runner.text import cut_bytes, printable

__all__ = ["AGENT_CONFIGMAP", "EVIDENCE_FILE", "into_evidence", "planned", "take", "validate_argv"]

#: The ConfigMap the agent writes in ``snapshot.namespace`` (replaced each run).
AGENT_CONFIGMAP = commands.SNAPSHOT_AGENT_NAME
#: The snapshot's name in the evidence directory.
EVIDENCE_FILE = "snapshot.yaml"
_TAIL_LINES = 60
#: A damaged ``facts.json`` kept aside under this key (bounded), then replaced.
DAMAGED_KEY = "facts.damaged.json"
_ASIDE_BYTES = 100_000
_ADVISORY = "advisory: the run goes on, validate takes its own snapshot"


def validate_argv(ctx: RunContext, aicr: Path) -> list[str]:
    """``aicr validate`` with the run's snapshot, when the snapshot step took one."""
    f = ctx.findings
    return commands.validate_argv(
        ctx.settings, aicr, ctx.recipe_path, f.pack, ctx.ctrf_path, ctx.evidence_dir, snapshot=f.snapshot
    )


def take(ctx: RunContext, aicr: Path) -> StepResult:
    """Take the snapshot, keep it, compare it with the previous one."""
    snap = ctx.settings.snapshot
    if not snap.enabled:
        return StepResult.skipped("snapshot.enabled=false")
    output = _output(ctx)
    version = _version(ctx)
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    result = ctx.run_child(State.SNAPSHOT, commands.snapshot_argv(ctx.settings, aicr, output, version), tail=tail)
    if result.exit_code != 0:
        reason = recipe.last_error(list(tail)) or "no error line"
        return _advisory(f"aicr snapshot failed (exit {result.exit_code}): {reason}", "snapshot-failed")
    text = _read(ctx, output)
    if not text:
        return _advisory(f"aicr snapshot exited 0 but {output} holds no snapshot", "snapshot-missing")
    try:
        found = snapshot_diff.facts(text)
    except snapshot_diff.SnapshotFormatError as exc:
        return _advisory(f"the snapshot in {output} is unreadable: {exc}", "snapshot-unreadable")
    ctx.findings.snapshot = output
    ctx.findings.snapshot_document = text
    said = f"snapshot {output}: {snapshot_diff.describe(found)}"
    return _compared(ctx, text, found, said)


def into_evidence(ctx: RunContext) -> None:
    """The run's snapshot into the evidence directory validate wrote (none written: nothing)."""
    text = ctx.findings.snapshot_document
    if text and ctx.evidence_dir.is_dir():
        (ctx.evidence_dir / EVIDENCE_FILE).write_text(text, encoding="utf-8")


def planned(ctx: RunContext) -> StepResult:
    """A plan's snapshot step: no snapshot; what a Job would start (the agent's image, mode and placement)."""
    snap = ctx.settings.snapshot
    if not snap.enabled:
        return StepResult.skipped("plan: no snapshot")
    argv = commands.snapshot_argv(ctx.settings, "aicr", f"cm://{snap.namespace}/{AGENT_CONFIGMAP}", _version(ctx))
    return StepResult.skipped(f"plan: no snapshot; in a Job the run would start: {shlex.join(argv)}")


def _version(ctx: RunContext) -> str:
    """The running aicr's version (the pin until the fetch step told)."""
    return ctx.findings.aicr_version.text if ctx.findings.aicr_version else ctx.settings.aicr.version


def _advisory(reason: str, classification: str) -> StepResult:
    return StepResult.warned(f"{reason} ({_ADVISORY})", classification=classification)


def _output(ctx: RunContext) -> str:
    if ctx.externals.read_configmap is not None:
        return f"cm://{ctx.settings.snapshot.namespace}/{AGENT_CONFIGMAP}"
    # aicr picks a reader by the extension: a snapshot file is always *.yaml.
    path = ctx.work / "snapshot.yaml"
    path.unlink(missing_ok=True)
    return str(path)


def _read(ctx: RunContext, output: str) -> str:
    """The document the agent wrote; "" when there is none."""
    if not output.startswith("cm://"):
        path = Path(output)
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    namespace, _, name = output.removeprefix("cm://").partition("/")
    assert ctx.externals.read_configmap is not None  # noqa: S101 - a cm:// output is chosen only with a reader
    data = ctx.externals.read_configmap(namespace, name) or {}
    return data.get(f"snapshot.{data.get('format', 'yaml')}") or data.get("snapshot.yaml", "")


def _compared(ctx: RunContext, text: str, found: dict[str, str], said: str) -> StepResult:
    """The previous run's facts read, this run's kept, what changed said."""
    name = ctx.settings.snapshot.configmap
    if not name:
        return StepResult.ok(f"{said}; not kept, not compared (snapshot.configmap is empty)")
    try:
        stored = ctx.sink.get_data(name)
    except RunnerError as exc:
        return _kept(ctx, text, found, f"{said}; the previous snapshot was not read ({exc.message})")
    aside = {DAMAGED_KEY: stored[DAMAGED_KEY]} if DAMAGED_KEY in stored else {}
    if not stored.get("facts.json"):
        return _kept(ctx, text, found, f"{said}; the first snapshot kept: nothing to compare", aside)
    previous = _previous(stored["facts.json"])
    if previous is None:
        where = f"{ctx.sink.describe(name)} ({DAMAGED_KEY})"
        damaged = f"the previous snapshot's facts.json is damaged: kept aside in {where}"
        ctx.report.warnings.append(f"{damaged} and replaced")
        aside = {DAMAGED_KEY: cut_bytes(printable(stored["facts.json"]), _ASIDE_BYTES)}
        return _kept(ctx, text, found, f"{said}; {damaged}, not compared", aside)
    since, facts = previous
    changes = snapshot_diff.changes(facts, found)
    if changes:
        ctx.report.cluster_changes = changes
        ctx.report.cluster_changed_since = since or "the previous snapshot"
        ctx.handlers.on_cluster_change(changes, ctx.report.cluster_changed_since)
        return _kept(ctx, text, found, f"{said}; cluster changed since {since or 'the previous snapshot'}", aside)
    return _kept(ctx, text, found, f"{said}; unchanged since {since or 'the previous snapshot'}", aside)


def _previous(stored: str) -> tuple[str, dict[str, str]] | None:
    """The stored facts' time and facts; None when ``facts.json`` is damaged."""
    try:
        previous = json.loads(stored)
    except (ValueError, RecursionError):
        return None
    if not isinstance(previous, dict) or not isinstance(previous.get("facts"), dict):
        return None
    return str(previous.get("time", "")), snapshot_diff.facts_of(stored)


def _kept(
    ctx: RunContext, text: str, found: dict[str, str], said: str, aside: dict[str, str] | None = None
) -> StepResult:
    """This snapshot in ``snapshot.configmap``: its facts always (and a damaged
    ``facts.json`` kept aside), the document when it fits."""
    name = ctx.settings.snapshot.configmap
    record = {"time": ctx.externals.clock().isoformat(), "source": ctx.findings.snapshot, "facts": found}
    data = {**(aside or {}), "facts.json": json.dumps(record, indent=2, sort_keys=True)}
    fitted = ctx.sink.fit(data, large={"snapshot.yaml": text.encode()})
    try:
        ctx.sink.put(name, data=fitted.data, binary_data=fitted.binary_data or None)
    except RunnerError as exc:
        return _advisory(f"{said}; not kept: {exc.message}", "snapshot-not-kept")
    where = ctx.sink.describe(name)
    if fitted.dropped:
        return StepResult.warned(f"{said}; kept in {where}: facts only (the document is over budget even compressed)")
    return StepResult.ok(f"{said}; kept in {where}")
