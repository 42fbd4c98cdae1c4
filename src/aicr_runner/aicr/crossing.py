"""Whether an install crosses an aicr pin: what it is about to install against what
the release installed last (the recorded recipe).

A recipe's facts are its aicr version (``metadata.version``), its digest (sha256 of
the document as recorded) and each component's chart and version. No recorded
recipe (a first install) or the same digest (an unchanged recipe) is no crossing.
Anything else is one, even when only the aicr version moved: ``aicr upgrade-check``
then judges each component.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from aicr_runner.aicr.recipe import parse_recipe

__all__ = ["Crossing", "Move", "MoveKind", "RecipeFacts", "crossing_of"]


@dataclass(frozen=True)
class Pin:
    name: str
    chart: str
    version: str


@dataclass(frozen=True)
class RecipeFacts:
    """What a recorded (or about to be installed) recipe pins."""

    aicr_version: str
    digest: str
    components: tuple[Pin, ...]
    #: A recipe only aicr reads (``cm://ns/name``): its facts are unknown here.
    unread: str = ""

    @classmethod
    def of(cls, raw: bytes, *, where: str = "recipe") -> RecipeFacts:
        """The facts of a recipe document (YAML or JSON); ``RecipeFormatError`` when it is none."""
        summary = parse_recipe(raw.decode("utf-8", errors="replace"), where=where)
        return cls(
            aicr_version=summary.aicr_version,
            digest=f"sha256:{hashlib.sha256(raw).hexdigest()}",
            components=tuple(Pin(c.name, c.chart, c.version) for c in summary.components),
        )

    def by_name(self) -> dict[str, Pin]:
        return {pin.name: pin for pin in self.components}


class MoveKind(StrEnum):
    MOVED = "moved"
    ADDED = "added"
    REMOVED = "removed"


@dataclass(frozen=True)
class Move:
    """One component whose chart or version differs between the two recipes."""

    component: str
    kind: MoveKind
    #: Versions as the recipes pin them ("" where the component is absent).
    source: str = ""
    target: str = ""
    source_chart: str = ""
    target_chart: str = ""

    def text(self) -> str:
        if self.kind is MoveKind.ADDED:
            return f"{self.component} added ({self.target or 'unversioned'})"
        if self.kind is MoveKind.REMOVED:
            return f"{self.component} removed (was {self.source or 'unversioned'})"
        chart = f" (chart {self.source_chart} → {self.target_chart})" if self.source_chart != self.target_chart else ""
        return f"{self.component} {self.source or '-'} → {self.target or '-'}{chart}"

    def to_dict(self) -> dict[str, str]:
        return {
            "component": self.component,
            "kind": self.kind.value,
            "from": self.source,
            "to": self.target,
            "fromChart": self.source_chart,
            "toChart": self.target_chart,
        }


@dataclass(frozen=True)
class Crossing:
    installed: RecipeFacts
    target: RecipeFacts
    moves: tuple[Move, ...]

    def text(self) -> str:
        """``aicr v1.1.0 → v1.2.0; gpu-operator v25.10.1 → v26.3.3, nfd added`` (the run summary's line)."""
        aicr = (
            f"aicr {self.installed.aicr_version or '?'} → {self.target.aicr_version or '?'}"
            if self.installed.aicr_version != self.target.aicr_version
            else f"aicr {self.target.aicr_version or '?'} (unchanged)"
        )
        if self.installed.unread:
            aicr = f"from {self.installed.unread} to aicr {self.target.aicr_version or '?'}"
        moves = ", ".join(move.text() for move in self.moves) or "no component moves"
        return f"{aicr}; {moves}"

    def to_dict(self) -> dict[str, object]:
        return {
            "fromAicrVersion": self.installed.aicr_version,
            "toAicrVersion": self.target.aicr_version,
            "fromRecipeDigest": self.installed.digest,
            "toRecipeDigest": self.target.digest,
            "moves": [move.to_dict() for move in self.moves],
        }


def crossing_of(installed: RecipeFacts | None, target: RecipeFacts) -> Crossing | None:
    """None for a first install (nothing recorded) or an unchanged recipe (same digest)."""
    if installed is None or installed.digest == target.digest:
        return None
    before, after = installed.by_name(), target.by_name()
    moves: list[Move] = []
    for name, pin in after.items():
        old = before.get(name)
        if old is None:
            moves.append(Move(name, MoveKind.ADDED, target=pin.version, target_chart=pin.chart))
        elif (old.version, old.chart) != (pin.version, pin.chart):
            moves.append(Move(name, MoveKind.MOVED, old.version, pin.version, old.chart, pin.chart))
    moves += [
        Move(name, MoveKind.REMOVED, source=pin.version, source_chart=pin.chart)
        for name, pin in before.items()
        if name not in after
    ]
    return Crossing(installed, target, tuple(moves))
