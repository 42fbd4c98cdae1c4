"""The real aicr v0.11.1 end to end: nothing of aicr is faked.

The chart is installed into the real API server with ``aicrVersion: v0.11.1`` and
``aicrReleaseBaseUrl`` pointing at the release folder (AICR_TEST_RELEASES_DIR)
served as a release mirror on ``pod_host``. The Job's pod, run by the e2e node's
kubelet from the built image (plus one file, below), downloads the release,
checks its checksum, extracts and asks the binary its version, then runs
the real ``aicr recipe``, ``aicr bundle`` and ``aicr verify``, the bundle's real
``deploy.sh`` (bash, kubectl and helm from the image, against the real API server)
and the real ``aicr validate`` (against the same API server, with a snapshot it
reads from a ConfigMap), and captures the verdict. The recipe lists no
``deployment`` check for v0.11.1 (only conformance ones), so aicr exits 0 with a
CTRF report of zero tests: the run is inconclusive, never green (exit 32 under
``validate.failOnError``, phase ``SucceededInconclusive`` without it).

What stands in, and why (e2e/README.md "Scenarios"): the component charts. aicr
v0.11.1's deploy.sh names public chart repositories (https://charts.jetstack.io,
oci://ghcr.io/..., baked into each `helm upgrade --install` line), which this
machine cannot reach, and aicr is run unmodified. So charts with the same names
and versions (each holding one ConfigMap that records the values it was given)
are served from a local HTTP chart repository on ``pod_host``, and a ``helm``
added to the image (an image derived from the e2e image) and placed first on the
pod's PATH sends each chart request there (``--repo <public>`` or an ``oci://``
reference becomes ``--repo <local>``) and runs the image's helm, which installs
the release for real. Every other helm and kubectl call of deploy.sh and the
runner goes to the API server unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet
from e2e.helm_redirect import HELM_REDIRECT_DIR, STAND_IN_TEMPLATE
from e2e.scenarios import CHART, RELEASE, RunResults, extra_env, releases_in
from e2e.test_run_events import documented
from e2e.tools import tool
from tests.support.podman import PODMAN
from tests.support.real_aicr import ARCHIVE, TAG, FolderMirror, extract_binary

pytestmark = pytest.mark.e2e

CRITERIA = {"service": "kind", "accelerator": "h100", "intent": "training"}
SNAPSHOT = "aicr-e2e-snapshot"


def image_path(kubelet: Kubelet) -> str:
    """The PATH the pod's image sets (its config's Env, as the kubelet passes it)."""
    env = json.loads(
        subprocess.run(
            [*PODMAN, "image", "inspect", "--format", "{{json .Config.Env}}", kubelet.image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    [path] = [entry.partition("=")[2] for entry in env if entry.startswith("PATH=")]
    return str(path)


@pytest.fixture(scope="module")
def host_recipe(real_aicr_release: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recipe and bundle the same aicr gives on this host for CRITERIA (what the
    pod will deploy: its charts are the ones to stand in)."""
    work = tmp_path_factory.mktemp("real-aicr-host")
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    flags = [word for name, value in CRITERIA.items() for word in (f"--{name}", value)]
    for args in (["recipe", *flags, "--output", "recipe.yaml"], ["bundle", "--recipe", "recipe.yaml", "--output", "b"]):
        subprocess.run([str(binary), *args], cwd=work, check=True, capture_output=True, timeout=120)
    recipe = yaml.safe_load((work / "recipe.yaml").read_text())
    return {"recipe": recipe, "bundle": work / "b"}


@pytest.fixture(scope="module")
def chart_repository(
    helm: Helm, host_recipe: dict[str, Any], pod_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FolderMirror]:
    """A local HTTP chart repository with a stand-in for every chart of the recipe."""
    root = tmp_path_factory.mktemp("stand-in-charts")
    repo = root / "charts"
    for ref in host_recipe["recipe"]["componentRefs"]:
        source = root / "src" / ref["chart"]
        (source / "templates").mkdir(parents=True)
        chart = {"apiVersion": "v2", "name": ref["chart"], "version": ref["version"], "type": "application"}
        (source / "Chart.yaml").write_text(yaml.safe_dump(chart))
        (source / "templates" / "stand-in.yaml").write_text(STAND_IN_TEMPLATE)
        helm.run("package", str(source), "--destination", str(repo))
    helm.run("repo", "index", str(repo))
    with FolderMirror(root, host=pod_host) as served:
        yield served


@pytest.fixture
def component_releases_removed_after(helm: Helm, host_recipe: dict[str, Any]) -> Iterator[None]:
    yield
    # The control plane is the session's: a later scenario asserts that its run
    # installed none of the embedded components, so this test's releases go with it.
    for ref in host_recipe["recipe"]["componentRefs"]:
        if ref["name"] in releases_in(helm, ref["namespace"]):
            helm.uninstall(ref["name"], ref["namespace"])


def snapshot_configmap(plane: ControlPlane, namespace: str) -> str:
    """A snapshot (aicr's format) with the API server's real version, in a ConfigMap
    validate reads through the API (``--snapshot cm://...``): the snapshot agent's
    image is not available here."""
    version = plane.admin.get("/version")["gitVersion"]
    snapshot = {"measurements": [{"type": "K8s", "subtypes": [{"subtype": "server", "data": {"version": version}}]}]}
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": SNAPSHOT}, "data": {"snapshot.yaml": yaml.safe_dump(snapshot)}},
    )
    return str(version)


def assert_component_progress(  # noqa: PLR0917 - one run's facts
    plane: ControlPlane, namespace: str, job: str, deploy: dict[str, Any], recipe: dict[str, Any], phase: str
) -> dict[str, str]:
    """The real deploy.sh's per-component lines, read as they came: every component
    in the status ConfigMap's progress, in deploy.sh's order, and the Events on the
    Job. A DeployProgress Event is only recorded while deploy.sh runs (when a
    component ends), so it shows the progress went out live, not only at the end.
    The run's end: ``Run<phase>`` and the outcome annotation. Returns the Events' notes by reason."""
    namespaces = {ref["name"]: ref["namespace"] for ref in recipe["componentRefs"]}
    order = recipe["deploymentOrder"]
    progress = deploy["progress"]
    counts = tuple(progress[key] for key in ("total", "done", "installed", "failed", "current"))
    assert counts == (len(order), len(order), len(order), 0, ""), progress
    rows = progress["components"]
    assert [(r["name"], r["namespace"], r["status"], r["attempts"]) for r in rows] == [
        (name, namespaces[name], "installed", 1) for name in order
    ]
    assert all(r["durationSeconds"] is not None for r in rows), rows
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    events = [
        e
        for e in items
        if (e.get("regarding") or {}).get("name") == job and e.get("reportingController") == "aicr-runner"
    ]
    notes = {e["reason"]: e["note"] for e in events}
    assert notes["DeploySucceeded"] == deploy["message"], notes
    live = [e["note"] for e in events if e["reason"] == "DeployProgress"]
    assert live, f"no DeployProgress Event while deploy.sh ran: {sorted(notes)}"
    assert all(re.match(rf"\d+/{len(order)} components installed", note) for note in live), live
    assert f"Run{phase}" in notes, notes
    annotations = plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")["metadata"]["annotations"]
    assert annotations["aicr.nvidia.com/outcome"] == phase
    return notes


#: What the run says when validation ran no check: the recipe lists no deployment check.
NO_CHECK = "validation inconclusive: no check ran: the recipe lists no check for phase deployment (CTRF tests: 0)"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fail_on_error", [True, False], ids=["failOnError", "no-failOnError"])
def test_the_real_aicr_recipe_bundle_verify_deploy_and_validate_from_the_built_image(  # noqa: PLR0917 - fixtures
    fail_on_error: bool,
    helm: Helm,
    control_plane: ControlPlane,
    namespace: str,
    redirect_kubelet: Kubelet,
    release_mirror: FolderMirror,
    chart_repository: FolderMirror,
    host_recipe: dict[str, Any],
    component_releases_removed_after: None,
) -> None:
    server_version = snapshot_configmap(control_plane, namespace)
    # The mirror serves the module's runs (one per parametrization): count this run's requests.
    downloads_before = release_mirror.requests.count(f"/{TAG}/{ARCHIVE}")
    path = f"{HELM_REDIRECT_DIR}:{image_path(redirect_kubelet)}"
    install = helm.install(
        RELEASE,
        CHART,
        namespace,
        values={
            **CRITERIA,
            **redirect_kubelet.image_values(),
            "aicrVersion": TAG,
            "aicrReleaseBaseUrl": release_mirror.base_url,
            # No NVIDIA attestation in this release: warn runs it and says so.
            "aicrProvenance": {"mode": "warn"},
            "validate": {"enabled": True, "phases": ["deployment"], "failOnError": fail_on_error},
            "validateArgs": ["--snapshot", f"cm://{namespace}/{SNAPSHOT}"],
            "job": {
                "extraEnv": extra_env(PATH=path, E2E_CHART_REPO=f"{chart_repository.base_url}/charts"),
                # One pod: a failed run is not retried behind the test's back.
                "backoffLimit": 0,
            },
        },
    )

    run = redirect_kubelet.run_job(RELEASE, namespace, timeout=800)
    # NOTES.txt's wait, as rendered: 1 for the failed Job, 3 for a completed but inconclusive run.
    wait = subprocess.run(
        ["sh", "-c", documented(install.stdout.split("NOTES:", 1)[1], "(while :; do")],
        env={
            **os.environ,
            "PATH": f"{tool('kubectl').parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(control_plane.kubeconfig),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (wait.returncode, wait.stdout.strip()) == (
        (1, "Job failed") if fail_on_error else (3, "Job complete: SucceededInconclusive")
    ), wait

    # Zero checks ran: never green. Exit 32 under validate.failOnError, else exit 0 and SucceededInconclusive.
    phase, exit_code = ("Failed", 32) if fail_on_error else ("SucceededInconclusive", 0)
    assert run.exit_code == exit_code, run.describe()
    if fail_on_error:
        expected = f"Failed (exit 32): Validation INCONCLUSIVE (exit 32): {NO_CHECK} (validate.failOnError)"
    else:
        expected = f"SucceededInconclusive (exit 0): AICR Job complete, but {NO_CHECK}; validate.failOnError=true"
    assert run.termination_message.startswith(expected), run.termination_message
    assert run.termination_message.endswith("[aicr v0.11.1]")
    results = RunResults(control_plane, namespace)
    report = results.report()
    assert report["aicrVersion"] == "v0.11.1"
    assert (report["phase"], report["exitCode"]) == (phase, exit_code)
    assert results.data("aicr-run-status")["summary.txt"].startswith(f"phase: {phase}\nexitCode: {exit_code}\n")
    # fetch: from the mirror, checksummed, extracted, version asked; provenance warned, not verified
    fetch = results.step("fetch")
    assert (fetch["status"], fetch["classification"]) == ("warned", "provenance-unverified")
    assert fetch["message"].startswith(f"aicr v0.11.1 from {release_mirror.base_url}/{TAG}/{ARCHIVE} (sha256 ")
    assert release_mirror.requests.count(f"/{TAG}/{ARCHIVE}") == downloads_before + 1
    # recipe: what the same aicr gives on this host
    recipe = yaml.safe_load(results.data("aicr-recipe")["recipe.yaml"])
    assert recipe == host_recipe["recipe"]
    components = host_recipe["recipe"]["componentRefs"]
    # bundle and verify: real, 0.11's verify
    assert results.step("bundle")["status"] == "succeeded"
    assert "not closed-world" in results.step("verify")["message"]
    # deploy: the real deploy.sh, its helm sent to the stand-in charts, its kubectl to the API server
    deploy = results.step("deploy")
    assert deploy["status"] == "succeeded", deploy
    # 0.11 prints no per-component success line: a component counts once the next starts
    assert deploy["message"] == f"AICR install complete: {len(components)}/{len(components)} installed"
    notes = assert_component_progress(control_plane, namespace, run.job_name, deploy, host_recipe["recipe"], phase)
    for marker in ("Running pre-flight checks...", "Pre-flight checks passed.", "Deployment complete."):
        assert marker in run.output, marker
    assert "WARNING: no DRA kubelet plugin daemonset found in nvidia-dra-driver" in run.output, "kubectl asked"
    redirected = re.findall(r"e2e-helm: chart(?: repository)? (\S+) ->", run.output)
    assert len(redirected) == len(components), redirected
    installed = {}
    for ref in components:
        releases = releases_in(helm, ref["namespace"])
        assert ref["name"] in releases, (ref, releases)
        assert releases[ref["name"]]["status"] == "deployed"
        assert releases[ref["name"]]["chart"] == f"{ref['chart']}-{ref['version']}"
        stand_in = control_plane.configmap(ref["namespace"], f"{ref['name']}-stand-in")
        assert stand_in is not None
        installed[ref["name"]] = stand_in["data"]["valuesKeys"]
    for name, keys in installed.items():
        values = yaml.safe_load((host_recipe["bundle"] / name / "values.yaml").read_text()) or {}
        assert keys == ",".join(sorted(values)), f"{name}: deploy.sh passed the bundle's values.yaml"
    assert "/charts/index.yaml" in chart_repository.requests
    # validate: the real aicr against the API server, its verdict captured
    validate = results.step("validate")
    assert (validate["status"], validate["exitCode"]) == ("failed" if fail_on_error else "warned", exit_code), validate
    assert validate["classification"] == "validation-inconclusive"
    assert validate["message"].startswith(NO_CHECK), validate
    assert notes["ValidateFailed" if fail_on_error else "ValidateWarned"] == validate["message"], notes
    assert "ValidateSucceeded" not in notes
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    assert ctrf["reportFormat"] == "CTRF"
    assert ctrf["results"]["tool"] == {"name": "aicr", "version": "0.11.1"}
    assert ctrf["results"]["summary"]["tests"] == 0, "aicr v0.11.1 ran no check: the recipe lists none for the phase"
    assert re.search(r"aicr validate exited exit_code=0 step=validate\b", run.output), (
        "aicr itself exited 0: the runner read the report"
    )
    readiness = [line for line in run.output.splitlines() if "readiness constraint passed" in line]
    assert any(server_version in line for line in readiness), "readiness read the snapshot from its ConfigMap"
    assert control_plane.admin.exists("/api/v1/namespaces/aicr-validation"), "aicr validate created its namespace"
    assert results.step("capture-verdict")["status"] == "succeeded"
    print(f"\nthe real aicr's pod ran {run.containers[-1].seconds:.1f}s (container start to exit, from its status)")
