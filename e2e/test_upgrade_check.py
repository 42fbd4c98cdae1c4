"""Crossing an aicr pin on the e2e node (issue 36): the runner compares the recipe it
is about to install with the one the release installed last, and a crossing runs
``aicr upgrade-check`` before the install Lease and the deploy.

1. The fake aicr (1.x, the contract's ``upgrade-check``): an org pack installs
   acme-agent 1.0.0 and acme-config 0.3.1 for real (deploy.sh runs the real helm
   against the real registry). A chart upgrade to the pack's next tag moves
   acme-agent to 2.0.0, which the fake's transition table says is **blocked**
   (earliest recorded starting point 1.5.0): the Job stops before deploy with exit
   35, made final by the chart's podFailurePolicy (one pod, FailJob); no Helm
   release changes (asserted per release, by namespace and name); a Warning
   ``UpgradeStopped`` Event on the Job names the component; the report is in the
   ``aicr-recipe-upgrade-check`` ConfigMap, the run report, the OpenReports
   ``Report`` (one result per component, ``fail`` for blocked) and the fleet row
   (``upgrade blocked: acme-agent 1.0.0 → 2.0.0``). Then the same move, now
   recorded as **manual**, acknowledged in ``upgradeCheck.acknowledge``: the
   upgrade proceeds and acme-agent is at 2.0.0.
2. The real aicr v0.11.1 (no ``upgrade-check``): a release whose recorded recipe
   differs from what v0.11.1 resolves now is reported as not assessed, and under
   ``upgradeCheck.requireAssessment`` stops before deploy (exit 35).

The time the check adds (the upgrade-check step's duration in the run report) is
printed (``-s``) for docs/installing.md "Upgrading".
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet, RealNode, derive_image, load_image
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.reports import report_apis
from e2e.scenarios import (
    ACME_CRITERIA,
    CHART,
    PACK_AUTH_FILE,
    RELEASE,
    RunResults,
    _write_component_chart,
    embedded_base_components,
    extra_env,
    write_org_pack,
)
from tests.support.real_aicr import extract_binary

pytestmark = pytest.mark.e2e

PACK_SECRET = "pack-cred"
BEFORE = {"acme-agent": "1.0.0", "acme-config": "0.3.1"}
AFTER = {"acme-agent": "2.0.0", "acme-config": "0.3.1"}
MOVE = "acme-agent:1.0.0:2.0.0"
BLOCKED = {MOVE: {"verdict": "blocked", "earliestFrom": "1.5.0", "reference": "acme-agent UPGRADING.md"}}
MANUAL = {MOVE: {"verdict": "manual", "steps": ["drain the acme agents", "migrate the acme-agent state"]}}
CHECK_CONFIGMAP = "aicr-recipe-upgrade-check"
#: Where the derived image holds the real aicr v0.11.1.
PREINSTALLED_AICR = "/opt/aicr/bin/aicr"


def push_charts(helm: Helm, registry: Registry, workdir: Path) -> str:
    """acme-agent at 1.0.0 and 2.0.0, acme-config at 0.3.1: oci://HOST/upgrade-charts."""
    repository = f"oci://{registry.host}/upgrade-charts"
    for name, version in {("acme-agent", "1.0.0"), ("acme-agent", "2.0.0"), ("acme-config", "0.3.1")}:
        source = _write_component_chart(workdir / "src" / f"{name}-{version}", name, version)
        helm.run("package", str(source), "--destination", str(workdir / "packages"))
        package = workdir / "packages" / f"{name}-{version}.tgz"
        login = ("--username", registry.username, "--password", registry.password)
        helm.run("push", str(package), repository, "--plain-http", *login)
    return repository


def values(pack: str, transitions: dict[str, Any], **override: Any) -> dict[str, Any]:
    """The org pack's install with a real deploy; the fake aicr's transition table."""
    return {
        **ACME_CRITERIA,
        "dataPack": pack,
        "dataPackSecret": PACK_SECRET,
        "dataPackPlainHTTP": True,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        "aicrProvenance": {"mode": "off"},
        "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
        "job": {
            "extraEnv": extra_env(
                FAKE_AICR_DEPLOY_REAL="1",
                FAKE_AICR_DEPLOY_BACKOFF="0",
                FAKE_AICR_HELM_FLAGS=f"--plain-http --registry-config {PACK_AUTH_FILE}",
                FAKE_AICR_UPGRADE_TRANSITIONS=json.dumps(transitions),
            )
        },
        **override,
    }


def helm_state(helm: Helm, owned: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, str, str]]:
    """(namespace, name) -> (revision, status, chart) of the install's own releases."""
    return {
        (r["namespace"], r["name"]): (int(r["revision"]), r["status"], r["chart"])
        for r in helm.list_releases()
        if (r["namespace"], r["name"]) in owned
    }


def job_names(plane: ControlPlane, namespace: str) -> set[str]:
    return {j["metadata"]["name"] for j in plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]}


def new_job(plane: ControlPlane, namespace: str, old: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = job_names(plane, namespace) - old
        if fresh:
            return fresh.pop()
        time.sleep(0.1)
    raise AssertionError(f"no new Job in {namespace} after the upgrade")


def upgrade(helm: Helm, namespace: str, chart_values: dict[str, Any]) -> None:
    helm.run("upgrade", RELEASE, str(CHART), "-n", namespace, *helm._values_args(chart_values, (), None))


def warnings_on(plane: ControlPlane, namespace: str, job: str) -> list[tuple[str, str]]:
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [
        (e["reason"], e.get("note", ""))
        for e in items
        if e["type"] == "Warning" and (e.get("regarding") or {}).get("name") == job
    ]


def wait_for_end(kubelet: Kubelet, job: dict[str, Any], timeout: float = 60) -> tuple[str, str]:
    """The Job's end as the Job controller records it (it follows the pod's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = kubelet.job_status(job)
        if status[0]:
            return status
        time.sleep(0.1)
    raise AssertionError(f"Job {job['metadata']['name']} did not end")


def step(results: RunResults, state: str) -> dict[str, Any]:
    return results.step(state)


def seconds(record: dict[str, Any]) -> float:
    return float(record["durationSeconds"])


def fleet_rows(plane: ControlPlane) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "aicr_runner", "fleet", "--kubeconfig", str(plane.kubeconfig), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return list(json.loads(done.stdout)["rows"])


def test_a_blocked_crossing_stops_before_deploy_and_an_acknowledged_manual_one_proceeds(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    registry: Registry,
    registry_auth_file: Path,
    aicr_kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    plane = control_plane
    report_apis(plane, ["openreports"])
    plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    repository = push_charts(helm, registry, tmp_path / "charts")
    components = f"{namespace}-acme"
    packs = {
        tag: oras.push_pack(
            write_org_pack(tmp_path / f"pack-{tag}", chart_repository=repository, namespace=components, charts=charts),
            registry.ref(f"acme/{namespace}/aicr-pack", tag),
            registry_config=registry_auth_file,
        ).ref
        for tag, charts in (("1.0.0", BEFORE), ("2.0.0", AFTER))
    }
    owned = {(namespace, RELEASE), (components, "acme-agent"), (components, "acme-config")}
    results = RunResults(plane, namespace)

    # The install: nothing recorded, nothing crossed.
    helm.install(RELEASE, CHART, namespace, values=values(packs["1.0.0"], BLOCKED))
    first = aicr_kubelet.run_job(RELEASE, namespace)
    assert first.exit_code == 0, first.describe()
    assert step(results, "upgrade-check")["status"] == "skipped"
    assert "first install" in step(results, "upgrade-check")["message"]
    installed = helm_state(helm, owned)
    assert installed[(components, "acme-agent")] == (1, "deployed", "acme-agent-1.0.0")
    assert installed[(components, "acme-config")] == (1, "deployed", "acme-config-0.3.1")

    # A chart upgrade to the pack's next tag: acme-agent 1.0.0 -> 2.0.0, blocked.
    jobs = job_names(plane, namespace)
    upgrade(helm, namespace, values(packs["2.0.0"], BLOCKED))
    blocked_job = new_job(plane, namespace, jobs)
    stopped = aicr_kubelet.run_job(RELEASE, namespace, job_name=blocked_job)
    assert stopped.exit_code == 35, stopped.describe()
    job = {"metadata": {"namespace": namespace, "name": blocked_job}}
    assert wait_for_end(aicr_kubelet, job) == ("Failed", "PodFailurePolicy"), "exit 35 is final: no second pod"
    check = step(results, "upgrade-check")
    assert (check["status"], check["exitCode"]) == ("failed", 35)
    assert "upgrade blocked: acme-agent 1.0.0 → 2.0.0" in check["message"]
    assert "upgrade to 1.5.0 (the earliest recorded starting point) first" in check["message"]
    stopped_seconds = seconds(check)
    assert {s["state"]: s["status"] for s in results.report()["steps"]}["deploy"] == "skipped"
    # No Helm release changed: the components' and the chart's own (revision 2: the upgrade itself).
    after_stop = helm_state(helm, owned)
    for key in ((components, "acme-agent"), (components, "acme-config")):
        assert after_stop[key] == installed[key], key
    # The Event, the report in its ConfigMap and in the Report, the fleet row.
    warned = dict(warnings_on(plane, namespace, blocked_job))
    assert "acme-agent 1.0.0 → 2.0.0" in warned["UpgradeStopped"]
    assert warned["UpgradeCheckFailed"] == check["message"], "and the step's own Event"
    kept = json.loads(results.data(CHECK_CONFIGMAP)["upgrade-check.json"])
    verdicts = {c["component"]: (c["from"], c["to"], c["verdict"]) for c in kept["components"]}
    assert verdicts.pop("acme-agent") == ("1.0.0", "2.0.0", "blocked")
    assert verdicts.pop("acme-config") == ("0.3.1", "0.3.1", "safe")
    # The embedded components every recipe carries (switched off at bundle time) did not move.
    assert {v[2] for v in verdicts.values()} == {"safe"}
    assert set(verdicts) == set(embedded_base_components())
    print(f"\nthe e2e crossing:\n{results.data(CHECK_CONFIGMAP)['summary.txt']}")
    report = plane.admin.get(f"/apis/openreports.io/v1alpha1/namespaces/{namespace}/reports/aicr-{RELEASE}")
    crossed = {r["policy"]: r["result"] for r in report["results"] if r["category"] == "upgrade-check"}
    assert (crossed.pop("acme-agent"), crossed.pop("acme-config")) == ("fail", "pass")
    assert set(crossed.values()) == {"pass"}
    assert report["metadata"]["annotations"]["aicr.nvidia.com/upgrade-blocked"] == "1"
    [row] = [r for r in fleet_rows(plane) if r["namespace"] == namespace]
    assert (row["detail"], row["green"]) == ("upgrade blocked: acme-agent 1.0.0 → 2.0.0", False)

    # The same move recorded as manual, acknowledged: the upgrade proceeds.
    jobs = job_names(plane, namespace)
    acknowledged = {"acknowledge": [{"component": "acme-agent", "from": "1.0.0", "to": "2.0.0"}]}
    upgrade(helm, namespace, values(packs["2.0.0"], MANUAL, upgradeCheck=acknowledged))
    went = aicr_kubelet.run_job(RELEASE, namespace, job_name=new_job(plane, namespace, jobs))
    assert went.exit_code == 0, went.describe()
    check = step(results, "upgrade-check")
    assert check["status"] == "succeeded", check
    assert "1 manual move(s) acknowledged" in check["message"]
    moved = helm_state(helm, owned)
    assert moved[(components, "acme-agent")] == (2, "deployed", "acme-agent-2.0.0")
    assert moved[(components, "acme-config")][2] == "acme-config-0.3.1"
    deploy = step(results, "deploy")
    print(
        f"upgrade-check step: {seconds(check):.2f}s (the stopped run's: {stopped_seconds:.2f}s); "
        f"deploy step of the upgrade: {seconds(deploy):.2f}s; run: "
        f"{sum(seconds(s) for s in results.report()['steps'] if s.get('durationSeconds') is not None):.2f}s"
    )
    # The next install crosses from what is installed now: nothing.
    [row] = [r for r in fleet_rows(plane) if r["namespace"] == namespace]
    assert row["detail"] == ""


@pytest.fixture
def real_aicr_kubelet(node: RealNode, e2e_image: str, real_aicr_release: Path, tmp_path: Path) -> tuple[Kubelet, Path]:
    """The e2e image with the real aicr v0.11.1 at PREINSTALLED_AICR, and that binary on this host."""
    binary = extract_binary(tmp_path / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    image = derive_image(e2e_image, {PREINSTALLED_AICR: binary})
    load_image(node.runtime, image)
    return Kubelet(node, image), binary


def test_the_real_aicr_0_11_1_reports_a_crossing_as_not_assessed(
    helm: Helm, control_plane: ControlPlane, real_aicr_kubelet: tuple[Kubelet, Path], namespace: str, tmp_path: Path
) -> None:
    kubelet, binary = real_aicr_kubelet
    plane = control_plane
    criteria = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
    # What v0.11.1 resolves for these criteria, with gpu-operator at another version:
    # the recipe ConfigMap as an earlier install of another pin left it.
    resolved = tmp_path / "recipe.yaml"
    argv = [str(binary), "recipe", *(f"--{k}={v}" for k, v in criteria.items()), "--output", str(resolved)]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    doc = yaml.safe_load(resolved.read_text())
    [operator] = [ref for ref in doc["componentRefs"] if ref["name"] == "gpu-operator"]
    current = operator["version"]
    operator["version"] = "v24.9.0"
    earlier = yaml.safe_dump(doc, sort_keys=False)
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "aicr-recipe"},
            "data": {"recipe.yaml": earlier},
        },
    )
    chart_values = {
        **criteria,
        **kubelet.image_values(),
        "aicrBinary": {"path": PREINSTALLED_AICR, "sha256": hashlib.sha256(binary.read_bytes()).hexdigest()},
        "aicrProvenance": {"mode": "off"},
        "upgradeCheck": {"requireAssessment": True},
        "job": {"backoffLimit": 0},
    }
    helm.install(RELEASE, CHART, namespace, values=chart_values)
    run = kubelet.run_job(RELEASE, namespace)
    assert run.exit_code == 35, run.describe()
    results = RunResults(plane, namespace)
    check = results.step("upgrade-check")
    assert check["status"] == "failed"
    assert "aicr v0.11.1 has no upgrade-check: this crossing was not assessed" in check["message"]
    assert f"gpu-operator v24.9.0 → {current}" in check["message"]
    assert "upgradeCheck.requireAssessment is set" in check["message"]
    notes = [n for r, n in warnings_on(plane, namespace, run.job_name) if r == "UpgradeNotAssessed"]
    assert notes
    assert notes[0].startswith("aicr v0.11.1 has no upgrade-check: this crossing was not assessed")
    kept = json.loads(results.data(CHECK_CONFIGMAP)["upgrade-check.json"])
    assert kept["assessed"] is False
    assert [(c["component"], c["verdict"]) for c in kept["components"]] == [("gpu-operator", "not-assessed")]
    assert results.data("aicr-recipe")["installed-recipe.yaml"] == earlier, "what is installed stays recorded"
    print(f"\naicr v0.11.1 users see: {check['message']}")
