"""scripts/junit-totals.py: the test script's one closing line for its two pytest runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "junit-totals.py"


def report(path: Path, *, tests: int, failures: int = 0, errors: int = 0, skipped: int = 0) -> Path:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}">'
        "</testsuite></testsuites>"
    )
    return path


def totals(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, check=False)


def test_both_runs_add_up_and_errors_count_as_failed(tmp_path: Path) -> None:
    proc = totals(
        report(tmp_path / "tests.xml", tests=10, failures=1),
        report(tmp_path / "e2e.xml", tests=5, errors=2),
    )
    assert proc.returncode == 0
    assert proc.stdout == "pytest: 12 passed, 3 failed\n"


def test_skipped_tests_are_named(tmp_path: Path) -> None:
    proc = totals(report(tmp_path / "tests.xml", tests=4, skipped=1))
    assert proc.stdout == "pytest: 3 passed, 0 failed, 1 skipped\n"


def test_a_missing_report_is_an_error_never_zero_tests(tmp_path: Path) -> None:
    proc = totals(report(tmp_path / "tests.xml", tests=4), tmp_path / "e2e.xml")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "e2e.xml" in proc.stderr
