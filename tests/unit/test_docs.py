"""The README is generated where it can drift: environment and exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from aicr_runner.errors import DETERMINISTIC_EXIT_CODES, ExitCode

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_environment_table_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-env-table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_exit_code_is_documented() -> None:
    table = README.split("<!-- exit-codes:start -->")[1].split("<!-- exit-codes:end -->")[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert {int(c) for c in ExitCode} <= documented
    for code in DETERMINISTIC_EXIT_CODES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {int(code)} |"))
        assert row.rstrip().endswith("| no |") or "FailJob" in row, row


def test_readme_shows_the_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
    assert "bash scripts/test.sh" in README
    assert "bash scripts/dry-run.sh" in README


def test_readme_carries_the_chart_doc_sections() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync-readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "## Which criteria?" in README
    assert "### Recommended settings per delivery path" in README
