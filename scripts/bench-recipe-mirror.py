#!/usr/bin/env python3
"""The mirror's copy of the recipe eks/h100/training/ubuntu's list against the copy
tools' command lines on the same list (``e2e/bench_recipe_mirror.py`` says how).

It needs what the e2e suite needs (root, the tools of scripts/bootstrap-tools.sh,
podman, the shared test data; the variables default as in scripts/test.sh), takes
a few minutes, and prints a Markdown table with the load average: the numbers mean
something only next to it.

Usage: scripts/bench-recipe-mirror.py [--repeat N]   (pairs per row, default 3)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT.parent / "shared" / "testdata"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="pairs per row")
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("AICR_TEST_RELEASES_DIR", str(TESTDATA / "aicr-releases"))
    env.setdefault("AICR_TEST_VALIDATORS_DIR", str(TESTDATA / "aicr-validators"))
    env.setdefault("AICR_TEST_GPU_OPERATOR_DIR", str(TESTDATA / "gpu-operator"))
    env["PATH"] = f"{ROOT / '.tools' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["BENCH_REPEAT"] = str(args.repeat)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "e2e/bench_recipe_mirror.py"]
    return subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
