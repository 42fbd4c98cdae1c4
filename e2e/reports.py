"""A release whose runs write the verdict report, and the cluster's report APIs:
shared by the scenarios of the report (test_reports), the fleet view (test_fleet)
and the metrics and alerts read from it (test_monitoring). The ``release`` fixture
(e2e/conftest.py) makes one with its org pack pushed and its pull Secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import install_crds
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun
from e2e.harness.procs import wait_for
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import ACME_CRITERIA, CHART, RELEASE, embedded_base_components, extra_env
from e2e.tools import report_crds

PACK_SECRET = "pack-cred"
REPORT_NAME = f"aicr-{RELEASE}"
CHARTS = "oci://registry.example/charts"  # the simulated installs pull nothing
COMPONENTS = {"acme-agent": "1.0.0"} | {f"acme-c{i:02d}": "1.0.0" for i in range(1, 6)}
APIS = {
    "openreports": ("openreports.io/v1alpha1", "reports"),
    "wgpolicy": ("wgpolicyk8s.io/v1alpha2", "policyreports"),
}


def crd_files(api: str) -> list[Path]:
    return sorted((report_crds() / api).glob("*.yaml"))


def crd_names(api: str) -> list[str]:
    return [str(yaml.safe_load(path.read_text())["metadata"]["name"]) for path in crd_files(api)]


def served(plane: ControlPlane, api: str) -> bool:
    group_version, plural = APIS[api]
    path = f"/apis/{group_version}"
    return plane.admin.exists(path) and any(r["name"] == plural for r in plane.admin.get(path)["resources"])


def report_apis(plane: ControlPlane, wanted: Iterable[str]) -> None:
    """Exactly ``wanted`` report APIs served: their CRDs installed (Established),
    the others deleted, each change waited for in discovery."""
    wanted = set(wanted)
    for api in APIS:
        if api in wanted:
            install_crds(plane, crd_files(api))
        else:
            for name in crd_names(api):
                path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                if plane.admin.exists(path):
                    plane.admin.delete(path)
    for api in APIS:
        want = api in wanted

        def settled(api: str = api, want: bool = want) -> bool | None:
            return True if served(plane, api) is want else None

        wait_for(settled, timeout=60, what=f"{api} served={want}")


class Release:
    """The chart in this test's namespace, and what its runs left."""

    def __init__(self, helm: Helm, plane: ControlPlane, namespace: str, pack: str) -> None:
        self.helm, self.plane, self.namespace, self.pack = helm, plane, namespace, pack

    def values(self, result: str, rerun: str = "", **env: str) -> dict[str, Any]:
        """Validation on (verdict ``result``), simulated installs, the chart's narrower
        RBAC; ``env``: more FAKE_AICR_* knobs."""
        return {
            **ACME_CRITERIA,
            "dataPack": self.pack,
            "dataPackSecret": PACK_SECRET,
            "dataPackPlainHTTP": True,
            "aicrBinary": {"path": FAKE_AICR_PATH},
            "aicrProvenance": {"mode": "off"},
            "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
            "rbac": {"clusterAdmin": False},
            "validate": {"enabled": True},
            "rerun": rerun,
            "job": {
                "backoffLimit": 0,
                "extraEnv": extra_env(FAKE_AICR_DEPLOY_BACKOFF="0", FAKE_AICR_VALIDATE_RESULT=result, **env),
            },
        }

    def install(self, result: str) -> None:
        self.helm.install(RELEASE, CHART, self.namespace, values=self.values(result))

    def upgrade(self, result: str, rerun: str) -> None:
        values = self.helm._values_args(self.values(result, rerun), (), None)
        self.helm.run("upgrade", RELEASE, str(CHART), "-n", self.namespace, *values)

    def report(self, api: str) -> dict[str, Any] | None:
        group_version, plural = APIS[api]
        path = f"/apis/{group_version}/namespaces/{self.namespace}/{plural}/{REPORT_NAME}"
        return self.plane.admin.get(path) if self.plane.admin.exists(path) else None

    def ctrf_tests(self) -> list[dict[str, Any]]:
        cm = self.plane.configmap(self.namespace, "aicr-validate-result")
        assert cm is not None
        return list(json.loads(cm["data"]["ctrf.json"])["results"]["tests"])

    def job(self) -> str:
        [job] = self.plane.admin.get(f"/apis/batch/v1/namespaces/{self.namespace}/jobs")["items"]
        return str(job["metadata"]["name"])


def ran(run: JobRun) -> JobRun:
    assert run.exit_code == 0, run.describe()
    return run
