#!/usr/bin/env python3
"""Copies sections of docs/chart.md into README.md between markers, and the whole
page into the packaged chart's README (chart/README.md).

docs/chart.md is the chart's own page and the one source: the README is the front
door and carries the same text for installing, delivery paths, criteria,
provenance and migration; `helm show readme` shows chart/README.md. `--check`
fails when either is out of step.
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
        "Verifying the image and the chart",
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


CHART_README_HEADER = (
    "<!-- generated from docs/chart.md by scripts/sync-readme.py; do not edit -->\n"
    "<!-- project: https://github.com/nvidia-aicr/aicr-runner -->\n\n"
)


def chart_readme(doc: str) -> str:
    return CHART_README_HEADER + doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    doc = (ROOT / "docs" / "chart.md").read_text()
    targets = {
        ROOT / "README.md": synced((ROOT / "README.md").read_text(), doc),
        ROOT / "chart" / "README.md": chart_readme(doc),
    }
    if args.check:
        stale = [path for path, text in targets.items() if not path.is_file() or path.read_text() != text]
        for path in stale:
            where = path.relative_to(ROOT)
            print(f"{where} is out of step with docs/chart.md: run scripts/sync-readme.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in targets.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
