#!/usr/bin/env python3
"""Plan with the real aicr v0.11.1 and compare with the same aicr run directly.

For each criteria combination of the real-aicr suite (tests/support/real_aicr.py: full
leaves, thin ones, unknown values), time

- the runner: `aicr-runner plan --aicr-binary <aicr>` as a whole process (its
  start-up, `aicr --version`, recipe, bundle, verify, the reports), and
- the same aicr directly: `aicr recipe`, `aicr bundle`, `aicr verify`,

and say whether they match: the same component table, recipe.yaml and
checksums.txt byte for byte; for an unknown value, the runner's exit 2 with the
values aicr lists against aicr's own exit 8. The suite asserts the matches
(tests/integration/test_real_aicr.py); this script reports the times.

    scripts/compare-real-aicr.py                 # aicr from AICR_TEST_RELEASES_DIR
    scripts/compare-real-aicr.py --aicr ./aicr --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from aicr_runner.aicr.recipe import parse_recipe  # noqa: E402 - after the path set-up
from tests.support.real_aicr import LEAVES, THIN, UNKNOWN, criteria_words, extract_binary  # noqa: E402


def timed(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, check=False, timeout=300)
    return proc.returncode, time.perf_counter() - started


def runner(aicr: Path, criteria: Mapping[str, str], work: Path) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "KUBERNETES_"))}
    env.update({f"AICR_RUNNER_CRITERIA__{k.upper()}": v for k, v in criteria.items()})
    env.update({"AICR_RUNNER_AICR__PROVENANCE__MODE": "off", "AICR_RUNNER_WORK_DIR": str(work / "work")})
    argv = [sys.executable, "-m", "aicr_runner", "plan", "--aicr-binary", str(aicr), "--output", str(work / "plan")]
    return timed(argv, cwd=work, env=env)


def direct(aicr: Path, criteria: Mapping[str, str], work: Path) -> tuple[int, float]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
    total = 0.0
    calls = [
        ["recipe", *criteria_words(criteria), "--output", "recipe.yaml"],
        ["bundle", "--recipe", "recipe.yaml", "--output", "bundle"],
        ["verify", "bundle"],
    ]
    for args in calls:
        code, seconds = timed([str(aicr), "--log-json", *args], cwd=work, env=env)
        total += seconds
        if code != 0:
            return code, total
    return 0, total


def match(runner_dir: Path, direct_dir: Path, runner_code: int, direct_code: int) -> str:
    if direct_code != 0:
        report = json.loads((runner_dir / "plan" / "aicr-run-status" / "report.json").read_text())
        listed = "values listed" if report.get("supportedCombinations") else "no values listed"
        return f"refused: runner exit {runner_code} ({listed}), aicr exit {direct_code}"
    if runner_code != 0:
        return f"no: runner exit {runner_code}"
    report = json.loads((runner_dir / "plan" / "aicr-run-status" / "report.json").read_text())
    recipe = direct_dir / "recipe.yaml"
    components = [c.as_row() for c in parse_recipe(recipe.read_text()).components]
    same = {
        "components": report["components"] == components,
        "recipe.yaml": (runner_dir / "work" / "recipe.yaml").read_bytes() == recipe.read_bytes(),
        "checksums.txt": (runner_dir / "work" / "bundle" / "checksums.txt").read_bytes()
        == (direct_dir / "bundle" / "checksums.txt").read_bytes(),
    }
    return "yes" if all(same.values()) else "no: " + ", ".join(k for k, ok in same.items() if not ok)


def compare(aicr: Path, scratch: Path) -> list[dict[str, Any]]:
    rows = []
    combinations = [*LEAVES, *THIN, *(u[0] for u in UNKNOWN)]
    for index, criteria in enumerate(combinations):
        runner_dir, direct_dir = scratch / f"{index}-runner", scratch / f"{index}-direct"
        runner_dir.mkdir()
        direct_dir.mkdir()
        runner_code, runner_s = runner(aicr, criteria, runner_dir)
        direct_code, direct_s = direct(aicr, criteria, direct_dir)
        kind = "thin" if criteria in THIN else "unknown value" if direct_code else "leaf"
        rows.append(
            {
                "combination": ", ".join(f"{k}={v}" for k, v in criteria.items()),
                "kind": kind,
                "runner_s": runner_s,
                "direct_s": direct_s,
                "match": match(runner_dir, direct_dir, runner_code, direct_code),
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aicr", type=Path, help="the aicr v0.11.1 binary (default: from AICR_TEST_RELEASES_DIR)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compare-real-aicr-") as tmp:
        scratch = Path(tmp)
        aicr = args.aicr.resolve() if args.aicr else extract_binary(scratch / "bin")
        rows = compare(aicr, scratch)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.markdown:
        print(f"{len(rows)} combinations, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load}\n")
        print("| combination | kind | runner s | direct s | match |")
        print("|---|---|---:|---:|---|")
        for row in rows:
            print(
                f"| {row['combination']} | {row['kind']} | {row['runner_s']:.2f} | {row['direct_s']:.2f} | "
                f"{row['match']} |"
            )
    else:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["match"] == "yes" or r["match"].startswith("refused") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
