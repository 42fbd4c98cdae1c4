#!/usr/bin/env python3
"""Writes the generated tables into docs/configuration.md, their one place.

The configuration reference carries the chart's values table (from the `# --`
comments of chart/values.yaml, scripts/gen-values-table.py) and the runtime's
environment table (from aicr_runner.settings.config, scripts/gen-env-table.py). No other
page carries a copy: the README and chart/README.md link to the reference.

    scripts/sync-readme.py           # rewrite both tables
    scripts/sync-readme.py --check   # exit 1 when a table is stale, or a copy sits elsewhere
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"
#: Every Markdown page a reader meets, where no copy of a generated table may sit.
PAGES = (
    ROOT / "README.md",
    ROOT / "chart" / "README.md",
    ROOT / "e2e" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
)
#: What gives a copy away: a table's markers or its header row.
SIGNS = {
    "values table": ("<!-- values-table:start -->", "| Key | Type | Default | Description |"),
    "environment table": ("<!-- env-table:start -->", "| Variable | Default | Meaning |"),
}


def _script(name: str) -> ModuleType:
    """scripts/<name>.py (a dash-named file) as a module."""
    module_name = name.replace("-", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def synced(page: str) -> str:
    """``page`` with both generated tables rewritten between their markers."""
    values, env = _script("gen-values-table"), _script("gen-env-table")
    generated = values.table(values.VALUES.read_text(), json.loads(values.SCHEMA.read_text()))
    return str(env.splice(values.splice(page, generated), env.table()))


def copies(pages: Iterable[Path] = PAGES, root: Path = ROOT) -> list[str]:
    """`<page>: <table>` for every generated table found outside the reference."""
    found = []
    for path in pages:
        if path == PAGE or not path.is_file():
            continue
        text = path.read_text()
        for table, signs in SIGNS.items():
            if any(sign in text for sign in signs):
                found.append(f"{path.relative_to(root)}: {table}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a stale table or a copy elsewhere")
    args = parser.parse_args()
    current = PAGE.read_text()
    wanted = synced(current)
    stray = copies()
    for where in stray:
        print(f"sync-readme: {where}: a copy of a generated table; link to docs/configuration.md", file=sys.stderr)
    if args.check:
        if wanted != current:
            print("sync-readme: docs/configuration.md is out of date: run scripts/sync-readme.py", file=sys.stderr)
            return 1
        return 1 if stray else 0
    PAGE.write_text(wanted)
    return 1 if stray else 0


if __name__ == "__main__":
    sys.exit(main())
