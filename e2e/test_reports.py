"""The verdict as a report object, against the real API server with the real CRDs.

The report CRDs are the YAML files of the pinned Go modules (``report_crds()``:
github.com/openreports/reports-api v0.2.1 ``config/crd``, github.com/kyverno/kyverno
v1.19.1 ``config/crds/policyreport``, downloaded, not built). Each test sets the
cluster's report APIs it needs (installs the CRDs, or deletes them and waits
until discovery no longer lists them), installs the chart with pinned helm and
the chart's narrower RBAC (``rbac.clusterAdmin: false``, which grants no report:
the namespaced Role alone does), and lets the real kubelet run the Job: the
fake aicr validates and deploy.sh simulates the pack's installs.

- OpenReports served (wgpolicyk8s too): a run writes the ``Report``; a second run
  replaces its results (same object, same name, same number of results, the
  flipped check's new result); deleting the Job leaves it.
- only ``wgpolicyk8s.io/v1alpha2``: a ``PolicyReport``.
- a deploy that fails (no ``--best-effort``) ends the run before validation: the
  report still carries each component deploy.sh reported.
- neither: none, one log line, and the run succeeds. Last: the session's cluster
  is left serving no report API, as it found it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import install_crds
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.procs import wait_for
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import ACME_CRITERIA, CHART, RELEASE, embedded_base_components, extra_env, write_org_pack
from e2e.tools import report_crds

pytestmark = pytest.mark.e2e

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


@pytest.fixture
def release(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    registry: Registry,
    registry_auth_file: Path,
    namespace: str,
    tmp_path: Path,
) -> Release:
    control_plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    pack = write_org_pack(tmp_path / "pack", chart_repository=CHARTS, namespace=f"{namespace}-acme", charts=COMPONENTS)
    ref = oras.push_pack(pack, registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0"), registry_config=registry_auth_file)
    return Release(helm, control_plane, namespace, ref.ref)


def ran(run: JobRun) -> JobRun:
    assert run.exit_code == 0, run.describe()
    return run


def by_policy(report: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["category"], r["policy"]): r for r in report["results"]}


def test_a_run_writes_the_report_a_second_run_replaces_its_results_and_it_outlives_the_job(
    release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet
) -> None:
    report_apis(control_plane, ["openreports", "wgpolicy"])
    release.install("pass")
    first_run = ran(aicr_kubelet.run_job(RELEASE, release.namespace))

    first = release.report("openreports")
    assert first is not None, first_run.output
    assert release.report("wgpolicy") is None, "OpenReports first, where both are served"
    checks = [t["name"] for t in release.ctrf_tests()]
    meta = first["metadata"]
    assert "ownerReferences" not in meta
    assert meta["labels"] == {
        "app.kubernetes.io/name": "nvidia-aicr",
        "app.kubernetes.io/managed-by": "aicr-runner",
        "aicr.nvidia.com/release": RELEASE,
    }
    assert meta["annotations"]["aicr.nvidia.com/last-run"].endswith("Z")
    assert (first["source"], first["configuration"]) == ("aicr", {"limits": {"maxResults": 500}}), "not pruned"
    results = by_policy(first)
    assert set(results) == {("deployment", c) for c in checks} | {("deploy", c) for c in COMPONENTS}
    assert {r["result"] for r in results.values()} == {"pass"}
    assert first["summary"] == {"pass": len(checks) + len(COMPONENTS), "fail": 0, "warn": 0, "error": 0, "skip": 0}
    props = results[("deploy", "acme-agent")]["properties"]
    assert props["runBy"].startswith(release.job() + "/")
    assert "verdict report written" in first_run.output

    release.upgrade("fail", rerun="2")
    second_run = aicr_kubelet.run_job(RELEASE, release.namespace)
    assert second_run.exit_code == 0, second_run.describe()  # validate.failOnError is off

    second = release.report("openreports")
    assert second is not None
    assert (second["metadata"]["name"], second["metadata"]["uid"]) == (REPORT_NAME, meta["uid"]), "the same object"
    assert len(second["results"]) == len(first["results"]), "replaced, not appended"
    failed = [t["name"] for t in release.ctrf_tests() if t["status"] == "failed"]
    assert failed, "the fake failed a check"
    flipped = by_policy(second)[("deployment", failed[0])]
    assert flipped["result"] == "fail"
    assert flipped["properties"]["resultID"] != results[("deployment", failed[0])]["properties"]["resultID"]
    assert second["summary"]["fail"] == len(failed)
    assert (
        second["metadata"]["annotations"]["aicr.nvidia.com/last-run"] >= meta["annotations"]["aicr.nvidia.com/last-run"]
    )

    job = release.job()
    jobs = f"/apis/batch/v1/namespaces/{release.namespace}/jobs"
    control_plane.admin.request("DELETE", f"{jobs}/{job}", {"propagationPolicy": "Foreground"})

    def gone() -> bool | None:
        return True if not control_plane.admin.exists(f"{jobs}/{job}") else None

    wait_for(gone, timeout=120, what=f"Job {job} and its dependents deleted (foreground)")
    kept = release.report("openreports")
    assert kept is not None, "a report owned by nothing stays when the Job goes"
    assert kept["metadata"]["uid"] == meta["uid"]


def test_where_only_wgpolicy_is_served_a_run_writes_a_policyreport(
    release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet
) -> None:
    report_apis(control_plane, ["wgpolicy"])
    release.install("pass")
    run = ran(aicr_kubelet.run_job(RELEASE, release.namespace))

    report = release.report("wgpolicy")
    assert report is not None, run.output
    assert (report["apiVersion"], report["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert "source" not in report
    assert {r["source"] for r in report["results"]} == {"aicr"}
    assert len(report["results"]) == len(release.ctrf_tests()) + len(COMPONENTS)
    assert "ownerReferences" not in report["metadata"]


def test_a_failed_deploy_ends_the_run_before_validation_and_the_report_carries_its_components(
    release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet
) -> None:
    report_apis(control_plane, ["openreports"])
    values = release.values("pass", FAKE_AICR_DEPLOY_FAIL="acme-c03")
    release.helm.install(RELEASE, CHART, release.namespace, values={**values, "deployFlags": "--no-wait"})
    run = aicr_kubelet.run_job(RELEASE, release.namespace)
    assert run.exit_code == 1, run.describe()

    report = release.report("openreports")
    assert report is not None, run.output
    results = {r["policy"]: r["result"] for r in report["results"]}
    assert {r["category"] for r in report["results"]} == {"deploy"}, "validation never ran"
    assert results["acme-c03"] == "fail"
    assert set(results.values()) == {"pass", "fail"}
    assert report["summary"]["fail"] == 1


def test_where_neither_is_served_no_report_is_written_one_line_says_so_and_the_run_succeeds(
    release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet
) -> None:
    report_apis(control_plane, [])
    release.install("pass")
    run = ran(aicr_kubelet.run_job(RELEASE, release.namespace))

    said = [line for line in run.output.splitlines() if "verdict report" in line]
    assert len(said) == 1, said
    assert (
        "no verdict report written: the cluster serves no openreports.io/v1alpha1 or wgpolicyk8s.io/v1alpha2" in said[0]
    )
    assert "verdict report not written" not in run.output
    assert not served(control_plane, "openreports")
    assert not served(control_plane, "wgpolicy")
    assert run.termination_message.startswith("Succeeded (exit 0)"), run.termination_message
