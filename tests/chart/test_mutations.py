"""The render suite notices every deliberate breakage of the chart.

scripts/mutate-chart.py copies the chart, breaks it one way at a time (a guard
removed, a mount dropped, a default flipped, a Secret in env, readOnlyRootFilesystem
dropped, the Job named by revision, the chart version on the pod template, a knob
ignored, podFailurePolicy dropped, ...) and runs the tests that should notice
against the copy. Every mutation must be killed.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.chart.helm import ROOT, load_script


@pytest.mark.timeout(1260)  # the script's own bound (below) plus its start, not the suite's 300 s default
def test_every_mutation_of_the_chart_is_caught() -> None:
    mutations = load_script("mutate-chart").MUTATIONS
    assert len(mutations) >= 15
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "mutate-chart.py")],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=1200,
    )
    summary = re.search(r"mutate-chart: (\d+)/(\d+) mutations killed", proc.stdout)
    assert summary, proc.stdout + proc.stderr
    assert summary.group(1) == summary.group(2) == str(len(mutations)), proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
