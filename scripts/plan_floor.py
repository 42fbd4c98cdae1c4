"""The least a Python plan on the runner's libraries pays: scripts/bench.py's plan floor row.

Not the runner and not for use: a benchmark's lower bound. It makes the aicr calls a
plan makes (the runner's own, recorded by the benchmark) the way the runner does at
its fastest, and does nothing else. Like the runner, it runs nothing before its input
could have been checked: it imports pydantic-settings (what reads the settings) first,
then starts the first call (``aicr --version``), imports structlog and PyYAML (the
logging and the recipe's reader) while that call answers, and makes the other calls
one after another, each one's output appended to a log file. No settings are read,
nothing is logged, parsed, checked or written.

If this floor already misses a goal against the same calls from bash, no runner built
on these libraries meets it: what remains is the interpreter and the libraries'
imports, not the runner.

Usage: python scripts/plan_floor.py CALLS.json WORKDIR LOG
  CALLS.json  a JSON list of argv lists, the first of them the version question
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

#: No call of a plan takes this long; past it the floor gives up (the child is killed).
CALL_SECONDS = 300


def main(calls_file: Path, work: Path, log_path: Path) -> int:
    import pydantic_settings  # noqa: F401 - before any call: the settings are read first

    calls: list[list[str]] = json.loads(calls_file.read_text())
    work.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        first = subprocess.Popen(calls[0], stdout=log, stderr=subprocess.STDOUT, cwd=work)
        import structlog  # noqa: F401 - while the first call answers, as the runner loads its modules
        import yaml  # noqa: F401

        try:
            if first.wait(CALL_SECONDS) != 0:
                return 1
        finally:
            if first.poll() is None:  # the wait gave up
                first.kill()
                first.wait()
        for argv in calls[1:]:
            if "bundle" in argv:
                shutil.rmtree(work / "bundle", ignore_errors=True)
            subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work, check=True, timeout=CALL_SECONDS)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
