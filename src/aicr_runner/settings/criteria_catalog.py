"""The chart's criteria check, offline, for ``aicr-runner plan``.

``data/criteria-catalog.json`` is the chart's ``files/criteria-catalog.json``
(scripts/gen-catalog.py writes both; a test keeps them identical): every embedded
overlay of the pinned aicr. ``problems`` applies the chart's rule
(templates/_criteria.tpl) with the chart's wording, so a combination that no
recipe has is refused in milliseconds, before anything is downloaded, with the
message ``helm install`` would give.

Only the standard library here: this runs before the heavy imports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aicr_runner.errors import InputProblem
from aicr_runner.settings.names import CRITERIA_DIMENSIONS, ENV_PREFIX

__all__ = [
    "CATALOG_PATH",
    "SERVICE_ALIASES",
    "load_catalog",
    "overlay_criteria",
    "problems",
    "refusal",
    "release_numbers",
    "version_guards",
]

CATALOG_PATH = Path(__file__).resolve().parent.parent / "data" / "criteria-catalog.json"
#: Service values aicr reads as another: ``generic`` in 1.x, ``any`` in 0.x.
SERVICE_ALIASES = ("self-managed", "self", "vanilla")


def load_catalog(path: Path = CATALOG_PATH) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _stated(criteria: Mapping[str, str]) -> dict[str, str]:
    return {d: criteria[d] for d in CRITERIA_DIMENSIONS if criteria.get(d, "") not in ("", "any")}


def problems(criteria: Mapping[str, str], catalog: Mapping[str, Any]) -> list[str]:
    """One problem per stated value no applicable overlay carries (the chart's rule)."""
    query = _stated(criteria)
    entries: list[Mapping[str, Any]] = catalog["entries"]
    applied = [e for e in entries if all(str(e[d]) in ("any", query.get(d, "")) for d in CRITERIA_DIMENSIONS)]
    found: list[str] = []
    for dim, value in query.items():
        if any(str(e[dim]) == value for e in applied):
            continue
        combos: dict[str, list[str]] = {}
        compatible = False
        for entry in entries:
            if str(entry[dim]) != value:
                continue
            parts = [f"{o}={entry[o]}" for o in CRITERIA_DIMENSIONS if o != dim and str(entry[o]) != "any"]
            if all(
                query.get(o, str(entry[o])) == str(entry[o])
                for o in CRITERIA_DIMENSIONS
                if o != dim and entry[o] != "any"
            ):
                compatible = True
            combos[", ".join(parts)] = parts
        if not combos:
            known = sorted({str(e[dim]) for e in entries if str(e[dim]) != "any"})
            found.append(f"no recipe provides {dim} '{value}' (values with a recipe: {', '.join(known)})")
            continue
        minimal = sorted(
            f"({key})"
            for key, parts in sorted(combos.items())
            if not any(other != key and all(p in parts for p in others) for other, others in combos.items())
        )
        if compatible:
            found.append(f"{dim} '{value}' requires additional criteria; supported combinations: {', '.join(minimal)}")
        else:
            with_others = ", ".join(f"{o}={v}" for o, v in query.items() if o != dim)
            found.append(
                f"no recipe provides {dim} '{value}' with {with_others}; supported combinations: {', '.join(minimal)}"
            )
    return found


def overlay_criteria(aicr_version: str, catalog: Mapping[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """Each overlay of the catalog by name: the criteria it states; empty when the
    catalog describes another aicr version."""
    catalog = catalog if catalog is not None else load_catalog()
    if str(catalog["aicrVersion"]).removeprefix("v") != aicr_version.removeprefix("v"):
        return {}
    return {
        str(e["name"]): {d: str(e[d]) for d in CRITERIA_DIMENSIONS if str(e[d]) != "any"} for e in catalog["entries"]
    }


def refusal(criteria: Mapping[str, str], aicr_version: str, catalog: Mapping[str, Any] | None = None) -> str | None:
    """The chart's refusal for ``criteria``, or None when the catalog accepts them
    or describes another aicr version (then aicr itself decides)."""
    catalog = catalog if catalog is not None else load_catalog()
    version = str(catalog["aicrVersion"])
    if version.removeprefix("v") != aicr_version.removeprefix("v"):
        return None
    found = problems(criteria, catalog)
    if not found:
        return None
    stated = ", ".join(f"{d}={v}" for d, v in _stated(criteria).items())
    return (
        f"criteria ({stated}) are not supported by aicr {version}: {'; '.join(found)}. State a supported "
        "combination (`aicr recipe list` lists them; chart files/criteria-catalog.json holds the same, "
        f"{catalog['source']}), give a data pack (--pack-dir, or AICR_RUNNER_PACK__REF) if your pack provides "
        f"this combination, or plan with --aicr-binary if your aicr {version} accepts it."
    )


def release_numbers(tag: str) -> tuple[int, int, int] | None:
    """``v1.2.0`` (or ``1.2.0-rc.1``) as numbers; None for anything else."""
    head = tag.strip().removeprefix("v").split("-", 1)[0].split("+", 1)[0].split(".")
    if len(head) != 3 or not all(part.isdigit() for part in head):
        return None
    return int(head[0]), int(head[1]), int(head[2])


def version_guards(criteria: Mapping[str, str], version: tuple[int, int, int], label: str) -> list[InputProblem]:
    """Criteria values aicr reads as something other than what they say, refused
    with what ``version`` (named ``label``, e.g. ``aicr v0.11.1``) does with them:
    1.x answers ``accelerator=any`` with "no criteria provided" and maps the
    self-managed aliases to ``generic``; 0.x reads ``any`` as no accelerator and
    maps the aliases to ``any``. Each problem names its variable."""
    prefix = f"{ENV_PREFIX}CRITERIA__"
    one_x = version >= (1, 0, 0)
    found: list[InputProblem] = []
    if criteria.get("accelerator") == "any":
        does = (
            f"{label} answers 'no criteria provided'"
            if one_x
            else f"{label} reads it as no accelerator and resolves the other criteria alone, without any "
            "accelerator overlay ('no criteria provided' when nothing else is stated)"
        )
        line = (
            f"{prefix}ACCELERATOR='any': 'any' is not an accelerator ({does}); leave it empty or name a real "
            "accelerator such as h100"
        )
        found.append(InputProblem(line, f"{prefix}ACCELERATOR"))
    service = criteria.get("service", "")
    if service in SERVICE_ALIASES:
        does = (
            f"{label} maps this alias to 'generic', which has no recipe for most accelerators; use 'any' or name "
            "the service (eks, gke, k0s, ...)"
            if one_x
            else f"{label} maps this alias to 'any', so no service overlay applies; say service=any (the same "
            "thing, stated plainly) or name the service (aks, eks, gke, kind, oke)"
        )
        found.append(InputProblem(f"{prefix}SERVICE={service!r}: {does}", f"{prefix}SERVICE"))
    return found
