"""NOTES.txt under Helm 3 as under Helm 4: the same text, within its 30 lines.

Helm 3's ``install --dry-run=client`` still asks the cluster for its version and
API resources, so the chart render suite (no cluster) renders NOTES with Helm 4
only (tests/chart/test_job.py). Here both pinned helms render them against the
real API server: the chart's defaults, the README's proving posture and every
optional line at once.
"""

from __future__ import annotations

import pytest

from e2e.harness.helm import Helm
from e2e.scenarios import CHART, RELEASE
from e2e.tools import tool
from tests.chart.test_job import MOST_LINES, NOTES_LINES, PROVING

pytestmark = pytest.mark.e2e

CASES = {"defaults": (), "proving posture": PROVING, "every optional line": MOST_LINES}


def notes(helm: Helm, namespace: str, args: tuple[str, ...]) -> str:
    proc = helm.run(
        "install", RELEASE, str(CHART), "-n", namespace, "--dry-run=client", "--set", "accelerator=h100", *args
    )
    return proc.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize("case", CASES)
def test_helm_3_and_helm_4_print_the_same_notes_within_30_lines(helm: Helm, namespace: str, case: str) -> None:
    helm3 = Helm(helm.kubeconfig, helm.home)
    helm3.binary = tool("helm3")
    assert helm3.run("version", "--short").stdout.startswith("v3.")
    four = notes(helm, namespace, CASES[case])
    three = notes(helm3, namespace, CASES[case])
    assert three == four
    assert len(three.strip("\n").splitlines()) <= NOTES_LINES, three
