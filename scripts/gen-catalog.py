#!/usr/bin/env python3
"""Generate chart/files/criteria-catalog.json from an aicr binary.

The chart's render-time criteria check (templates/_criteria.tpl) reads this file:
every embedded overlay of the pinned aicr, one object per overlay with the five
criteria dimensions ("any" for a wildcard) and whether it is a leaf. Non-leaf
overlays matter: a service root (eks) carries the service for every accelerator.
Run it with the aicr binary the chart pins:

    scripts/gen-catalog.py --aicr ./aicr            # rewrite the catalog
    scripts/gen-catalog.py --aicr ./aicr --check    # exit 1 when it is stale

--aicr is split like a shell command line, so an interpreter can lead it. An
aicr with `recipe list` (1.x) is asked `aicr recipe list --format json
--no-health` (embedded recipes only: no --data, so pack-registered values never
leak into the chart). An aicr without it (0.x) is asked by resolution: the
criteria values its `recipe --help` lists, the overlay files its `--debug` log
names, then `aicr recipe` queries: one per overlay, from the values its file
name carries, and for each overlay seen applied, the same query with one
dimension left out at a time (the overlay still applies exactly when it does
not state that dimension). A leaf is an overlay no other overlay refines.
`aicr --version` names the version either way.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "chart" / "files" / "criteria-catalog.json"
PACKAGE_COPY = ROOT / "src" / "aicr_runner" / "data" / "criteria-catalog.json"
DIMENSIONS = ("service", "accelerator", "intent", "os", "platform")


def _entries(payload: Any) -> list[Mapping[str, Any]]:
    if isinstance(payload, dict):
        payload = next(
            (payload[key] for key in ("recipes", "overlays", "items", "entries") if isinstance(payload.get(key), list)),
            payload,
        )
    if isinstance(payload, list) and all(isinstance(entry, dict) for entry in payload):
        return list(payload)
    raise ValueError("aicr recipe list --format json: expected a JSON array of entries")


def _criterion(criteria: Mapping[str, Any], dimension: str) -> str:
    for key, value in criteria.items():
        if key.lower() == dimension:
            text = str(value or "").strip()
            return text if text else "any"
    return "any"


def entries_from_recipe_list(payload: Any) -> list[dict[str, Any]]:
    """Embedded overlays of a `recipe list` JSON document, sorted by name."""
    entries: list[dict[str, Any]] = []
    for entry in _entries(payload):
        if str(entry.get("source", "embedded")) != "embedded":
            continue
        criteria = entry.get("criteria") or {}
        item: dict[str, Any] = {"name": str(entry["name"])}
        item.update({dim: _criterion(criteria, dim) for dim in DIMENSIONS})
        item["leaf"] = bool(entry.get("is_leaf"))
        entries.append(item)
    return sorted(entries, key=lambda item: item["name"])


def parse_version(text: str) -> str:
    match = re.search(r"(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)", text)
    if not match:
        raise ValueError(f"cannot read a version from `aicr --version` output: {text!r}")
    return "v" + match.group(1)


def dump_catalog(doc: Mapping[str, Any]) -> str:
    """The file format: fixed key order, one overlay per line (reviewable diffs)."""
    lines = [
        "{",
        f'  "aicrVersion": {json.dumps(doc["aicrVersion"])},',
        f'  "source": {json.dumps(doc["source"])},',
        '  "entries": [',
    ]
    entries = list(doc["entries"])
    for index, entry in enumerate(entries):
        fields = ", ".join(f"{json.dumps(key)}: {json.dumps(entry[key])}" for key in ("name", *DIMENSIONS, "leaf"))
        lines.append("    {" + fields + "}" + ("," if index < len(entries) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def _run(argv: Sequence[str]) -> str:
    """Run one aicr call; its stdout is the payload."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


_HELP_VALUES = re.compile(r"^\s*--([a-z]+)\b[^(]*\(e\.g\. ([^)]*)\)")
_OVERLAY_FILE = re.compile(r"path=overlays/([^\s/]+)\.ya?ml\b")
_SUBCOMMAND = re.compile(r"^\s+list\b", re.MULTILINE)


def criteria_values(recipe_help: str) -> dict[str, list[str]]:
    """The values each criteria flag's usage lists in `aicr recipe --help`."""
    values: dict[str, list[str]] = {}
    for line in recipe_help.splitlines():
        if (match := _HELP_VALUES.match(line)) and match.group(1) in DIMENSIONS:
            values[match.group(1)] = [v.strip() for v in match.group(2).split(",") if v.strip()]
    missing = [d for d in DIMENSIONS if not values.get(d)]
    if missing:
        raise ValueError(f"aicr recipe --help lists no values for {', '.join(missing)}")
    return values


def hypothesis(stem: str, values: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The criteria an overlay file name spells (``h100-eks-ubuntu-training``)."""
    found: dict[str, str] = {}
    for dim in DIMENSIONS:
        named = [v for v in values[dim] if f"-{v}-" in f"-{stem}-"]
        if named:
            found[dim] = max(named, key=len)
    return found


class Resolver:
    """``aicr recipe`` queries, each asked once: the overlays it applies."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.answers: dict[tuple[tuple[str, str], ...], frozenset[str] | None] = {}

    def applied(self, query: Mapping[str, str]) -> frozenset[str] | None:
        """None when aicr refuses the query (no criteria at all)."""
        key = tuple((d, query[d]) for d in DIMENSIONS if d in query)
        if key not in self.answers:
            flags = [word for dim, value in key for word in (f"--{dim}", value)]
            proc = subprocess.run(
                [*self.command, "recipe", *flags, "--format", "json"],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            doc = json.loads(proc.stdout) if proc.returncode == 0 else None
            self.answers[key] = frozenset(doc["metadata"]["appliedOverlays"]) if doc else None
        return self.answers[key]

    def criteria_of(self, name: str, values: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """What ``name`` states: from the smallest query it applied to, each
        dimension left out in turn (still applied: it does not state it)."""
        seen = [dict(key) for key, found in self.answers.items() if found and name in found]
        query = min(seen, key=len)
        stated: dict[str, str] = {}
        for dim, value in query.items():
            rest = {d: v for d, v in query.items() if d != dim}
            if not rest:  # aicr refuses an empty query: ask another dimension alone
                other = next(d for d in DIMENSIONS if d != dim)
                rest = {other: values[other][0]}
            found = self.applied(rest)
            if found is None or name not in found:
                stated[dim] = value
        return stated


def entries_from_resolution(command: Sequence[str]) -> list[dict[str, Any]]:
    """Embedded overlays of an aicr without `recipe list`, found by resolving queries."""
    values = criteria_values(_run([*command, "recipe", "--help"]))
    probe = subprocess.run(
        [*command, "--debug", "recipe", "--service", values["service"][0], "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    stems = sorted(set(_OVERLAY_FILE.findall(probe.stderr)))
    if not stems:
        raise ValueError("aicr --debug recipe named no overlays/*.yaml files")
    resolver = Resolver(command)
    for stem in stems:
        resolver.applied(hypothesis(stem, values) or {"service": values["service"][0]})
    names = sorted({name for found in resolver.answers.values() if found for name in found})
    unseen = sorted(set(stems) - set(names))
    if unseen:
        raise ValueError(f"overlays never applied by the query their file name spells: {', '.join(unseen)}")
    criteria = {name: resolver.criteria_of(name, values) for name in names}
    return [
        {
            "name": name,
            **{dim: criteria[name].get(dim, "any") for dim in DIMENSIONS},
            "leaf": bool(criteria[name])
            and not any(other != name and criteria[name].items() < criteria[other].items() for other in names),
        }
        for name in names
    ]


def generate(aicr: str, source: str | None = None) -> dict[str, Any]:
    command = shlex.split(aicr)
    version = parse_version(_run([*command, "--version"]))
    if _SUBCOMMAND.search(_run([*command, "recipe", "--help"]).split("OPTIONS:", 1)[0]):
        payload = json.loads(_run([*command, "recipe", "list", "--format", "json", "--no-health"]))
        entries, how = entries_from_recipe_list(payload), "`aicr recipe list`"
    else:
        entries, how = entries_from_resolution(command), "`aicr recipe` queries (this aicr has no `recipe list`)"
    return {
        "aicrVersion": version,
        "source": source or f"generated by scripts/gen-catalog.py from {how} (aicr {version})",
        "entries": entries,
    }


def same_catalog(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal in what the chart reads (version and entries); the source note may differ."""
    return a.get("aicrVersion") == b.get("aicrVersion") and a.get("entries") == b.get("entries")


def _diff(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[str]:
    old_set = {json.dumps(item, sort_keys=True) for item in old}
    new_set = {json.dumps(item, sort_keys=True) for item in new}
    return [f"- {x}" for x in sorted(old_set - new_set)] + [f"+ {x}" for x in sorted(new_set - old_set)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aicr", default="aicr", help="aicr binary to ask (default: aicr on PATH)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="catalog file")
    parser.add_argument("--check", action="store_true", help="exit 1 when the catalog file is stale")
    parser.add_argument("--source", help="provenance note written into the file (default: the aicr version)")
    args = parser.parse_args(argv)

    try:
        fresh = generate(args.aicr, args.source)
    except (OSError, RuntimeError, ValueError, json.JSONDecodeError) as exc:
        print(f"gen-catalog: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = json.loads(args.output.read_text())
        if same_catalog(current, fresh):
            count, version = len(fresh["entries"]), fresh["aicrVersion"]
            print(f"gen-catalog: {args.output.name} is current ({count} overlays, aicr {version})")
            return 0
        print(
            f"gen-catalog: {args.output} is stale; run scripts/gen-catalog.py --aicr '{args.aicr}'",
            file=sys.stderr,
        )
        if current.get("aicrVersion") != fresh["aicrVersion"]:
            print(f"  aicrVersion {current.get('aicrVersion')} -> {fresh['aicrVersion']}", file=sys.stderr)
        for line in _diff(current.get("entries", []), fresh["entries"]):
            print(f"  {line}", file=sys.stderr)
        return 1
    args.output.write_text(dump_catalog(fresh))
    if args.output.resolve() == DEFAULT_OUTPUT.resolve():
        # The runtime's copy (aicr-runner plan checks criteria offline against it).
        PACKAGE_COPY.write_text(dump_catalog(fresh))
    print(f"gen-catalog: wrote {args.output} ({len(fresh['entries'])} overlays, aicr {fresh['aicrVersion']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
