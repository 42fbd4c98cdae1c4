"""Prints one closing line for the test script's pytest runs: their JUnit XML reports
added up, as ``pytest: N passed, N failed`` (errors count as failed; skipped are
named when there are any). A missing report (a run that crashed before writing
it) is an error, never zero tests."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def totals(reports: list[Path]) -> dict[str, int]:
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for report in reports:
        root = ET.parse(report).getroot()  # noqa: S314 - pytest's own report of this run
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            for key in counts:
                counts[key] += int(suite.get(key, "0"))
    return counts


def main(argv: list[str]) -> int:
    missing = [name for name in argv if not Path(name).is_file()]
    if missing or not argv:
        print(f"junit-totals: no report at {', '.join(missing) or '(none given)'}", file=sys.stderr)
        return 2
    counts = totals([Path(name) for name in argv])
    failed = counts["failures"] + counts["errors"]
    passed = counts["tests"] - failed - counts["skipped"]
    line = f"pytest: {passed} passed, {failed} failed"
    if counts["skipped"]:
        line += f", {counts['skipped']} skipped"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
