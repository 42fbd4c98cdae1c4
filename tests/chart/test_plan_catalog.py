"""`aicr-runner plan` checks criteria offline with the chart's own rule and wording.

The runtime carries the chart's catalog (src/aicr_runner/data is a copy of
chart/files) and ports its template rule to Python; for every combination the
chart's criteria suite uses, both must accept or refuse alike, with the same
problems in the same words.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from aicr_runner.settings import criteria_catalog as catalog
from tests.chart.helm import ROOT, render
from tests.chart.test_criteria import COMBINATIONS

EXTRA = [
    {"accelerator": "sparc"},
    {"service": "gke", "accelerator": "h100", "os": "ubuntu"},
    {"service": "acme", "accelerator": "h100"},
    {"service": "k0s", "accelerator": "h200", "intent": "training"},
]


def test_the_runtime_carries_the_charts_catalog_unchanged() -> None:
    chart_copy = ROOT / "chart" / "files" / "criteria-catalog.json"
    assert catalog.CATALOG_PATH.read_bytes() == chart_copy.read_bytes()


@pytest.mark.parametrize("criteria", COMBINATIONS + EXTRA, ids=lambda c: "+".join(c.values()))
def test_plan_refuses_exactly_what_the_chart_refuses_in_its_words(criteria: dict[str, str]) -> None:
    result = render(criteria, raw=True)
    refused = catalog.refusal(criteria, "v1.2.0")
    if result.ok:
        assert refused is None, f"the chart renders {criteria}, plan refuses it: {refused}"
        return
    assert refused is not None, f"the chart refuses {criteria}, plan accepts it:\n{result.stderr}"
    if result.schema_error:
        return  # values.schema.json's enum refuses it first (accelerator 'sparc'); plan lists the known values
    assert result.error, result.stderr
    assert refused is not None, f"the chart refuses {criteria}, plan accepts it:\n{result.error}"
    lead = result.error.split(". State a supported combination")[0]
    assert refused.startswith(lead + ". State a supported combination"), f"\nchart: {lead}\n plan: {refused}"


def test_another_aicr_version_is_not_checked_against_this_catalog() -> None:
    assert catalog.refusal({"accelerator": "sparc"}, "v1.3.0") is None


def test_the_check_imports_nothing_heavy() -> None:
    heavy = ("kubernetes", "oras", "httpx", "requests", "pydantic")
    probe = (
        "import sys; from aicr_runner.settings.criteria_catalog import refusal; "
        "refusal({'accelerator': 'sparc'}, 'v1.2.0'); "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
