"""A real consumer reads the verdict: kube-state-metrics v2.18.0 (built by
scripts/bootstrap-tools.sh) runs as a host process against the e2e API server
with the custom-resource-state configuration the chart installs
(``monitoring.kubeStateMetrics.enabled``), as a user holding only the RBAC
docs/monitoring.md lists. After a run wrote the ``Report``, its ``/metrics``
carries the Report's counts by status and its last-run time; after a second run
that fails a check, the new counts. Every wait polls ``/metrics`` (bounded)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.apiserver import ControlPlane
from e2e.harness.node import Kubelet
from e2e.harness.procs import ManagedProcess, free_port, wait_for
from e2e.reports import REPORT_NAME, Release, ran, report_apis
from e2e.scenarios import CHART, RELEASE
from e2e.tools import tool

pytestmark = pytest.mark.e2e

KSM_USER = "aicr-e2e-kube-state-metrics"
STATUSES = ("pass", "fail", "warn", "error", "skip")
#: What kube-state-metrics needs to read the Report (docs/monitoring.md): it
#: discovers the resources of its configuration through the CRDs.
KSM_RULES = [
    {"apiGroups": ["openreports.io"], "resources": ["reports"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
]
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` in Prometheus text format: (labels, value)."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            out.append((dict(_LABEL.findall(match["labels"])), float(match["value"])))
    return out


class KubeStateMetrics:
    def __init__(self, url: str) -> None:
        self.url = url

    def scrape(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def verdict(self, namespace: str) -> tuple[dict[str, float], float, dict[str, str]]:
        """(counts by status, last-run time, the last-run sample's labels) of our Report."""
        text = self.scrape()

        def ours(labels: dict[str, str]) -> bool:
            return labels.get("namespace") == namespace and labels.get("report") == REPORT_NAME

        counts = {labels["status"]: value for labels, value in samples(text, "aicr_report_results") if ours(labels)}
        [(labels, last_run)] = [s for s in samples(text, "aicr_report_last_run_timestamp_seconds") if ours(s[0])]
        return counts, last_run, labels

    def wait_verdict(self, namespace: str, summary: dict[str, int], last_run: float) -> dict[str, str]:
        """Poll /metrics (bounded) until it carries ``summary`` and ``last_run``."""

        def current() -> dict[str, str] | None:
            counts, seen_last_run, labels = self.verdict(namespace)
            return labels if (counts, seen_last_run) == ({k: float(v) for k, v in summary.items()}, last_run) else None

        try:
            return wait_for(current, timeout=120, what="kube-state-metrics exports the Report's verdict", interval=0.5)
        except Exception:
            print(self.scrape())  # what it did export, for the failure report
            raise


def grant_ksm(plane: ControlPlane, namespace: str) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    name = f"{namespace}-kube-state-metrics"
    plane.admin.create(f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": KSM_RULES})
    plane.admin.create(
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KSM_USER}],
        },
    )


@pytest.fixture
def kube_state_metrics(
    first_run: dict[str, Any], control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[KubeStateMetrics]:
    """kube-state-metrics on the configuration the installed chart's ConfigMap holds
    (after the first run: the chart is installed, the Report written)."""
    cm = control_plane.configmap(namespace, f"{RELEASE}-kube-state-metrics")
    assert cm is not None, "monitoring.kubeStateMetrics.enabled renders the configuration"
    config = tmp_path / "custom-resource-state.yaml"
    config.write_text(cm["data"]["config.yaml"])
    grant_ksm(control_plane, namespace)
    kubeconfig = control_plane.cert_kubeconfig(tmp_path / "ksm.kubeconfig", KSM_USER)
    port, telemetry = free_port(), free_port()
    argv: list[str | Path] = [
        tool("kube-state-metrics"),
        f"--kubeconfig={kubeconfig}",
        f"--custom-resource-state-config-file={config}",
        "--custom-resource-state-only",
        "--host=127.0.0.1",
        f"--port={port}",
        "--telemetry-host=127.0.0.1",
        f"--telemetry-port={telemetry}",
    ]
    proc = ManagedProcess("kube-state-metrics", argv, tmp_path / "kube-state-metrics.log")
    try:
        yield KubeStateMetrics(f"http://127.0.0.1:{port}")
    finally:
        proc.stop()
        print(proc.log_tail())


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def install(release: Release, result: str, rerun: str = "") -> None:
    values: dict[str, Any] = release.values(result, rerun) | {"monitoring": {"kubeStateMetrics": {"enabled": True}}}
    if rerun:
        args = release.helm._values_args(values, (), None)
        release.helm.run("upgrade", RELEASE, str(CHART), "-n", release.namespace, *args)
    else:
        release.helm.install(RELEASE, CHART, release.namespace, values=values)


@pytest.fixture
def first_run(release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet) -> dict[str, Any]:
    report_apis(control_plane, ["openreports"])
    install(release, "pass")
    run = ran(aicr_kubelet.run_job(RELEASE, release.namespace))
    report = release.report("openreports")
    assert report is not None, run.output
    return report


def test_kube_state_metrics_exports_the_reports_counts_and_last_run(
    first_run: dict[str, Any],
    release: Release,
    aicr_kubelet: Kubelet,
    kube_state_metrics: KubeStateMetrics,
) -> None:
    summary = first_run["summary"]
    assert set(summary) == set(STATUSES)
    assert summary["pass"] > 0
    assert summary["fail"] == 0
    last_run = epoch(first_run["metadata"]["annotations"]["aicr.nvidia.com/last-run"])
    labels = kube_state_metrics.wait_verdict(release.namespace, summary, last_run)
    aicr_version = first_run["results"][0]["properties"]["aicrVersion"]
    assert (labels["release"], labels["source"], labels["aicr_version"]) == (RELEASE, "aicr", aicr_version)
    print(
        "kube-state-metrics exported:\n"
        + "\n".join(
            line
            for line in kube_state_metrics.scrape().splitlines()
            if line.startswith("aicr_report") and release.namespace in line
        )
    )

    install(release, "fail", rerun="2")
    second_run = aicr_kubelet.run_job(RELEASE, release.namespace)
    assert second_run.exit_code == 0, second_run.describe()  # validate.failOnError is off
    second = release.report("openreports")
    assert second is not None
    assert second["summary"]["fail"] > 0
    second_last_run = epoch(second["metadata"]["annotations"]["aicr.nvidia.com/last-run"])
    kube_state_metrics.wait_verdict(release.namespace, second["summary"], second_last_run)
