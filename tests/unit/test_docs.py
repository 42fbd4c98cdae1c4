"""The documentation is generated where it can drift: values, environment and exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from aicr_runner.errors import DETERMINISTIC_EXIT_CODES, ExitCode
from tests.chart.helm import load_script

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def test_environment_table_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-env-table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_exit_code_is_documented() -> None:
    table = CONFIGURATION.split("<!-- exit-codes:start -->")[1].split("<!-- exit-codes:end -->")[0]
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


def test_the_generated_tables_live_in_the_configuration_reference_only() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync-readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '| `service` | string | `"any"` |' in CONFIGURATION
    assert "| `AICR_RUNNER_CRITERIA__SERVICE` |" in CONFIGURATION
    assert "| Key | Type | Default | Description |" not in README


def test_a_copy_of_a_generated_table_elsewhere_is_found(tmp_path: Path) -> None:
    sync = load_script("sync-readme")
    (tmp_path / "README.md").write_text("# notes\n\n| Variable | Default | Meaning |\n|---|---|---|\n")
    (tmp_path / "chart.md").write_text("<!-- values-table:start -->\n<!-- values-table:end -->\n")
    (tmp_path / "clean.md").write_text("The [values](docs/configuration.md#values).\n")
    pages = sorted(tmp_path.glob("*.md"))
    assert sync.copies(pages, tmp_path) == ["README.md: environment table", "chart.md: values table"]


def test_the_readme_stays_a_front_door() -> None:
    assert len(README.splitlines()) <= 200
