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

from collections.abc import Mapping
from typing import Any

import pytest

from e2e.harness.apiserver import ControlPlane
from e2e.harness.node import Kubelet
from e2e.harness.procs import wait_for
from e2e.reports import COMPONENTS, REPORT_NAME, Release, ran, report_apis, served
from e2e.scenarios import CHART, RELEASE

pytestmark = pytest.mark.e2e


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
    assert "no verdict report written " in said[0]
    assert "the cluster serves no openreports.io/v1alpha1 or wgpolicyk8s.io/v1alpha2 reports" in said[0]
    assert "verdict report not written" not in run.output
    assert not served(control_plane, "openreports")
    assert not served(control_plane, "wgpolicy")
    assert run.termination_message.startswith("Succeeded (exit 0)"), run.termination_message
