"""The verdict history: each validation's outcome, bounded, and what changed since the last one.

Each validation (an install's or a re-validation's) becomes one entry: when, who
ran it (install, cronjob, manual), the aicr version, the recipe's digest, the
CTRF counts and the checks by status. A run compares itself with the newest
entry of the same recipe digest (another recipe's checks say nothing about this
one): a check that passed then and is ``failed`` or ``other`` now is a
regression; one that failed (or was ``other``) then and passes now, a recovery.
The history is JSON text (a ConfigMap key); an unreadable one starts afresh,
said by the caller, never guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aicr_runner.aicr.classify import CtrfVerdict

__all__ = ["Change", "append", "change_since", "entry_of", "load", "previous_of", "to_text", "with_baseline"]

#: The statuses whose check names an entry keeps (the others are only counted).
_NAMED = ("passed", "failed", "other")
_BAD = ("failed", "other")


@dataclass(frozen=True)
class Change:
    """What changed since the previous verdict of the same recipe."""

    regressed: tuple[str, ...] = ()
    recovered: tuple[str, ...] = ()
    #: The entry compared with (None: no earlier verdict of this recipe).
    previous: dict[str, Any] | None = None


def entry_of(verdict: CtrfVerdict, *, when: str, run_by: str, aicr_version: str, recipe_digest: str) -> dict[str, Any]:
    checks = {status: sorted({name for name, _ in verdict.checks.get(status, [])}) for status in _NAMED}
    return {
        "time": when,
        "runBy": run_by,
        "aicrVersion": aicr_version,
        "recipeDigest": recipe_digest,
        "tests": verdict.tests,
        "counts": dict(verdict.counts),
        "checks": {status: names for status, names in checks.items() if names},
    }


def load(text: str) -> list[dict[str, Any]]:
    """The stored history; raises ValueError when it is not a list of entries."""
    entries = json.loads(text)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("the verdict history is not a JSON list of entries")
    return entries


def to_text(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, indent=1, sort_keys=True)


def previous_of(history: list[dict[str, Any]], recipe_digest: str) -> dict[str, Any] | None:
    """The newest entry of the same recipe."""
    return next((e for e in reversed(history) if e.get("recipeDigest") == recipe_digest), None)


def change_since(previous: dict[str, Any] | None, current: dict[str, Any]) -> Change:
    if previous is None:
        return Change()
    before, now = previous.get("checks") or {}, current.get("checks") or {}
    bad_now = {name for status in _BAD for name in now.get(status, [])}
    bad_before = {name for status in _BAD for name in before.get(status, [])}
    regressed = sorted(set(before.get("passed", [])) & bad_now)
    recovered = sorted(bad_before & set(now.get("passed", [])))
    return Change(tuple(regressed), tuple(recovered), previous)


def append(history: list[dict[str, Any]], entry: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """The history with ``entry`` last, the oldest dropped past ``limit``."""
    return [*history, entry][-max(limit, 1) :]


def with_baseline(ctrf: bytes, previous: dict[str, Any] | None) -> bytes:
    """The CTRF report with its optional ``baseline`` (the previous report) filled in."""
    if previous is None:
        return ctrf
    document = json.loads(ctrf)
    document["baseline"] = {
        "reportId": f"{previous.get('recipeDigest', '')}@{previous.get('time', '')}",
        "timestamp": previous.get("time", ""),
        "source": f"aicr-runner verdict history ({previous.get('runBy', '')})",
        "extra": {"counts": previous.get("counts", {}), "checks": previous.get("checks", {})},
    }
    return json.dumps(document, indent=2).encode()
