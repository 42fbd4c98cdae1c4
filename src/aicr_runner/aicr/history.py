"""The verdict history: each validation's outcome, bounded, and what changed since the last one.

Each validation (an install's or a re-validation's) becomes one entry: when, who
ran it (install, cronjob, manual), the aicr version, the recipe's digest, the
CTRF counts and the checks by status. A run compares itself with the newest
entry of the same recipe digest (another recipe's checks say nothing about this
one): a check that passed then and is ``failed`` or ``other`` now is a
regression; one that failed (or was ``other``) then and passes now, a recovery.
The history is JSON text (a ConfigMap key) bounded twice: at most
``validate.historyLimit`` entries and ``HISTORY_BYTES`` bytes, the oldest dropped
first (the caller says how many); an entry keeps at most ``NAMES_KEPT`` names per
status. A damaged one (not a list of entries of this shape) is refused by
``load``: the caller keeps it aside and starts afresh, never guesses at it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aicr_runner.aicr.ctrf import CtrfVerdict

__all__ = [
    "HISTORY_BYTES",
    "NAMES_KEPT",
    "Change",
    "append",
    "change_since",
    "entry_of",
    "load",
    "previous_of",
    "to_text",
    "with_baseline",
    "within_bytes",
]

#: The history's bound in bytes (a quarter of the ConfigMap budget: the key shares
#: its ConfigMap with a damaged history kept aside and an unreadable report).
HISTORY_BYTES = 230_000
#: Names an entry keeps per status (the rest counted in ``namesDropped``).
NAMES_KEPT = 200

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
    checks, dropped = _names(verdict)
    return {
        "time": when,
        "runBy": run_by,
        "aicrVersion": aicr_version,
        "recipeDigest": recipe_digest,
        "tests": verdict.tests,
        "counts": dict(verdict.counts),
        "checks": {status: names for status, names in checks.items() if names},
        **({"namesDropped": dropped} if dropped else {}),
    }


def _names(verdict: CtrfVerdict) -> tuple[dict[str, list[str]], int]:
    """The names by status, each once: a name any of whose tests failed or crashed
    is bad, never also passed (duplicate names give no false regression); at most
    ``NAMES_KEPT`` per status, and how many were dropped."""
    named = {status: {name for name, _ in verdict.checks.get(status, [])} for status in _NAMED}
    named["passed"] -= named["failed"] | named["other"]
    kept = {status: sorted(names)[:NAMES_KEPT] for status, names in named.items()}
    return kept, sum(len(named[s]) - len(kept[s]) for s in _NAMED)


def load(text: str) -> list[dict[str, Any]]:
    """The stored history; raises ValueError naming the damage when it is not a
    list of entries whose ``checks`` map statuses to lists of names."""
    try:
        entries = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the verdict history is not JSON ({type(exc).__name__})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("the verdict history is not a JSON list of entries")
    for index, entry in enumerate(entries):
        if not _well_formed(entry):
            raise ValueError(f"the verdict history's entry {index} is damaged (its checks or recipeDigest)")
    return entries


def _well_formed(entry: dict[str, Any]) -> bool:
    checks = entry.get("checks", {})
    return (
        isinstance(entry.get("recipeDigest", ""), str)
        and isinstance(checks, dict)
        and all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in checks.values())
    )


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
    # A name both passed and bad (duplicate names, an entry written before that
    # was resolved) counts as bad: never a false regression or recovery.
    regressed = sorted((set(before.get("passed", [])) - bad_before) & bad_now)
    recovered = sorted(bad_before & (set(now.get("passed", [])) - bad_now))
    return Change(tuple(regressed), tuple(recovered), previous)


def append(history: list[dict[str, Any]], entry: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """The history with ``entry`` last, the oldest dropped past ``limit``."""
    return [*history, entry][-max(limit, 1) :]


def within_bytes(entries: list[dict[str, Any]], budget: int = HISTORY_BYTES) -> tuple[list[dict[str, Any]], int]:
    """``entries`` with the oldest dropped until their text fits ``budget`` bytes
    (the newest always kept), and how many were dropped."""
    sizes = [len(to_text([entry]).encode()) for entry in entries]
    total, start = sum(sizes), 0
    while start < len(entries) - 1 and total > budget:
        total -= sizes[start]
        start += 1
    return entries[start:], start


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
