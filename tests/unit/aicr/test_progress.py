"""deploy.sh's per-component lines: real aicr 0.11.1 output and the 1.x contract.

The 0.11.1 transcripts in tests/data/aicr-0.11.1-deploy were printed by the
deploy.sh of bundles the real aicr v0.11.1 wrote, run with stub helm/kubectl
(scripts/capture-deploy-output.py re-captures them).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aicr_runner.aicr.classify import DeployMarkers
from aicr_runner.aicr.progress import ComponentLine, ComponentTable, LineKind, component_line

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "aicr-0.11.1-deploy"
SCENARIOS: dict[str, dict[str, object]] = json.loads((FIXTURES / "scenarios.json").read_text())
#: The eks/h100/ubuntu/training recipe of aicr 0.11.1, in deploy.sh's order.
EKS_TRAINING = [
    "aws-ebs-csi-driver",
    "aws-efa",
    "cert-manager",
    "kube-prometheus-stack",
    "k8s-ephemeral-storage-metrics",
    "prometheus-adapter",
    "skyhook-operator",
    "skyhook-customizations",
    "gpu-operator",
    "kai-scheduler",
    "nvidia-dra-driver-gpu",
    "nvsentinel",
]


class Clock:
    """One second per reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def replay(name: str, *, total: int = 0) -> tuple[DeployMarkers, list[bool]]:
    """Feed a captured transcript, as the deploy relay would, and finish with its exit code."""
    ended: list[bool] = []
    markers = DeployMarkers(
        results_reported=False, components=ComponentTable(total=total, clock=Clock()), on_component=ended.append
    )
    markers.scan((FIXTURES / f"{name}.log").read_text())
    markers.components.finish(exit_code=int(str(SCENARIOS[name]["exitCode"])))
    return markers, ended


def test_the_fixtures_are_the_scenarios_the_capture_script_lists() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.log")) == sorted(SCENARIOS)
    assert [SCENARIOS[n]["exitCode"] for n in sorted(SCENARIOS)] == [0, 0, 1, 0]


def test_a_clean_0_11_run_has_every_component_installed_in_order() -> None:
    markers, ended = replay("eks-training-clean", total=12)
    assert markers.started == EKS_TRAINING
    assert markers.installed == EKS_TRAINING
    assert markers.failed == []
    assert markers.counts() == "12/12 installed"
    # Each component ended once: at the next start, the last at "Deployment complete.".
    assert ended.count(True) == 12


def test_a_0_11_best_effort_run_names_each_failed_component_once() -> None:
    markers, _ = replay("eks-training-best-effort-failures", total=12)
    assert markers.failed == ["skyhook-customizations", "gpu-operator", "nvsentinel"]
    assert markers.installed == [n for n in EKS_TRAINING if n not in markers.failed]
    assert markers.failure_report is True
    assert markers.counts() == "9/12 installed, 3 failed (skyhook-customizations, gpu-operator, nvsentinel)"
    rows = {row["name"]: row for row in markers.components.snapshot()["components"]}
    # deploy.sh retried once (--retries 1): two attempts, as its ERROR line says.
    assert rows["gpu-operator"]["attempts"] == 2
    assert rows["cert-manager"]["attempts"] == 1


def test_a_0_11_failure_without_best_effort_names_the_component() -> None:
    """aicr 0.11's `ERROR: gpu-operator helm install failed after 1 attempts`, then exit 1."""
    markers, _ = replay("eks-training-fail-fast", total=12)
    assert markers.failed == ["gpu-operator"]
    assert markers.installed == EKS_TRAINING[:8]
    assert markers.counts() == "8/12 installed, 1 failed (gpu-operator)"
    snapshot = markers.components.snapshot()
    assert (snapshot["done"], snapshot["failed"], snapshot["current"]) == (9, 1, "")


def test_a_clean_0_11_run_of_another_recipe() -> None:
    markers, _ = replay("gke-inference-best-effort-clean")
    assert markers.failed == []
    assert len(markers.installed) == len(markers.started) > 5
    assert markers.counts() == f"{len(markers.started)}/{len(markers.started)} installed"


def test_a_0_11_run_still_going_shows_its_current_component() -> None:
    """Half a transcript: the components before the last start are installed, that one is current."""
    lines = (FIXTURES / "eks-training-clean.log").read_text().splitlines()
    cut = lines.index("Installing gpu-operator (gpu-operator)...") + 1
    markers = DeployMarkers(results_reported=False, components=ComponentTable(total=12, clock=Clock()))
    markers.scan("\n".join(lines[:cut]) + "\n")
    snapshot = markers.components.snapshot()
    assert (snapshot["done"], snapshot["total"], snapshot["current"]) == (8, 12, "gpu-operator")
    assert snapshot["components"][-1] == {
        "name": "gpu-operator",
        "namespace": "gpu-operator",
        "status": "running",
        "attempts": 1,
        "durationSeconds": None,
    }


#: The 1.x lines of the contract (reference section 8), one per kind.
CONTRACT_1X: list[tuple[str, ComponentLine | None]] = [
    ("┌─ [9/13] gpu-operator  →  gpu-operator", ComponentLine(LineKind.STARTED, "gpu-operator", "gpu-operator", 9, 13)),
    ("└─ ✓ gpu-operator installed", ComponentLine(LineKind.INSTALLED, "gpu-operator")),
    ("└─ ✗ nfd FAILED (after 6 attempts)", ComponentLine(LineKind.FAILED, "nfd", attempts=6)),
    ("↺ nfd: attempt 2/5 failed, retrying in 20s...", ComponentLine(LineKind.RETRYING, "nfd", attempts=2)),
    ("⚠ nfd install failed, continuing (--best-effort)", ComponentLine(LineKind.FAILED, "nfd")),
    ("│  (async component — skipping --wait, keeping --timeout for hooks)", None),
    ("✗ Deployment completed with failures (--best-effort): nfd", None),
    ("✓ All components installed successfully.", None),
    ("⚠ DRA kubelet plugin restart blocked, retry needed for: nvidia-dra-driver-gpu — re-run", None),
    ("Error: INSTALLATION FAILED: context deadline exceeded", None),
]


@pytest.mark.parametrize(("line", "expected"), CONTRACT_1X, ids=[line for line, _ in CONTRACT_1X])
def test_1x_contract_lines(line: str, expected: ComponentLine | None) -> None:
    assert component_line(line) == expected


#: 0.11 lines that are not a component's start or end.
@pytest.mark.parametrize(
    "line",
    [
        "Applying pre-install manifests for gpu-operator...",
        "Applying post-install manifests for gpu-operator...",
        "ERROR: namespace 'gpu-operator' is still terminating from a previous install.",
        "WARNING: the following components failed: nfd",
        "  (async component — skipping --wait)",
        "Deploying Cloud Native Stack components...",
    ],
)
def test_0_11_lines_that_start_or_end_nothing(line: str) -> None:
    assert component_line(line) is None


def test_a_1x_run_times_each_component_and_counts_as_it_goes() -> None:
    table = ComponentTable(clock=Clock())
    markers = DeployMarkers(components=table)
    markers.scan("┌─ [1/3] cert-manager  →  cert-manager\n")
    assert table.snapshot()["current"] == "cert-manager"
    markers.scan("└─ ✓ cert-manager installed\n┌─ [2/3] nfd  →  nfd\n  ↺ nfd: attempt 1/1 failed, retrying in 5s...\n")
    markers.scan("└─ ✗ nfd FAILED (after 2 attempts)\n⚠ nfd install failed, continuing (--best-effort)\n")
    snapshot = table.snapshot()
    assert {k: snapshot[k] for k in ("total", "done", "installed", "failed", "current")} == {
        "total": 3,
        "done": 2,
        "installed": 1,
        "failed": 1,
        "current": "",
    }
    assert [(r["name"], r["status"], r["attempts"], r["durationSeconds"]) for r in snapshot["components"]] == [
        ("cert-manager", "installed", 1, 1.0),
        ("nfd", "failed", 2, 2.0),  # the clock ticks at every line: start, retry, end
    ]


def test_a_component_that_never_ended_is_failed_or_interrupted_with_deploy_sh() -> None:
    for interrupted, status in ((False, "failed"), (True, "interrupted")):
        table = ComponentTable()
        DeployMarkers(components=table).scan("┌─ [1/2] nfd  →  nfd\n")
        table.finish(exit_code=130 if interrupted else 1, interrupted=interrupted)
        assert table.names(status) == ["nfd"]
