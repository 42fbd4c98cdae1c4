"""End-to-end scenarios: the chart installed with the pinned helm into a real API
server, the Job's pod run by a real kubelet (containerd, kube-scheduler) from the
chart's own pod spec, the runner driving the contract-faithful fake aicr, real
helm releases, a real registry.

Each scenario asserts on objects in the API server (result ConfigMaps, Helm
releases, the pod status) and on the runner's exit code and messages. What is
real and what is faked, and why: e2e/README.md, "Scenarios".
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.helm.guard import STOP_NAME
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm, HelmError
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry, docker_config
from e2e.node_image import E2E_ORAS, FAKE_AICR_PATH
from e2e.scenarios import (
    ACME_CRITERIA,
    CHART,
    COMPONENT_CHARTS,
    PACK_AUTH_FILE,
    RELEASE,
    ReleaseMirror,
    RunResults,
    checksums_file,
    closed_port,
    embedded_base_components,
    extra_env,
    push_component_charts,
    release_archive,
    releases_in,
    wait_for_job_end,
    write_org_pack,
)
from e2e.tools import REPO_ROOT, npm_tarball

pytestmark = pytest.mark.e2e

#: The dockerconfigjson Secret the scenarios give as dataPackSecret.
PACK_SECRET = "pack-cred"
#: job values of a scenario whose run fails with an exit code the Job retries (not in
#: the chart's FailJob list): the Job controller would run a second pod, 10 s after
#: the first failed, that rewrites the results the test reads. One pod instead, and
#: the Job's end (Failed, BackoffLimitExceeded) is asserted.
NO_RETRY = {"backoffLimit": 0}
ONE_FAILED_POD = ("Failed", "BackoffLimitExceeded", 1)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def component_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The component charts, pushed once with ``helm push`` (oci://HOST/charts)."""
    return push_component_charts(helm, registry, tmp_path_factory.mktemp("component-charts"))


@dataclass(frozen=True)
class OrgPack:
    ref: str  # host/repo:tag, as dataPack
    components_namespace: str  # where the pack's releases go


@pytest.fixture
def org_pack(
    component_repository: str, registry: Registry, registry_auth_file: Path, namespace: str, tmp_path: Path
) -> OrgPack:
    """This scenario's org pack, pushed with the Go oras CLI; its components land in
    ``<namespace>-acme``."""
    components_namespace = f"{namespace}-acme"
    pack = write_org_pack(tmp_path / "pack", chart_repository=component_repository, namespace=components_namespace)
    pushed = oras.push_pack(
        pack, registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0"), registry_config=registry_auth_file
    )
    return OrgPack(ref=pushed.ref, components_namespace=components_namespace)


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def pack_run_values(pack: OrgPack, env: Mapping[str, str] | None = None, **override: Any) -> dict[str, Any]:
    """Chart values for a run of the org pack with a real deploy: the bundle's
    deploy.sh runs the real helm (FAKE_AICR_DEPLOY_REAL=1), which pulls the
    component charts from the registry with the pack's credential file. The
    embedded components every recipe carries are switched off at bundle time
    (their charts are on the internet). ``env`` adds job.extraEnv entries."""
    values: dict[str, Any] = {
        **ACME_CRITERIA,
        "dataPack": pack.ref,
        "dataPackSecret": PACK_SECRET,
        "dataPackPlainHTTP": True,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        # os is left unstated (the pack does not need it): expectations turn the
        # thin-resolution warning into a real check of what the pack resolved.
        "recipe": {"expect": {"components": list(COMPONENT_CHARTS), "overlays": ["acme-h100-training"]}},
        "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
        "job": {
            "extraEnv": extra_env(
                FAKE_AICR_DEPLOY_REAL="1",
                FAKE_AICR_DEPLOY_BACKOFF="0",
                FAKE_AICR_HELM_FLAGS=f"--plain-http --registry-config {PACK_AUTH_FILE}",
                **(env or {}),
            )
        },
    }
    return merged(values, override)


@dataclass(frozen=True)
class Scenario:
    """The session's API server, registry and helm, and this scenario's namespace."""

    helm: Helm
    plane: ControlPlane
    registry: Registry
    namespace: str

    def install(self, values: Mapping[str, Any]) -> None:
        """Install the chart. Provenance is off unless the values say otherwise: the
        fake aicr has no NVIDIA attestation (the provenance scenario states its mode)."""
        if "aicrProvenance" not in values:
            values = merged(values, {"aicrProvenance": {"mode": "off"}})
        self.helm.install(RELEASE, CHART, self.namespace, values=values)

    def pack_secret(self, dockerconfigjson: str | None = None) -> None:
        """The dataPackSecret (the registry's real credential unless given)."""
        self.plane.create_dockerconfig_secret(
            self.namespace, PACK_SECRET, dockerconfigjson or self.registry.dockerconfigjson()
        )

    @property
    def results(self) -> RunResults:
        return RunResults(self.plane, self.namespace)

    def pod(self, run: JobRun) -> dict[str, Any]:
        return self.plane.admin.get(f"/api/v1/namespaces/{self.namespace}/pods/{run.pod_name}")


@pytest.fixture
def scenario(helm: Helm, control_plane: ControlPlane, registry: Registry, namespace: str) -> Scenario:
    return Scenario(helm, control_plane, registry, namespace)


# -- a. org pack install --------------------------------------------------------------------


def test_org_pack_install_deploys_the_packs_charts_for_real(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack
) -> None:
    scenario.pack_secret()
    scenario.install(pack_run_values(org_pack))

    run = aicr_kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 0, run.describe()
    results = scenario.results
    # the recipe capture
    recipe = results.data("aicr-recipe")
    assert "service=acme" in recipe["summary.txt"]
    assert "recipe generation completed" in recipe["summary.txt"]
    assert f"dataPack: {org_pack.ref}" in recipe["summary.txt"]
    assert "kind: RecipeResult" in recipe["recipe.yaml"]
    assert "acme-h100-training" in recipe["recipe.yaml"]
    # the run report: every step's outcome
    report = results.report()
    assert report["phase"] == "Succeeded"
    assert report["exitCode"] == 0
    statuses = results.statuses()
    assert statuses == {
        "fetch": "succeeded",
        "pack": "succeeded",
        "recipe": "succeeded",
        "capture-recipe": "succeeded",
        "check-recipe": "succeeded",
        "bundle": "succeeded",
        "verify": "succeeded",
        "upgrade-check": "skipped",
        "lease": "succeeded",
        "snapshot": "skipped",
        "deploy": "succeeded",
        "validate": "skipped",
        "capture-verdict": "skipped",
        "publish": "skipped",
        "capture-evidence": "skipped",
    }, report
    for step in report["steps"]:
        assert step["start"], step
        assert step["end"], step
        assert step["durationSeconds"] is not None, step
        assert step["exitCode"] == 0, step
    assert "deploy             succeeded" in results.data("aicr-run-status")["summary.txt"]
    for name in ("aicr-run-status", "aicr-recipe"):
        cm = results.configmap(name)
        assert cm is not None
        assert cm["metadata"]["labels"] == {
            "app.kubernetes.io/name": "nvidia-aicr",
            "app.kubernetes.io/managed-by": "aicr-runner",
        }, "results are the runner's: no Helm instance label, no Argo CD tracking"
    # the Helm releases deploy.sh installed, and their objects
    helm, plane = scenario.helm, scenario.plane
    releases = releases_in(helm, org_pack.components_namespace)
    assert set(releases) == set(COMPONENT_CHARTS), releases
    for name, version in COMPONENT_CHARTS.items():
        assert releases[name]["status"] == "deployed"
        assert releases[name]["chart"] == f"{name}-{version}"
        settings = plane.configmap(org_pack.components_namespace, f"{name}-settings")
        assert settings is not None, f"{name}'s ConfigMap"
        assert settings["data"]["chart"] == f"{name}-{version}"
    agent = plane.configmap(org_pack.components_namespace, "acme-agent-settings")
    assert agent is not None
    assert agent["data"] == {"chart": "acme-agent-1.0.0", "replicas": "3", "mode": "from-the-pack"}
    # pulled from the registry, installed in the pack's order (acme-config depends on acme-agent)
    registry = scenario.registry
    assert f"Pulled: {registry.host}/charts/acme-agent:1.0.0" in run.output
    assert f"Pulled: {registry.host}/charts/acme-config:0.3.1" in run.output
    assert run.output.index("acme-agent installed") < run.output.index("acme-config installed")
    # nothing else was installed: the embedded components were switched off
    assert {r["name"] for r in helm.list_releases() if r["name"] in embedded_base_components()} == set()
    # the pod status
    assert run.termination_message.startswith("Succeeded (exit 0): AICR Job complete"), run.termination_message
    terminated = scenario.pod(run)["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["message"] == run.termination_message


def assert_nothing_deployed(scenario: Scenario, pack: OrgPack) -> None:
    """No release of the pack's components (helm list -A) and no namespace for them:
    deploy.sh's helm would have created both."""
    assert releases_in(scenario.helm, pack.components_namespace) == {}
    assert not scenario.plane.admin.exists(f"/api/v1/namespaces/{pack.components_namespace}")


# -- b. bad pack credential ---------------------------------------------------------------


@pytest.mark.parametrize("credential", ["wrong", "missing"])
def test_a_bad_pack_credential_fails_closed_naming_the_registry(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack, credential: str
) -> None:
    registry = scenario.registry
    wrong_password = registry.password + "-wrong"
    if credential == "wrong":
        config = docker_config(registry.host, registry.username, wrong_password)
    else:  # a dockerconfigjson without an entry for the pack's registry
        config = docker_config("registry.example.com", registry.username, registry.password)
    scenario.pack_secret(json.dumps(config))
    scenario.install(pack_run_values(org_pack, job=NO_RETRY))

    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ONE_FAILED_POD, outcome.describe()
    run = outcome.last
    assert run.exit_code == 23, run.describe()
    message = run.termination_message
    assert message.startswith("Failed (exit 23): pack failed: "), message
    assert f"registry {registry.host}" in message
    if credential == "wrong":
        assert "refused the manifest (HTTP 401" in message
        assert f"the credential from {PACK_AUTH_FILE} was rejected" in message
    else:
        assert "has no entry for this registry (entries: registry.example.com)" in message
        assert "refusing to pull anonymously" in message
    results = scenario.results
    assert results.configmap("aicr-recipe") is None
    statuses = results.statuses()
    assert statuses["pack"] == "failed"
    assert {statuses[s] for s in ("recipe", "capture-recipe", "bundle", "verify", "deploy")} == {"skipped"}
    assert results.report()["exitCode"] == 23
    assert_nothing_deployed(scenario, org_pack)
    for text in (run.output, message, results.data("aicr-run-status")["report.json"]):
        assert wrong_password not in text
        assert registry.password not in text


# -- c. tampered bundle ---------------------------------------------------------------------

#: Where the tampering wrapper finds the untouched fake aicr in the image.
UNTAMPERED_AICR = "/usr/local/libexec/aicr-untampered"
TAMPERING_WRAPPER = f"""#!/usr/bin/env bash
# aicr, except that a successful `aicr bundle` is followed by a change to the
# bundle's deploy.sh (what an attacker or a broken volume could do before verify).
"{UNTAMPERED_AICR}" "$@"; rc=$?
if [[ " $* " == *" bundle "* && $rc == 0 ]]; then
  out=""; prev=""
  for arg in "$@"; do [[ $prev == --output || $prev == -o ]] && out=$arg; prev=$arg; done
  echo 'kubectl create namespace tampered-by-e2e' >> "$out/deploy.sh"
  echo "e2e: appended a line to $out/deploy.sh after bundle" >&2
fi
exit $rc
"""


def test_a_bundle_changed_before_verify_is_never_deployed(
    scenario: Scenario, make_kubelet: Callable[..., Kubelet], pod_fake_aicr: Path, org_pack: OrgPack, tmp_path: Path
) -> None:
    wrapper = tmp_path / "aicr"
    wrapper.write_text(TAMPERING_WRAPPER)
    wrapper.chmod(0o755)
    kubelet = make_kubelet(image_files={FAKE_AICR_PATH: wrapper, UNTAMPERED_AICR: pod_fake_aicr})
    scenario.pack_secret()
    scenario.install(pack_run_values(org_pack, **kubelet.image_values()))

    run = kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 4, run.describe()
    assert "e2e: appended a line to /work/bundle/deploy.sh after bundle" in run.output
    assert "checksum mismatch: deploy.sh" in run.output  # aicr verify's own finding, relayed
    assert run.termination_message.startswith("Failed (exit 4): verify failed: Bundle verification FAILED (exit 4)")
    results = scenario.results
    statuses = results.statuses()
    assert (statuses["bundle"], statuses["verify"], statuses["deploy"]) == ("succeeded", "failed", "skipped")
    assert "Bundle verification FAILED (exit 4)" in results.step("verify")["message"]
    assert results.configmap("aicr-recipe") is not None, "the recipe is captured before bundling"
    assert_nothing_deployed(scenario, org_pack)
    assert not scenario.plane.admin.exists("/api/v1/namespaces/tampered-by-e2e")


# -- d. download faults ---------------------------------------------------------------------

ARCHIVE_PATH = "/v1.2.0/aicr_1.2.0_linux_amd64.tar.gz"
CHECKSUMS_PATH = "/v1.2.0/aicr_checksums.txt"


@pytest.fixture(scope="module")
def release_archive_bytes(pod_fake_aicr: Path) -> bytes:
    return release_archive(pod_fake_aicr)


def download_values(base_url: str, **download: Any) -> dict[str, Any]:
    """A run that downloads aicr from ``base_url`` (no aicrBinary.path); the
    embedded eks leaf, deployed by the fake's simulated deploy.sh."""
    return {
        "service": "eks",
        "accelerator": "h100",
        "intent": "training",
        "os": "ubuntu",
        "aicrReleaseBaseUrl": base_url,
        "aicrDownload": {"attempts": 3, "timeoutSeconds": 5, "budgetSeconds": 30, **download},
    }


def test_a_checksum_mismatch_fails_closed_and_the_job_is_not_retried(
    scenario: Scenario, kubelet: Kubelet, pod_host: str, release_archive_bytes: bytes
) -> None:
    actual = hashlib.sha256(release_archive_bytes).hexdigest()
    expected = hashlib.sha256(b"what the release was supposed to be").hexdigest()
    files = {
        ARCHIVE_PATH: release_archive_bytes,
        CHECKSUMS_PATH: checksums_file({"aicr_1.2.0_linux_amd64.tar.gz": expected}),
    }
    with ReleaseMirror(files, host=pod_host) as mirror:
        scenario.install(download_values(mirror.base_url))
        outcome = kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    # 21 is in the chart's podFailurePolicy FailJob list: one pod, no retry.
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Failed", "PodFailurePolicy", 1), (
        outcome.describe()
    )
    run = outcome.last
    assert run.exit_code == 21
    message = run.termination_message
    assert message.startswith("Failed (exit 21): fetch failed: "), message
    assert f"{mirror.base_url}{ARCHIVE_PATH}: sha256 mismatch" in message
    assert f"expected {expected}" in message
    assert f"got {actual}" in message
    assert mirror.served(ARCHIVE_PATH) == ["serve"], "a mismatch is not retried"
    results = scenario.results
    assert results.statuses()["fetch"] == "failed"
    assert results.statuses()["recipe"] == "skipped"
    assert results.configmap("aicr-recipe") is None


def test_a_flaky_mirror_succeeds_after_retries(
    scenario: Scenario, kubelet: Kubelet, pod_host: str, release_archive_bytes: bytes
) -> None:
    files = {
        ARCHIVE_PATH: release_archive_bytes,
        CHECKSUMS_PATH: checksums_file({"aicr_1.2.0_linux_amd64.tar.gz": release_archive_bytes}),
    }
    with ReleaseMirror(files, host=pod_host) as mirror:
        mirror.faults[CHECKSUMS_PATH] = ["reset"]
        mirror.faults[ARCHIVE_PATH] = ["503"]
        scenario.install(download_values(mirror.base_url))
        run = kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 0, run.describe()
    assert mirror.served(CHECKSUMS_PATH) == ["reset", "serve"]
    assert mirror.served(ARCHIVE_PATH) == ["503", "serve"]
    after_503 = mirror.times(ARCHIVE_PATH)
    assert after_503[1] - after_503[0] >= 1.0, "Retry-After: 1 is honoured"
    retries = [line for line in run.output.splitlines() if "aicr download retry" in line]
    assert len(retries) == 2, run.output
    assert any("HTTP 503" in line for line in retries)
    fetch = scenario.results.step("fetch")
    assert fetch["status"] == "succeeded"
    digest = hashlib.sha256(release_archive_bytes).hexdigest()
    assert fetch["message"] == (
        f"aicr v1.2.0 from {mirror.base_url}{ARCHIVE_PATH} (sha256 {digest}); provenance not checked (mode off)"
    )
    assert run.termination_message.startswith("Succeeded (exit 0)")


SIGSTORE_BUNDLE = REPO_ROOT / "tests" / "data" / "sigstore" / "sigstore-3.1.0.sigstore.json"
SIGSTORE_JS = "https://github.com/sigstore/sigstore-js/.github/workflows/release.yml@refs/heads/main"


@pytest.fixture(scope="module")
def attested_release() -> bytes:
    """A release archive whose "aicr" carries real public-good provenance, but not
    NVIDIA's: the sigstore@3.1.0 npm tarball and its npm provenance bundle."""
    return release_archive(npm_tarball(), attestation=SIGSTORE_BUNDLE.read_bytes())


def test_a_release_whose_provenance_does_not_verify_is_refused_before_aicr_runs(
    scenario: Scenario, kubelet: Kubelet, pod_host: str, attested_release: bytes
) -> None:
    files = {
        ARCHIVE_PATH: attested_release,
        CHECKSUMS_PATH: checksums_file({"aicr_1.2.0_linux_amd64.tar.gz": attested_release}),
    }
    with ReleaseMirror(files, host=pod_host) as mirror:
        # The chart's default: aicrProvenance.mode=require, NVIDIA's identity at aicrVersion.
        scenario.install(merged(download_values(mirror.base_url), {"aicrProvenance": {"mode": "require"}}))
        outcome = kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    # 29 is in the chart's podFailurePolicy FailJob list: one pod, no retry.
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Failed", "PodFailurePolicy", 1), (
        outcome.describe()
    )
    run = outcome.last
    assert run.exit_code == 29
    message = run.termination_message
    assert message.startswith(
        "Failed (exit 29): fetch failed: aicr provenance aicr-attestation.sigstore.json: signer identity mismatch: "
        f"the certificate was issued to {SIGSTORE_JS}, expected "
        "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.2.0"
    ), message
    results = scenario.results
    assert results.statuses()["fetch"] == "failed"
    assert results.statuses()["recipe"] == "skipped"
    assert results.report()["provenance"]["status"] == "failed"


def test_provenance_verified_in_the_pod_is_recorded_in_the_status(
    scenario: Scenario, kubelet: Kubelet, pod_host: str, attested_release: bytes
) -> None:
    """The same release with the signer it really has: cosign verifies it offline
    in the pod; the identity, log index and time land in the status ConfigMap.
    (The "aicr" is an npm tarball, so it then cannot run: exit 27.)"""
    files = {
        ARCHIVE_PATH: attested_release,
        CHECKSUMS_PATH: checksums_file({"aicr_1.2.0_linux_amd64.tar.gz": attested_release}),
    }
    with ReleaseMirror(files, host=pod_host) as mirror:
        scenario.install(
            merged(
                download_values(mirror.base_url),
                {"aicrProvenance": {"mode": "require", "identity": SIGSTORE_JS}, "job": NO_RETRY},
            )
        )
        outcome = kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ONE_FAILED_POD, outcome.describe()
    run = outcome.last
    assert run.exit_code == 27, run.describe()
    provenance = scenario.results.report()["provenance"]
    assert provenance["status"] == "verified", provenance
    assert provenance["identity"] == SIGSTORE_JS
    assert provenance["logIndex"] == 168704762
    assert provenance["integratedTime"] == "2025-02-04T20:35:47Z"
    summary = scenario.results.data("aicr-run-status")["summary.txt"]
    assert "aicr provenance: mode=require, status=verified" in summary


def test_an_unreachable_mirror_fails_within_the_budget_and_the_job_retries(
    scenario: Scenario, kubelet: Kubelet, pod_host: str
) -> None:
    budget = 4
    with closed_port(pod_host) as port:
        base_url = f"http://{pod_host}:{port}"
        scenario.install(
            merged(
                download_values(base_url, attempts=3, timeoutSeconds=2, budgetSeconds=budget),
                {"job": {"backoffLimit": 1}},
            )
        )
        outcome = kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    # 20 is transient: the Job runs a fresh pod (backoffLimit 1 allows two).
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Failed", "BackoffLimitExceeded", 2), (
        outcome.describe()
    )
    for run in outcome.attempts:
        assert run.exit_code == 20
        message = run.termination_message
        assert message.startswith("Failed (exit 20): fetch failed: download of "), message
        assert f"{base_url}{CHECKSUMS_PATH}" in message
        assert "ConnectError" in message
        assert f"{budget}s budget" in message
        seconds = run.containers[-1].seconds
        assert seconds < budget + 8, f"the pod ran {seconds:.1f}s with a {budget}s download budget"
    assert scenario.results.configmap("aicr-recipe") is None


# -- e. validation and evidence ---------------------------------------------------------------

VALIDATE_WITH_EVIDENCE = {"enabled": True, "emitEvidence": True}


def test_a_passing_verdict_is_captured_and_the_evidence_is_published_to_the_registry(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack
) -> None:
    registry = scenario.registry
    repository = f"evidence/{scenario.namespace}"
    scenario.pack_secret()
    scenario.plane.create_dockerconfig_secret(scenario.namespace, "publish-cred", registry.dockerconfigjson())
    publish = {
        "enabled": True,
        "mode": "unsigned",
        "ref": f"{registry.host}/{repository}",
        "registrySecret": "publish-cred",
        "plainHTTP": True,
        "failOnError": True,
    }
    scenario.install(
        pack_run_values(
            org_pack,
            env={"FAKE_AICR_ORAS": E2E_ORAS, "FAKE_AICR_VALIDATE_RESULT": "pass"},
            validate={**VALIDATE_WITH_EVIDENCE, "failOnError": True, "publish": publish},
        )
    )

    run = aicr_kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 0, run.describe()
    results = scenario.results
    statuses = results.statuses()
    # Every step ran and succeeded but the snapshot (snapshot.enabled is off by default)
    # and the upgrade check (a first install crosses nothing).
    assert statuses.pop("snapshot") == "skipped", statuses
    assert statuses.pop("upgrade-check") == "skipped", statuses
    assert set(statuses.values()) == {"succeeded"}, results.report()
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    assert ctrf["reportFormat"] == "CTRF"
    summary = ctrf["results"]["summary"]
    assert summary["tests"] == summary["passed"] > 0, summary
    assert {"operator-health", "acme-agent-ready"} <= {t["name"] for t in ctrf["results"]["tests"]}, "the pack's checks"
    # the pointer, filled in by the real push
    pointer = yaml.safe_load(results.data("aicr-evidence-bundle")["pointer.yaml"])
    bundle = pointer["attestations"][0]["bundle"]
    assert bundle["oci"].startswith(f"{registry.host}/{repository}:"), bundle
    assert bundle["digest"].startswith("sha256:")
    tag = bundle["oci"].rsplit(":", 1)[1]
    # the artifact is in the registry: with credentials, and only with them
    status, body = registry.get(f"/v2/{repository}/manifests/{tag}", auth=(registry.username, registry.password))
    assert status == 200, body
    assert "sha256:" + hashlib.sha256(body).hexdigest() == bundle["digest"]
    manifest = json.loads(body)
    assert manifest["artifactType"] == "application/vnd.nvidia.aicr.evidence.v1+json"
    titles = {layer["annotations"]["org.opencontainers.image.title"] for layer in manifest["layers"]}
    assert {"manifest.json", "statement.intoto.json", "ctrf/deployment.json"} <= titles
    assert registry.get(f"/v2/{repository}/manifests/{tag}")[0] == 401
    # the evidence bundle itself, in binaryData
    with tarfile.open(fileobj=io.BytesIO(results.binary("aicr-evidence-bundle")["evidence.tgz"])) as tar:
        names = tar.getnames()
    assert "evidence/summary-bundle/ctrf/deployment.json" in names
    assert "evidence/pointer.yaml" in names
    assert re.search(r"aicr evidence publish exited exit_code=0 step=publish\b", run.output)
    assert registry.password not in run.output


@pytest.mark.parametrize(("fail_on_error", "exit_code"), [(True, 8), (False, 0)])
def test_a_failing_verdict_is_captured_and_fails_the_job_only_with_fail_on_error(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack, fail_on_error: bool, exit_code: int
) -> None:
    scenario.pack_secret()
    scenario.install(
        pack_run_values(
            org_pack,
            env={"FAKE_AICR_VALIDATE_RESULT": "fail"},
            validate={**VALIDATE_WITH_EVIDENCE, "failOnError": fail_on_error},
            job=NO_RETRY,
        )
    )

    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    ended = ONE_FAILED_POD if fail_on_error else ("Complete", "CompletionsReached", 1)
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ended, outcome.describe()
    run = outcome.last
    assert run.exit_code == exit_code, run.describe()
    results = scenario.results
    statuses = results.statuses()
    assert statuses["validate"] == "failed"
    assert (statuses["capture-verdict"], statuses["capture-evidence"]) == ("succeeded", "succeeded")
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    assert ctrf["results"]["summary"]["failed"] == 1
    failed = [t for t in ctrf["results"]["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["operator-health"]
    assert "evidence.tgz" in results.binary("aicr-evidence-bundle")
    assert set(releases_in(scenario.helm, org_pack.components_namespace)) == set(COMPONENT_CHARTS)
    if fail_on_error:
        assert run.termination_message.startswith("Failed (exit 8): Validation FAILED (exit 8)")
    else:
        # The bash chart's gate lets the Job complete, but failed checks are never plain green.
        prefix = "SucceededWithFailures (exit 0): AICR Job complete, but validation FAILED (exit 8): "
        assert run.termination_message.startswith(prefix), run.termination_message
        assert run.termination_message.endswith("(validate.failOnError=true fails the Job instead) [aicr v1.2.0]")
        assert results.report()["phase"] == "SucceededWithFailures"


def test_an_oversized_evidence_bundle_keeps_only_the_pointer(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack
) -> None:
    scenario.pack_secret()
    scenario.install(
        pack_run_values(org_pack, env={"FAKE_AICR_EVIDENCE_BYTES": str(1_500_000)}, validate=VALIDATE_WITH_EVIDENCE)
    )

    run = aicr_kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 0, run.describe()
    results = scenario.results
    step = results.step("capture-evidence")
    assert step["status"] == "warned"
    assert "over the ConfigMap budget: pointer only" in step["message"]
    assert any("capture-evidence" in w for w in results.report()["warnings"])
    evidence = results.configmap("aicr-evidence-bundle")
    assert evidence is not None
    assert "evidence.tgz" not in (evidence.get("binaryData") or {})
    pointer = yaml.safe_load(evidence["data"]["pointer.yaml"])
    assert pointer["recipe"] == "acme-h100-training"
    summary = json.loads(results.data("aicr-validate-result")["ctrf.json"])["results"]["summary"]
    assert summary["tests"] == summary["passed"] > 0, summary


# -- f. assert-only run ---------------------------------------------------------------------------


def test_an_assert_only_run_bundles_and_deploys_nothing_but_captures_the_verdict(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack
) -> None:
    scenario.pack_secret()
    scenario.install(pack_run_values(org_pack, deploy={"enabled": False}, validate={"enabled": True}))

    run = aicr_kubelet.run_job(RELEASE, scenario.namespace)

    assert run.exit_code == 0, run.describe()
    results = scenario.results
    statuses = results.statuses()
    assert (statuses["bundle"], statuses["verify"], statuses["deploy"]) == ("skipped", "skipped", "skipped")
    assert results.step("deploy")["message"] == "Skipping deploy (deploy.enabled=false): assert-only run"
    assert (statuses["validate"], statuses["capture-verdict"]) == ("succeeded", "succeeded")
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    assert "acme-agent-ready" in {t["name"] for t in ctrf["results"]["tests"]}, "validated against the pack's recipe"
    assert ctrf["results"]["summary"]["failed"] == 0
    assert results.configmap("aicr-recipe") is not None
    assert_nothing_deployed(scenario, org_pack)
    assert "deploy.sh" not in run.output


# -- g. fail fast on criteria ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "wording"),
    [
        (
            {"service": "k0s", "accelerator": "h200", "intent": "training"},
            [
                "criteria (service=k0s, accelerator=h200, intent=training) are not supported by aicr v1.2.0",
                "supported combinations: ",
                "(service=k0s, os=ubuntu)",
            ],
        ),
        (
            {"accelerator": "h100", "intent": "training"},
            [
                "criteria.intent=training with criteria.service=any",
                "Name the service (aks, bcm, eks, kind, lke, ocp, rke2; cks or k0s with os ubuntu; gke with os cos",
            ],
        ),
    ],
    ids=["k0s-h200-training-without-os", "intent-with-service-any"],
)
def test_unsupported_criteria_are_refused_at_helm_install_and_nothing_is_created(
    scenario: Scenario, criteria: dict[str, str], wording: list[str]
) -> None:
    fresh = f"{scenario.namespace}-new"  # not created yet: helm install --create-namespace must not create it
    for namespace in (scenario.namespace, fresh):
        with pytest.raises(HelmError) as refused:
            scenario.helm.install(RELEASE, CHART, namespace, values=criteria)
        assert refused.value.returncode == 1
        for text in wording:
            assert text in refused.value.stderr, refused.value.stderr

    admin = scenario.plane.admin
    ns = scenario.namespace
    assert admin.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"] == []
    service_accounts = {i["metadata"]["name"] for i in admin.get(f"/api/v1/namespaces/{ns}/serviceaccounts")["items"]}
    assert service_accounts == {"default"}
    assert scenario.results.configmap_names() == {"kube-root-ca.crt"}
    assert admin.get(f"/api/v1/namespaces/{ns}/secrets")["items"] == [], "no Helm release record either"
    bindings = admin.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")["items"]
    assert not [b for b in bindings if any(s.get("namespace") in (ns, fresh) for s in b.get("subjects") or [])]
    assert [r for r in scenario.helm.list_releases() if r["namespace"] in (ns, fresh)] == []
    assert not admin.exists(f"/api/v1/namespaces/{fresh}")


# -- beyond the list: SIGTERM while the real helm installs ------------------------------------

#: Where the held helm looks for its gate: the pod's /tmp emptyDir, which the test
#: reaches on the node (Kubelet.pod_volume).
HELM_GATE = "/tmp/e2e-helm-gate"
#: The runner's helm guard records a stop request here, in the pod's /work emptyDir.
STOP_FILE = f"helm-guard/{STOP_NAME}"
#: A helm first on the image's PATH (ahead of /usr/local/bin/helm): an upgrade waits
#: until the test opens the gate, then runs the real helm. deploy.sh's operation is
#: thus in flight, and has not changed anything yet, when the pod gets SIGTERM.
HELD_HELM = f"""#!/bin/sh
if [ "$1" = "upgrade" ]; then
  until [ -e {HELM_GATE} ]; do sleep 0.1; done
  echo "e2e held helm: the gate is open"
fi
exec /usr/local/bin/helm "$@"
"""


def test_sigterm_during_a_real_install_lets_helm_finish_and_leaves_no_pending_release(
    scenario: Scenario, make_kubelet: Callable[..., Kubelet], org_pack: OrgPack, tmp_path: Path
) -> None:
    held_helm = tmp_path / "helm"
    held_helm.write_text(HELD_HELM)
    held_helm.chmod(0o755)
    kubelet = make_kubelet(image_files={"/opt/venv/bin/helm": held_helm})
    scenario.pack_secret()
    # The runner keeps 15 s of the grace period for itself: helm gets 15 s here.
    scenario.install(
        pack_run_values(org_pack, job={"terminationGracePeriodSeconds": 30, **NO_RETRY}, **kubelet.image_values())
    )

    def acme_agent_started(line: str) -> bool:
        return "helm-guard: helm upgrade acme-agent " in line and " started at " in line

    with ThreadPoolExecutor(max_workers=1) as pool:
        following = pool.submit(kubelet.run_job, RELEASE, scenario.namespace, terminate_when=acme_agent_started)
        # The pod is deleted once acme-agent's helm operation has started; the gate
        # opens only when the runner has had SIGTERM (its helm guard records the
        # stop request), so the whole real install happens after the signal.
        pod = _wait_for(
            "the runner's stop request",
            lambda: next((p for p in _pods(scenario) if (kubelet.pod_volume(p, "work") / STOP_FILE).exists()), None),
            unless=following.done,
        )
        (kubelet.pod_volume(pod, "tmp") / Path(HELM_GATE).name).touch()
        run = following.result(timeout=300)

    assert run.exit_code == 143, run.describe()
    assert run.deletion is not None, run.describe()
    assert not run.deletion.sigkill, run.deletion
    # The helm operation in flight finishes; deploy.sh is stopped before the next
    # one (change safety: never in the middle of a helm operation), exit 143.
    assert run.termination_message.startswith("Interrupted (exit 143): interrupted during deploy"), (
        run.termination_message
    )
    assert "stopped between two helm operations (none was cut" in run.termination_message
    # acme-agent's whole install ran after the stop request (the held helm waited for it).
    held = run.output.index("e2e held helm: the gate is open")
    assert run.output.index('Release "acme-agent" does not exist. Installing it now.') > held
    assert "helm-guard: helm upgrade acme-config" not in run.output, "no helm operation starts after the stop"
    results = scenario.results
    assert results.report()["phase"] == "Interrupted"
    statuses = results.statuses()
    assert statuses["deploy"] == "interrupted"
    assert results.step("validate")["message"] == "not started: the run was interrupted"
    releases = releases_in(scenario.helm, org_pack.components_namespace)
    assert set(releases) == {"acme-agent"}, "the install under way when SIGTERM came finished; no other started"
    assert releases["acme-agent"]["status"] == "deployed", releases
    # The deleted pod failed (143, no DisruptionTarget: a plain delete is not a disruption).
    assert wait_for_job_end(kubelet, scenario.namespace) == ONE_FAILED_POD[:2]


def _pods(scenario: Scenario) -> list[dict[str, Any]]:
    return list(scenario.plane.admin.get(f"/api/v1/namespaces/{scenario.namespace}/pods")["items"])


def _wait_for(what: str, seen: Callable[[], Any], *, unless: Callable[[], bool], timeout: float = 300) -> Any:
    """Poll ``seen`` until it returns something; fail if ``unless()`` (the run ended) first."""
    deadline = time.monotonic() + timeout
    while not (found := seen()):
        assert not unless(), f"the run ended before {what}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.1)
    return found


# -- beyond the list: a release left pending by an interrupted helm ----------------------


def _stuck_release(helm: Helm, name: str, namespace: str, chart_root: Path) -> None:
    """Leave ``name`` in pending-install the way an interrupted run does: helm waits
    for a pre-install hook Job and is killed. The hook's pod asks for a node label
    no node has, so the scheduler never places it and the hook never ends."""
    chart = chart_root / "stuck"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: stuck\nversion: 0.1.0\n")
    (chart / "templates" / "hook.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: stuck-hook\n"
        "  annotations:\n    helm.sh/hook: pre-install\nspec:\n  template:\n    spec:\n"
        '      restartPolicy: Never\n      nodeSelector:\n        e2e.aicr-runner/never: "true"\n'
        "      containers:\n        - name: wait\n          image: busybox\n"
    )
    proc = subprocess.Popen(
        [str(helm.binary), "install", name, str(chart), "-n", namespace, "--create-namespace", "--timeout", "10m"],
        env=helm.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = json.loads(helm.run("list", "-n", namespace, "--pending", "-o", "json").stdout or "[]")
            if any(r["name"] == name and r["status"] == "pending-install" for r in listed):
                return
            time.sleep(0.2)
        pytest.fail(f"{name} never became pending-install")
    finally:
        proc.kill()
        proc.wait()


def test_a_release_left_pending_by_an_interrupted_helm_stops_the_deploy(
    scenario: Scenario, aicr_kubelet: Kubelet, org_pack: OrgPack, tmp_path: Path
) -> None:
    _stuck_release(scenario.helm, "acme-agent", org_pack.components_namespace, tmp_path)
    scenario.pack_secret()
    scenario.install(pack_run_values(org_pack, job=NO_RETRY))

    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ONE_FAILED_POD, outcome.describe()
    run = outcome.last
    assert run.exit_code == 28, run.describe()
    assert f"{org_pack.components_namespace}/acme-agent (pending-install)" in run.termination_message
    deploy = scenario.results.step("deploy")
    assert deploy["status"] == "failed"
    assert deploy["classification"] == "helm-release-pending"
    releases = releases_in(scenario.helm, org_pack.components_namespace)
    assert "acme-config" not in releases, "deploy.sh never ran"
    assert releases["acme-agent"]["status"] == "pending-install", "the runner changes nothing it did not make"
