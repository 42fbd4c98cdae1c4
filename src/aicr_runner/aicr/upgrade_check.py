"""``aicr upgrade-check``: its command line, its JSON report, and what the runner
does with each component's verdict.

The contract (aicr 1.x, present by v1.0.0): ``--from`` a recipe, a bundle
directory, ``cm://ns/name`` or ``cluster``; ``--to`` the new recipe;
``--deployer helm``; ``--fail-on-error`` (default true); ``-t json``; exit 0
when every component is safe, 2 (CONFLICT) when any needs attention, the report
written first either way. Per component: safe, manual (with steps), blocked
(with the earliest recorded starting point), unknown, unversioned.

The JSON field names below are the runner's reading of the 1.x documentation
(no 1.x binary runs here); a report without them is aicr breaking its contract
(exit 30), never a silent pass.

What the runner does (``judge``): safe goes on; manual stops unless
``upgradeCheck.acknowledge`` names that exact move (component, from, to);
blocked always stops; unknown and unversioned follow ``upgradeCheck.onUnknown``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from aicr_runner.aicr.crossing import Crossing, MoveKind
from aicr_runner.errors import AicrContractError
from aicr_runner.run.report import upgrade_table
from aicr_runner.settings.config import UnknownPolicy, UpgradeCheckSettings

__all__ = [
    "CONFLICT_EXIT",
    "Action",
    "Assessment",
    "ComponentVerdict",
    "Judged",
    "Verdict",
    "argv",
    "headline",
    "judge",
    "not_assessed",
    "parse_report",
    "table",
]

#: aicr's CONFLICT: some component needs attention (the report is written first).
CONFLICT_EXIT = 2


class Verdict(StrEnum):
    SAFE = "safe"
    MANUAL = "manual"
    BLOCKED = "blocked"
    UNKNOWN = "unknown"
    UNVERSIONED = "unversioned"
    #: Not aicr's: an aicr without upgrade-check (0.x) could not judge the move.
    NOT_ASSESSED = "not-assessed"


class Action(StrEnum):
    GO = "go"
    WARN = "warn"
    STOP = "stop"


@dataclass(frozen=True)
class ComponentVerdict:
    name: str
    source: str
    target: str
    verdict: Verdict
    #: What to do by hand (manual).
    steps: tuple[str, ...] = ()
    #: The earliest version a move to ``target`` is recorded from (blocked).
    earliest_from: str = ""
    #: What to read (release notes, UPGRADING.md).
    reference: str = ""

    @property
    def move(self) -> str:
        return f"{self.name} {self.source or '-'} → {self.target or '-'}"


@dataclass(frozen=True)
class Judged:
    component: ComponentVerdict
    action: Action
    #: What the user does about it (the plan table's last column, the report result's message).
    todo: str

    def to_dict(self) -> dict[str, Any]:
        c = self.component
        return {
            "component": c.name,
            "from": c.source,
            "to": c.target,
            "verdict": c.verdict.value,
            "action": self.action.value,
            "todo": self.todo,
            "steps": list(c.steps),
            "earliestFrom": c.earliest_from,
            "reference": c.reference,
        }


@dataclass(frozen=True)
class Assessment:
    """A crossing and what was made of it: each component judged, or, for an aicr
    without upgrade-check, each move marked not assessed."""

    crossing: Crossing
    judged: tuple[Judged, ...]
    #: False: the running aicr has no upgrade-check.
    assessed: bool = True

    @property
    def stops(self) -> tuple[Judged, ...]:
        return tuple(j for j in self.judged if j.action is Action.STOP)

    @property
    def headline(self) -> str:
        return headline(self.judged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "crossing": self.crossing.text(),
            **self.crossing.to_dict(),
            "assessed": self.assessed,
            "headline": self.headline,
            "components": [j.to_dict() for j in self.judged],
        }


def not_assessed(crossing: Crossing, settings: UpgradeCheckSettings, aicr: str) -> Assessment:
    """Each move of a crossing an aicr without upgrade-check cannot judge: a warning,
    or (upgradeCheck.requireAssessment) a stop."""
    action = Action.STOP if settings.require_assessment else Action.WARN
    todo = f"not assessed ({aicr} has no upgrade-check): read its release notes" + (
        "; upgradeCheck.requireAssessment stops the install" if settings.require_assessment else ""
    )
    judged = tuple(
        Judged(
            ComponentVerdict(
                m.component,
                m.source if m.kind is not MoveKind.ADDED else "",
                m.target if m.kind is not MoveKind.REMOVED else "",
                Verdict.NOT_ASSESSED,
            ),
            action,
            todo,
        )
        for m in crossing.moves
    )
    return Assessment(crossing, judged, assessed=False)


def argv(aicr: Path, source: str, target: Path, output: Path) -> list[str]:
    """``aicr upgrade-check`` of the move from ``source`` (a recipe file or ``cm://``)
    to ``target``, JSON to ``output``; --fail-on-error stays at its default (true)."""
    return [
        str(aicr),
        "upgrade-check",
        "--from",
        source,
        "--to",
        str(target),
        "--deployer",
        "helm",
        "--format",
        "json",
        "--output",
        str(output),
    ]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _component(entry: object, index: int) -> ComponentVerdict:
    if not isinstance(entry, dict) or not entry.get("name") or "verdict" not in entry:
        raise AicrContractError(f"aicr upgrade-check report: components[{index}] has no name or no verdict")
    try:
        verdict = Verdict(_text(entry["verdict"]).lower())
    except ValueError:
        verdict = Verdict.UNKNOWN  # a verdict this runner does not know is one it cannot judge
    if verdict is Verdict.NOT_ASSESSED:
        verdict = Verdict.UNKNOWN
    steps = entry.get("steps") or []
    return ComponentVerdict(
        name=_text(entry["name"]),
        source=_text(entry.get("from")),
        target=_text(entry.get("to")),
        verdict=verdict,
        steps=tuple(_text(step) for step in steps) if isinstance(steps, list) else (_text(steps),),
        earliest_from=_text(entry.get("earliestFrom")),
        reference=_text(entry.get("reference")),
    )


def parse_report(text: str) -> tuple[ComponentVerdict, ...]:
    """The components of aicr's JSON report; ``AicrContractError`` (exit 30) when it is none."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise AicrContractError(f"aicr upgrade-check report is not JSON: {exc}") from exc
    components = doc.get("components") if isinstance(doc, dict) else None
    if not isinstance(components, list):
        raise AicrContractError("aicr upgrade-check report has no components list")
    return tuple(_component(entry, index) for index, entry in enumerate(components))


def _manual(c: ComponentVerdict, settings: UpgradeCheckSettings) -> Judged:
    if settings.acknowledged(c.name, c.source, c.target):
        return Judged(c, Action.GO, f"acknowledged in upgradeCheck.acknowledge ({c.name}:{c.source}:{c.target})")
    steps = "; ".join(c.steps) or "the steps upstream lists"
    return Judged(
        c,
        Action.STOP,
        f"do by hand: {steps}; then add {{component: {c.name}, from: {c.source}, to: {c.target}}} "
        "to upgradeCheck.acknowledge",
    )


def _blocked(c: ComponentVerdict) -> Judged:
    start = "a recorded starting point"
    if c.earliest_from:
        start = f"{c.earliest_from} (the earliest recorded starting point)"
    read = f"; read {c.reference}" if c.reference else ""
    return Judged(
        c, Action.STOP, f"cannot be crossed from {c.source or '-'}: upgrade to {start} first, then to {c.target}{read}"
    )


def _unjudged(c: ComponentVerdict, settings: UpgradeCheckSettings) -> Judged:
    why = {
        Verdict.UNVERSIONED: "aicr cannot tell the installed version",
        Verdict.NOT_ASSESSED: "this aicr has no upgrade-check",
    }.get(c.verdict, "aicr has no transition record for this move")
    if settings.on_unknown is UnknownPolicy.WARN:
        return Judged(c, Action.WARN, f"{why}; going on (upgradeCheck.onUnknown=warn)")
    return Judged(c, Action.STOP, f"{why}: check its release notes, then set upgradeCheck.onUnknown=warn to go on")


def judge(components: Sequence[ComponentVerdict], settings: UpgradeCheckSettings) -> list[Judged]:
    judged: list[Judged] = []
    for c in components:
        if c.verdict is Verdict.SAFE:
            judged.append(Judged(c, Action.GO, "nothing: safe"))
        elif c.verdict is Verdict.MANUAL:
            judged.append(_manual(c, settings))
        elif c.verdict is Verdict.BLOCKED:
            judged.append(_blocked(c))
        else:
            judged.append(_unjudged(c, settings))
    return judged


def headline(judged: Sequence[Judged]) -> str:
    """``upgrade blocked: gpu-operator v25.10.1 → v26.3.3; manual: nfd v0.17.3 → v0.18.2``
    (what stops the install, worst first); "" when nothing stops it."""
    parts: list[str] = []
    for verdicts, first, later in (
        ((Verdict.BLOCKED,), "upgrade blocked", "blocked"),
        ((Verdict.MANUAL,), "upgrade needs manual steps", "manual"),
        ((Verdict.UNKNOWN, Verdict.UNVERSIONED, Verdict.NOT_ASSESSED), "upgrade not judged", "not judged"),
    ):
        moves = [j.component.move for j in judged if j.action is Action.STOP and j.component.verdict in verdicts]
        if moves:
            parts.append(f"{later if parts else first}: {', '.join(moves)}")
    return "; ".join(parts)


def table(judged: Sequence[Judged]) -> str:
    """One line per component: from, to, verdict, what to do."""
    return upgrade_table([j.to_dict() for j in judged])
