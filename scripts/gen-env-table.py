#!/usr/bin/env python3
"""Writes the environment table of docs/configuration.md from the runtime's settings model.

Each row is one field of `aicr_runner.settings.runner.RunnerSettings`: its variable, its
default and its description (`setting(..., doc=...)`, the one place it is written);
`--check` fails when the page is stale (scripts/gen-settings.py runs it with the other
generated settings files).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aicr_runner.settings.config import RunnerSettings
from aicr_runner.settings.runner import leaves

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- env-table:start -->", "<!-- env-table:end -->"
TARGET = ROOT / "docs" / "configuration.md"


def _default(name: str) -> str:
    node: object = RunnerSettings.model_construct()
    for part in name.split("__"):
        node = getattr(node, part.lower())
    if name == "AICR__ARCH":
        return "host arch"
    value = getattr(node, "value", node)
    if isinstance(value, bool):
        value = str(value).lower()
    if isinstance(value, list):
        value = "[" + ", ".join(f'"{getattr(v, "value", v)}"' for v in value) + "]"
    return f"`{value}`" if value not in ("", None) else '`""`'


def table() -> str:
    undocumented = [name for name, field in leaves() if not field.description]
    if undocumented:
        raise SystemExit(f"gen-env-table: settings without a description (setting(..., doc=...)): {undocumented}")
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `AICR_RUNNER_{name}` | {_default(name)} | {field.description} |" for name, field in leaves()]
    return "\n".join(rows)


def splice(document: str, generated: str) -> str:
    head, _, rest = document.partition(START)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise SystemExit(f"gen-env-table: {TARGET.relative_to(ROOT)} needs the markers {START} / {END}")
    return f"{head}{START}\n{generated}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is out of date")
    args = parser.parse_args()
    text = TARGET.read_text()
    updated = splice(text, table())
    if args.check:
        if updated != text:
            print(
                f"{TARGET.relative_to(ROOT)} environment table is stale: run scripts/gen-env-table.py", file=sys.stderr
            )
            return 1
        return 0
    TARGET.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
