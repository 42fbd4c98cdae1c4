#!/usr/bin/env python3
"""Copies sections of docs/chart.md into README.md between markers.

docs/chart.md is the chart's own page; the README is the front door and carries the
same text for installing, delivery paths, criteria and migration. `--check` fails
when the README is out of step.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {
    "chart": [
        "Installing the chart",
        "Recommended settings per delivery path",
        "The image",
        "aicr provenance",
    ],
    "criteria": ["Which criteria?"],
    "migration": ["Migration"],
}


def sections(doc: str) -> dict[str, str]:
    parts = re.split(r"^## ", doc, flags=re.M)[1:]
    found = {}
    for part in parts:
        heading, _, body = part.partition("\n")
        found[heading.strip()] = body.strip("\n")
    return found


def render(marker: str, found: dict[str, str], *, first_is_parent: bool) -> str:
    chunks = []
    for index, heading in enumerate(SECTIONS[marker]):
        body = re.sub(r"^(#{3,}) ", r"#\1 ", found[heading], flags=re.M)
        if index == 0 and first_is_parent:
            chunks.append(body)
        else:
            chunks.append(f"### {heading}\n\n{body}")
    return "\n\n".join(chunks)


def synced(readme: str, doc: str) -> str:
    found = sections(doc)
    for marker in SECTIONS:
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        head, _, rest = readme.partition(start)
        _, _, tail = rest.partition(end)
        if not rest:
            raise SystemExit(f"sync-readme: README.md has no {start} marker")
        body = render(marker, found, first_is_parent=True)
        readme = f"{head}{start}\n{body}\n{end}{tail}"
    return readme


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    readme_path = ROOT / "README.md"
    text = readme_path.read_text()
    updated = synced(text, (ROOT / "docs" / "chart.md").read_text())
    if args.check:
        if updated != text:
            print("README.md is out of step with docs/chart.md: run scripts/sync-readme.py", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
