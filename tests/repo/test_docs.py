"""The documentation is generated where it can drift: values, environment and exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from aicr_runner.errors import DETERMINISTIC_EXIT_CODES, ExitCode
from tests.chart.helm import load_script

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
PERFORMANCE = (ROOT / "docs" / "performance.md").read_text()


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
    assert '| `criteria.service` | string | `"any"` |' in CONFIGURATION
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
    assert len(README.splitlines()) < 150


def test_the_measurement_table_lives_in_the_performance_page() -> None:
    """bench.py --markdown's table goes into docs/performance.md; the README keeps a
    few figures and the link, each figure one the table holds."""
    header = load_script("bench").render([], markdown=True)
    assert header in PERFORMANCE
    assert header.splitlines()[0] not in README
    assert "(docs/performance.md)" in README
    table = PERFORMANCE.split(header, 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) >= 20, rows
    section = README.split("## Performance\n", 1)[1].split("\n## ", 1)[0]
    for figure in re.findall(r"\b\d+\.\d+ ?(?:MB|s|x)\b", section):
        assert figure in PERFORMANCE, figure


def test_the_changelog_has_an_unreleased_section_with_the_charts_changes() -> None:
    """Keep a Changelog: the top section is Unreleased until a tag releases it, and
    every change Chart.yaml announces (artifacthub.io/changes) is under its kind."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## (.+)$", changelog, flags=re.M)
    assert sections[0] == "[Unreleased]", sections
    chart = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())
    unreleased = changelog.split("## [Unreleased]\n", 1)[1].split("\n## ", 1)[0]
    assert f"Chart {chart['version']} and image {chart['appVersion']}" in unreleased
    kinds = {"added": "Added", "changed": "Changed", "deprecated": "Deprecated", "removed": "Removed",
             "fixed": "Fixed", "security": "Security"}  # fmt: skip
    changes = yaml.safe_load(chart["annotations"]["artifacthub.io/changes"])
    assert changes
    for change in changes:
        section = unreleased.split(f"### {kinds[change['kind']]}\n", 1)[1].split("\n### ", 1)[0]
        assert f"- {change['description']}\n" in section, change
