"""Flux reconciles the chart: examples/delivery/flux-helmrelease.yaml, applied to
the e2e API server, with Flux's real source-controller and helm-controller.

The chart is packaged and pushed with ``helm push`` to the local registry; the
example's OCIRepository and HelmRelease are applied as written, adapted only
where this machine differs (see ``adapt``): the registry address, plain HTTP
instead of TLS, per-test namespaces, no keyless signature check (it needs
Fulcio and Rekor), and the stand-in aicr with its knobs in the values. The real
Job controller runs the installer Job, the e2e node (kube-scheduler, kubelet,
containerd) its pods, with the chart's own pod spec. The controllers run on this
host: source-controller pulls the chart from the registry (on ``pod_host``, where
the pods pull the pack from too) and serves the artifact on loopback, where only
helm-controller fetches it.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import STARTUP
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import Flux, apply, condition, get, start_flux
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry, docker_config
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import CHART, extra_env, push_component_charts, write_org_pack
from e2e.tools import REPO_ROOT, flux_crds, tool

pytestmark = pytest.mark.e2e

FLUX_EXAMPLE = REPO_ROOT / "examples" / "delivery" / "flux-helmrelease.yaml"


@pytest.fixture(scope="module")
def flux(control_plane: ControlPlane, e2e_workdir: Path) -> Iterator[Flux]:
    controllers = start_flux(control_plane, e2e_workdir / "flux", flux_crds())
    STARTUP["flux (CRDs + source- and helm-controller)"] = controllers.startup_seconds
    try:
        yield controllers
    finally:
        controllers.stop()


@pytest.fixture(scope="module")
def chart_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``helm package chart`` pushed with ``helm push``; returns oci://HOST/charts."""
    workdir = tmp_path_factory.mktemp("flux-chart")
    helm.run("package", str(CHART), "--destination", str(workdir))
    [package] = workdir.glob("nvidia-aicr-*.tgz")
    repository = f"oci://{registry.host}/charts"
    login = ["--plain-http", "--username", registry.username, "--password", registry.password]
    helm.run("push", str(package), repository, *login)
    return repository


@pytest.fixture
def pack_ref(helm: Helm, registry: Registry, registry_auth_file: Path, namespace: str, tmp_path: Path) -> str:
    """An org pack registering the example's criteria (acme, h200, training)."""
    charts = push_component_charts(helm, registry, tmp_path / "component-charts")
    root = write_org_pack(
        tmp_path / "pack", chart_repository=charts, namespace=f"{namespace}-acme", accelerators=("h200",)
    )
    return oras.push_pack(
        root, registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0"), registry_config=registry_auth_file
    ).ref


def example() -> dict[str, dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(FLUX_EXAMPLE.read_text()) if doc]
    return {doc["kind"]: doc for doc in docs}


def adapt(
    docs: dict[str, dict[str, Any]], *, namespace: str, source_namespace: str, repository: str, pack: str
) -> dict[str, dict[str, Any]]:
    """The example, changed only where this machine differs from a cluster."""
    out = copy.deepcopy(docs)
    source, release = out["OCIRepository"], out["HelmRelease"]
    # registry address, plain HTTP, the registry's credential
    source["metadata"]["namespace"] = source_namespace
    source["spec"]["url"] = f"{repository}/nvidia-aicr"
    source["spec"]["insecure"] = True
    source["spec"]["secretRef"] = {"name": "registry-auth"}
    # keyless cosign verification needs Fulcio and Rekor (no network here)
    del source["spec"]["verify"]
    release["metadata"]["namespace"] = namespace
    release["spec"]["targetNamespace"] = namespace
    release["spec"]["chartRef"]["namespace"] = source_namespace
    values = release["spec"]["values"]
    # The example names the pack by its grouped name: an earlier name (dataPack)
    # beside it with another value would be refused (C-18).
    values["pack"]["ref"] = pack
    values["dataPackPlainHTTP"] = True
    # the stand-in aicr in the image (no NVIDIA attestation: provenance off)
    values["aicrBinary"] = {"path": FAKE_AICR_PATH}
    values["aicrProvenance"] = {"mode": "off"}
    values["job"]["extraEnv"] = extra_env(FAKE_AICR_VALIDATE_RESULT="pass")
    return out


#: Ready=False reasons of a HelmRelease that is still on its way (it requeues).
WAITING_REASONS = {"Progressing", "SourceNotReady", "DependencyNotReady"}


@dataclass
class Timeline:
    """What the test saw while the controllers reconciled."""

    #: the HelmRelease's Ready condition at each poll: (status, reason, pods finished by then)
    ready: list[tuple[str, str, int]] = field(default_factory=list)
    runs: list[JobRun] = field(default_factory=list)


def reconcile(
    plane: ControlPlane, kubelet: Kubelet, docs: dict[str, dict[str, Any]], namespace: str, *, timeout: float = 240
) -> tuple[dict[str, Any], Timeline]:
    """Apply the objects, run every pod in ``namespace``, and wait until the
    HelmRelease's Ready condition is True or False."""
    timeline = Timeline()
    with kubelet.serving(namespace) as runs:
        for kind in ("OCIRepository", "HelmRelease"):
            apply(plane.admin, docs[kind])
        deadline = time.monotonic() + timeout
        while True:
            release = get(plane.admin, docs["HelmRelease"]) or {}
            ready = condition(release, "Ready")
            if ready is not None:
                timeline.ready.append((ready["status"], ready.get("reason", ""), len(runs)))
                waiting = ready.get("reason") in WAITING_REASONS
                settled = ready["status"] == "True" or (ready["status"] == "False" and not waiting)
                if settled:
                    break
            assert time.monotonic() < deadline, f"HelmRelease not settled after {timeout}s: {release.get('status')}"
            time.sleep(0.2)
    timeline.runs = list(runs)
    return release, timeline


@dataclass(frozen=True)
class FluxScenario:
    plane: ControlPlane
    registry: Registry
    namespace: str
    source_namespace: str

    def secrets(self, pack_auth: dict[str, str]) -> None:
        self.plane.ensure_namespace(self.source_namespace)
        self.plane.create_dockerconfig_secret(self.source_namespace, "registry-auth", self.registry.dockerconfigjson())
        self.plane.create_secret(self.namespace, "acme-pack-auth", string_data=pack_auth)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = self.plane.admin.get(
            f"/api/v1/namespaces/{self.namespace}/events", fieldSelector=f"involvedObject.name={name}"
        )
        return list(found["items"])


@pytest.fixture
def flux_scenario(flux: Flux, control_plane: ControlPlane, registry: Registry, namespace: str) -> FluxScenario:
    return FluxScenario(control_plane, registry, namespace, f"{namespace}-flux")


def secret_data(plane: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    secret = plane.admin.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def test_flux_installs_the_example_and_the_release_is_ready_only_after_the_job_completes(
    flux_scenario: FluxScenario, aicr_kubelet: Kubelet, chart_repository: str, pack_ref: str, tmp_path: Path
) -> None:
    s = flux_scenario
    # The Secret exactly as the example's comment makes it: the config.json file.
    config = s.registry.write_docker_config(tmp_path / "docker" / "config.json").read_text()
    s.secrets({"dockerconfigjson": config})
    docs = adapt(
        example(),
        namespace=s.namespace,
        source_namespace=s.source_namespace,
        repository=chart_repository,
        pack=pack_ref,
    )

    release, timeline = reconcile(s.plane, aicr_kubelet, docs, s.namespace)

    ready = condition(release, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("True", "InstallSucceeded"), release["status"]
    [run] = timeline.runs
    assert run.exit_code == 0, run.describe()
    # Ready only once the Job completed: not Ready while its pod ran, and no
    # observation saw Ready before the pod had finished.
    assert ("Unknown", "Progressing", 0) in timeline.ready, timeline.ready
    assert all(done == 1 for status, _, done in timeline.ready if status == "True"), timeline.ready
    job = s.plane.admin.get(f"/apis/batch/v1/namespaces/{s.namespace}/jobs/{run.job_name}")
    assert ready["lastTransitionTime"] >= job["status"]["completionTime"]
    # The pack credential reached the pod through valuesFrom, verbatim: the chart's
    # Secret holds the file, and the runner pulled the pack with it.
    pack_secret = next(
        v for v in run.pod["spec"]["volumes"] if v.get("secret") and "pack" in v["secret"]["secretName"]
    )["secret"]["secretName"]
    assert secret_data(s.plane, s.namespace, pack_secret)[".dockerconfigjson"] == config
    status = json.loads(s.plane.configmap(s.namespace, "aicr-run-status")["data"]["report.json"])  # type: ignore[index]
    pack_step = next(step for step in status["steps"] if step["state"] == "pack")
    assert pack_step["status"] == "succeeded"
    assert pack_ref in pack_step["message"]


def test_flux_reports_a_failed_job_and_the_runner_message(
    flux_scenario: FluxScenario, aicr_kubelet: Kubelet, chart_repository: str, pack_ref: str
) -> None:
    s = flux_scenario
    # Flux releases before valuesFrom's `literal`: a values snippet in the Secret
    # (the example's comment) -- here with a password the registry refuses.
    wrong = json.dumps(docker_config(s.registry.host, s.registry.username, "wrong-password"))
    s.secrets({"values.yaml": json.dumps({"dataPackAuth": {"dockerconfigjson": wrong}})})
    docs = adapt(
        example(),
        namespace=s.namespace,
        source_namespace=s.source_namespace,
        repository=chart_repository,
        pack=pack_ref,
    )
    docs["HelmRelease"]["spec"]["valuesFrom"] = [
        {"kind": "Secret", "name": "acme-pack-auth", "valuesKey": "values.yaml"}
    ]

    release, timeline = reconcile(s.plane, aicr_kubelet, docs, s.namespace)

    # The Job failed (exit 23 is transient: two pods, backoffLimit 1): Flux does not
    # wait out spec.timeout, it fails the install as soon as the Job has failed.
    assert [run.exit_code for run in timeline.runs] == [23, 23], [r.describe() for r in timeline.runs]
    ready = condition(release, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InstallFailed"), release["status"]
    job = timeline.runs[-1].job_name
    surfaced = f"failed early due to stalled resources: [Job/{s.namespace}/{job} status: 'Failed']"
    assert surfaced in ready["message"]
    events = [e for e in s.events(release["metadata"]["name"]) if e.get("reason") == "InstallFailed"]
    assert events
    assert surfaced in events[0]["message"]
    # Flux itself surfaces only the failed Job's name; the runner's termination
    # message reaches the HelmRelease through the runner: a Warning Event on it,
    # found by the Job's helm.toolkit.fluxcd.io labels.
    message = timeline.runs[-1].termination_message
    assert message.startswith("Failed (exit 23): pack failed: "), message
    assert "the credential from /etc/aicr-runner/pack-auth/config.json was rejected" in message
    assert all(message not in str(c.get("message")) for c in release["status"]["conditions"])
    job_labels = s.plane.admin.get(f"/apis/batch/v1/namespaces/{s.namespace}/jobs/{job}")["metadata"]["labels"]
    assert job_labels["helm.toolkit.fluxcd.io/name"] == release["metadata"]["name"]
    assert job_labels["helm.toolkit.fluxcd.io/namespace"] == release["metadata"]["namespace"]
    # What `kubectl describe helmrelease` lists: the events of its uid.
    described = s.plane.admin.get(
        f"/api/v1/namespaces/{s.namespace}/events",
        fieldSelector=f"involvedObject.uid={release['metadata']['uid']},reason=AicrRunFailed",
    )["items"]
    assert [e["message"] for e in described] == [message, message], described  # one per failed pod
    for event in described:
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "HelmRelease"
        assert event["involvedObject"]["apiVersion"] == "helm.toolkit.fluxcd.io/v2"
        assert event["source"]["component"] == "aicr-runner"
        assert event["related"]["name"] == job
    assert "wrong-password" not in str(described)
    # ... and what an operator sees with the real kubectl.
    kubectl = [str(tool("kubectl")), f"--kubeconfig={s.plane.kubeconfig}", f"--namespace={s.namespace}"]
    describe = subprocess.run(
        [*kubectl, "describe", "helmrelease", release["metadata"]["name"]],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "AicrRunFailed" in describe, describe
    assert "pack failed: " in describe.split("Events:")[-1], describe
    pods = s.plane.admin.get(
        f"/api/v1/namespaces/{s.namespace}/pods", labelSelector=f"batch.kubernetes.io/job-name={job}"
    )
    terminated = [p["status"]["containerStatuses"][0]["state"]["terminated"] for p in pods["items"]]
    assert {t["message"] for t in terminated} == {message}
    assert {t["exitCode"] for t in terminated} == {23}  # the Event changed nothing about the failure
    status = json.loads(s.plane.configmap(s.namespace, "aicr-run-status")["data"]["report.json"])  # type: ignore[index]
    assert status["exitCode"] == 23


def test_the_examples_valuesfrom_without_literal_breaks_at_reconcile(
    flux_scenario: FluxScenario, aicr_kubelet: Kubelet, chart_repository: str, pack_ref: str, tmp_path: Path
) -> None:
    s = flux_scenario
    config = s.registry.write_docker_config(tmp_path / "docker" / "config.json").read_text()
    s.secrets({"dockerconfigjson": config})
    docs = adapt(
        example(),
        namespace=s.namespace,
        source_namespace=s.source_namespace,
        repository=chart_repository,
        pack=pack_ref,
    )
    del docs["HelmRelease"]["spec"]["valuesFrom"][0]["literal"]

    release, _ = reconcile(s.plane, aicr_kubelet, docs, s.namespace, timeout=120)

    # Flux parses the value with `helm --set` rules: the JSON breaks them.
    ready = condition(release, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "ValuesError"), release["status"]
    assert (
        f"could not resolve Secret chart values reference '{s.namespace}/acme-pack-auth' with key 'dockerconfigjson'"
        in ready["message"]
    )
    assert "has no value" in ready["message"]
    assert s.plane.admin.get(f"/apis/batch/v1/namespaces/{s.namespace}/jobs")["items"] == [], "nothing was installed"
