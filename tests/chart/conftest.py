"""Chart render suite: every test here runs the pinned helm (marker "helm").

Every test of a module that renders (it imports one of tests.chart.helm's render
helpers) runs under Helm 4 and under Helm 3: ids end in ``[helm4]`` / ``[helm3]``.
A test marked ``one_helm`` runs under Helm 4 only. AICR_CHART_HELM_MAJORS (e.g.
"4") narrows the majors, for tools that re-run parts of the suite
(scripts/mutate-chart.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chart import helm as chart_helm

HERE = Path(__file__).resolve().parent
#: What a module imports from tests.chart.helm when its tests render the chart.
RENDERING = (
    chart_helm.render,
    chart_helm.renders,
    chart_helm.rejects_with,
    chart_helm.rejects_by_schema,
    chart_helm.helm,
)


def _majors() -> list[int]:
    wanted = os.environ.get("AICR_CHART_HELM_MAJORS", "4,3")
    majors = [int(m) for m in wanted.split(",") if m.strip()]
    unknown = sorted(set(majors) - set(chart_helm.HELMS))
    if unknown or not majors:
        raise pytest.UsageError(
            f"AICR_CHART_HELM_MAJORS={wanted!r}: allowed majors are {sorted(chart_helm.HELMS)}, comma-separated"
        )
    return majors


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.helm)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "helm_major" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("one_helm"):
        return
    if not any(value in RENDERING for value in vars(metafunc.module).values()):
        return
    metafunc.parametrize("helm_major", _majors(), indirect=True, ids=lambda major: f"helm{major}")


@pytest.fixture(autouse=True)
def helm_major(request: pytest.FixtureRequest) -> Iterator[int]:
    """The helm major this test renders with (4 unless parametrized)."""
    major = int(getattr(request, "param", 4))
    previous = chart_helm.use_helm_major(major)
    try:
        yield major
    finally:
        chart_helm.use_helm_major(previous)
