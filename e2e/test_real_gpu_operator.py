"""NVIDIA's real GPU Operator, installed from a mirror onto the e2e node.

The upstream: a registry holding the operator image (``e2e/gpu_operator_image.py``,
built from the shared test data) under its published name
``nvcr.io/nvidia/gpu-operator:v25.10.1``, and a Helm chart repository on loopback
serving the real chart (``component-charts/gpu-operator-v25.10.1.tgz``), as
``helm.ngc.nvidia.com/nvidia`` serves it. nvcr.io cannot be reached here: the copy
reaches the upstream registry under that name with oras' ``--resolve`` (the
mirror's ``OrasCopier(resolve=...)``); helm has no such rule, so the chart's
repository is named by its loopback address.

The project's mirror code does the rest, as ``aicr-runner mirror --to
--hosts-toml`` does: the images of the chart rendered with the values installed
(``collect.component_images``) are listed; what the upstream holds is copied by
oras into a second registry (every other listed image, the operands the operator
would start on a GPU node, is absent upstream: allowed as missing and reported),
the chart pulled and pushed by helm, each checked there by digest; containerd's
``hosts.toml`` for ``nvcr.io`` goes into the node's ``config_path``. The upstream
is then stopped, the chart installed from the mirror, and the node's containerd
pulls the operator image by its published name from the mirror.

Values: those aicr v0.11.1's bundle gives gpu-operator for eks/h100/training/ubuntu,
plus ``nfd.enabled: false``: the chart's node-feature-discovery subchart starts
``registry.k8s.io/nfd/node-feature-discovery`` pods, whose image is not in the test
data (with no GPU, its labels would change nothing: no node gets an NVIDIA PCI label).

Then the real ``deployment`` validator runs through the real ``aicr validate``
against the real operator. Its image (``e2e/validators.py``) goes the same way as
the operator's: upstream as ``ghcr.io/nvidia/aicr-validators/deployment:v0.11.1``
(listed by ``aicr_images.validator_items``, as the mirror lists aicr's own images),
copied, and pulled by the node through ``certs.d/ghcr.io/hosts.toml``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.mirror.aicr_images import validator_items
from aicr_runner.mirror.collect import component_images
from aicr_runner.mirror.copy import copy_all
from aicr_runner.mirror.hosts_toml import write_hosts_toml
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import OrasCopier
from e2e.gpu_operator_image import (
    OPERATOR_IMAGE,
    OPERATOR_VERSION,
    GpuOperatorMissing,
    gpu_operator_archive,
    gpu_operator_image,
)
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import NODE_NAME, RealNode
from e2e.harness.procs import wait_for
from e2e.harness.registry import Registry, start_registry
from e2e.test_real_aicr import SNAPSHOT, snapshot_configmap
from e2e.tools import tool
from e2e.validators import (
    VALIDATOR_IMAGE,
    ValidatorsMissing,
    deployment_controllers,
    validator_archive,
    validator_image,
)
from tests.support.podman import PODMAN
from tests.support.real_aicr import FolderMirror, RealAicrMissing, component_charts_dir, extract_binary

pytestmark = pytest.mark.e2e

CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
CHART = "gpu-operator"
NAMESPACE = "gpu-operator"
#: Where the mirror keeps everything (``mirror.registry: <mirror>/aicr``).
PREFIX = "aicr"
#: The upstream registries of the images copied (both reached at the upstream registry).
UPSTREAM_HOSTS = ("nvcr.io", "ghcr.io")
#: What the test's values add to the bundle's (the module docstring says why).
EXTRA_VALUES = {"nfd": {"enabled": False}}


@pytest.fixture
def registries(tmp_path: Path) -> Iterator[tuple[Registry, Registry]]:
    """An upstream registry and a mirror the node pulls from, anonymous, plain HTTP."""
    upstream = start_registry(tmp_path / "upstream", anonymous=True)
    mirror = start_registry(tmp_path / "mirror", anonymous=True)
    try:
        yield upstream, mirror
    finally:
        upstream.stop()
        mirror.stop()


@pytest.fixture
def operator_image() -> str:
    try:
        return gpu_operator_image(gpu_operator_archive())
    except GpuOperatorMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def chart_upstream(tmp_path: Path, helm: Helm) -> Iterator[FolderMirror]:
    """The real chart in a Helm repository on loopback (``<base>/nvidia``)."""
    try:
        archive = component_charts_dir() / f"{CHART}-{OPERATOR_VERSION}.tgz"
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    repo = tmp_path / "charts" / "nvidia"
    repo.mkdir(parents=True)
    shutil.copy(archive, repo)
    helm.run("repo", "index", str(repo))
    with FolderMirror(tmp_path / "charts") as served:
        yield served


@pytest.fixture
def bundle_values(real_aicr_release: Path, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The gpu-operator values of aicr v0.11.1's bundle for CRITERIA, and its recipe."""
    work = tmp_path / "aicr"
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    flags = [word for name, value in CRITERIA.items() for word in (f"--{name}", value)]
    for args in (["recipe", *flags, "--output", "recipe.yaml"], ["bundle", "--recipe", "recipe.yaml", "--output", "b"]):
        subprocess.run([str(binary), *args], cwd=work, check=True, capture_output=True, timeout=120)
    values = yaml.safe_load((work / "b" / CHART / "values.yaml").read_text())
    return values, work / "recipe.yaml"


@pytest.fixture
def validator_upstream(node: RealNode) -> str:
    """The validator image (podman), and the node without it under its published name
    (an earlier test may have loaded it): its pods must pull it through the mirror."""
    try:
        image = validator_image(validator_archive())
    except ValidatorsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    node.runtime.ctr("images", "rm", VALIDATOR_IMAGE, check=False)
    return image


@pytest.fixture
def operator_removed_after(helm: Helm, control_plane: ControlPlane, node: RealNode) -> Iterator[None]:
    yield
    # No hooks: the chart's post-delete hook runs the operator image's kubectl,
    # which the published image carries for its operands and this one does not.
    helm.run("uninstall", CHART, "--namespace", NAMESPACE, "--no-hooks", "--wait", check=False, timeout=120)
    for host in UPSTREAM_HOSTS:
        shutil.rmtree(node.runtime.certs_dir / host, ignore_errors=True)
    # Later tests (e2e/test_real_validators.py) count the pods labelled app=gpu-operator.
    wait_for(lambda: not _operator_pods(control_plane) or None, timeout=90, what="the operator's pods gone")


def _operator_pods(plane: ControlPlane) -> list[dict[str, Any]]:
    found = plane.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="app=gpu-operator")
    return list(found["items"])


def _push(image: str, reference: str) -> None:
    push = [*PODMAN, "push", "--quiet", "--tls-verify=false", image, f"docker://{reference}"]
    subprocess.run(push, check=True, capture_output=True, timeout=300)


def _node_digest(node: RealNode, image: str) -> str:
    """The digest the node's containerd holds ``image`` at (``ctr images list``'s DIGEST)."""
    [line] = node.runtime.ctr("images", "list", f"name=={image}").splitlines()[1:]
    return line.split()[2]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.mark.timeout(900)
def test_the_real_gpu_operator_installed_from_the_mirror_is_ready_and_the_real_validator_passes(  # noqa: PLR0917 - one install's story
    helm: Helm,
    control_plane: ControlPlane,
    node: RealNode,
    namespace: str,
    tmp_path: Path,
    registries: tuple[Registry, Registry],
    operator_image: str,
    chart_upstream: FolderMirror,
    bundle_values: tuple[dict[str, Any], Path],
    validator_upstream: str,
    operator_removed_after: None,
) -> None:
    started = time.monotonic()
    upstream, mirror = registries
    _push(operator_image, f"{upstream.host}/nvidia/gpu-operator:{OPERATOR_VERSION}")
    _push(validator_upstream, f"{upstream.host}/{VALIDATOR_IMAGE.split('/', 1)[1]}")
    values = {**bundle_values[0], **EXTRA_VALUES}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    source = f"{chart_upstream.base_url}/nvidia"

    # The list: the chart, and the images of the chart rendered with the values installed.
    rendered = helm.run(
        "template", CHART, CHART, "--repo", source, "--version", OPERATOR_VERSION, "-f", str(tmp_path / "values.yaml")
    ).stdout
    recipe = yaml.safe_load(bundle_values[1].read_text())
    checks = {"deployment": recipe["validation"]["deployment"]["checks"]}
    aicr = validator_items("0.11.1", ["deployment"], checks, service="eks", snapshot_agent=None)
    images = [*component_images(CHART, rendered), *aicr]
    assert OPERATOR_IMAGE in [i.reference for i in images], images
    chart = Item(
        Kind.CHART,
        f"{source} {CHART}@{OPERATOR_VERSION}",
        chart_source=source,
        chart_name=CHART,
        version=OPERATOR_VERSION,
    )
    target = f"oci://{mirror.host}/{PREFIX}"
    copier = OrasCopier(
        str(tool("oras")),
        str(helm.binary),
        plain_http=frozenset({*UPSTREAM_HOSTS, mirror.host}),
        resolve=tuple(f"{host}:80:{upstream.host}" for host in UPSTREAM_HOSTS),
        timeout_seconds=300,
    )
    others = frozenset(i.reference for i in images if i.reference not in {OPERATOR_IMAGE, VALIDATOR_IMAGE})
    copy_started = time.monotonic()
    report = copy_all([chart, *images], target, copier, allow_missing=others)
    copy_seconds = time.monotonic() - copy_started
    copied = {c.item.reference: c for c in report.copied}
    assert set(copied) == {chart.reference, OPERATOR_IMAGE, VALIDATOR_IMAGE}, report
    assert {i.reference for i, _ in report.not_copied} == others, report.not_copied
    operator_digest = copied[OPERATOR_IMAGE].digest
    assert copied[OPERATOR_IMAGE].target == f"{mirror.host}/{PREFIX}/nvcr.io/nvidia/gpu-operator:{OPERATOR_VERSION}"
    written = write_hosts_toml(images, target, node.runtime.certs_dir, plain_http=True)
    assert {node.runtime.certs_dir / host / "hosts.toml" for host in UPSTREAM_HOSTS} <= set(written), written

    # The upstream goes away: from here on, only the mirror can answer.
    upstream_requests = len(upstream.requests())
    upstream.stop()
    chart_upstream.requests.clear()
    mirror_before = len(mirror.requests())
    on_node = node.runtime.ctr("images", "list", "-q").split()
    assert not {OPERATOR_IMAGE, VALIDATOR_IMAGE} & set(on_node), "on the node before the test"

    with deployment_controllers(control_plane, tmp_path / "deployment-controllers"):
        install_started = time.monotonic()
        # Helm 4's --wait (kstatus) also waits for the ClusterPolicy to be ready, which
        # it never is without a GPU node (state notReady); legacy waits for the pods.
        chart_ref = copied[chart.reference].target.rsplit(":", 1)[0]
        helm.run(
            "install", CHART, f"oci://{chart_ref}", "--version", OPERATOR_VERSION, "--plain-http",
            "--namespace", NAMESPACE, "--create-namespace", "-f", str(tmp_path / "values.yaml"),
            "--wait=legacy", "--timeout", "5m", timeout=330,
        )  # fmt: skip
        install_seconds = time.monotonic() - install_started
        [pod] = _operator_pods(control_plane)
        assert _ready(pod), pod.get("status")

        # The ClusterPolicy the chart created, as the operator reconciled it.
        def policy_state() -> dict[str, Any] | None:
            items = control_plane.admin.get("/apis/nvidia.com/v1/clusterpolicies")["items"]
            return items[0] if items and (items[0].get("status") or {}).get("state") else None

        policy = wait_for(policy_state, timeout=120, what="the ClusterPolicy's state")

        # The real validator against the real operator.
        server_version = snapshot_configmap(control_plane, namespace)
        ctrf_path = tmp_path / "ctrf.json"
        validate_started = time.monotonic()
        validate = subprocess.run(
            [
                str(bundle_values[1].parent / "bin" / "aicr"), "validate", "--recipe", str(bundle_values[1]),
                "--phase", "deployment", "--snapshot", f"cm://{namespace}/{SNAPSHOT}",
                "--fail-on-error=false", "--output", str(ctrf_path), "--kubeconfig", str(control_plane.kubeconfig),
            ],
            capture_output=True, text=True, timeout=600, check=False,
            # v0.11.1's validation client reads KUBECONFIG (the flag serves the snapshot's read).
            env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
        )  # fmt: skip
        validate_seconds = time.monotonic() - validate_started
        pod_after = control_plane.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}")

    assert validate.returncode == 0, validate.stderr[-3000:]
    tests = {t["name"]: t for t in json.loads(ctrf_path.read_text())["results"]["tests"]}
    statuses = {name: t["status"] for name, t in tests.items()}
    assert statuses["operator-health"] == "passed", tests["operator-health"]
    assert statuses["gpu-operator-version"] == "passed", tests["gpu-operator-version"]
    shown = [line for line in tests["operator-health"].get("stdout") or [] if not line.startswith("time=")]
    assert shown == ["Found 1 gpu-operator pod(s):", f"  {pod['metadata']['name']}: Running", "Running: 1/1"]
    version = [line for line in tests["gpu-operator-version"].get("stdout") or [] if not line.startswith("time=")]
    assert version == [f"Detected GPU Operator version: {OPERATOR_VERSION}", "Constraint: >= v24.6.0 \u2192 true"]

    # The pod is the real operator's: the chart's Deployment, the published image
    # name, pulled by the node's containerd from the mirror (the upstream was down).
    [container] = pod["spec"]["containers"]
    assert (container["image"], pod["spec"]["nodeName"]) == (OPERATOR_IMAGE, NODE_NAME)
    [status] = pod_after["status"]["containerStatuses"]
    assert status["imageID"].endswith(operator_digest), (status["imageID"], operator_digest)
    assert status["restartCount"] == 0, status
    # Both images the node ran (the operator, the validator's four pods) came from
    # the mirror, asked for by containerd, and are on the node at the digest copied.
    pulled = mirror.requests()[mirror_before:]
    for image in (OPERATOR_IMAGE, VALIDATOR_IMAGE):
        name, tag = image.rsplit(":", 1)
        manifest_path = f"/v2/{PREFIX}/{name}/manifests/{tag}"
        assert f"GET {manifest_path}" in pulled or f"HEAD {manifest_path}" in pulled, (image, pulled)
        agents = mirror.user_agents(manifest_path)
        assert any(agent.startswith("containerd/") for agent in agents), (image, agents)
        assert _node_digest(node, image) == copied[image].digest, image
    # Nothing reached the upstream during the install: it was down, its chart repository not asked.
    assert not upstream.process.alive()
    assert not chart_upstream.requests
    helm_manifest = f"/v2/{PREFIX}/127.0.0.1_{chart_upstream.base_url.rsplit(':', 1)[1]}/nvidia/gpu-operator/manifests"
    assert any(r.startswith(f"GET {helm_manifest}") for r in pulled), pulled

    state = policy["status"]["state"]
    # As the operator left it after the checks (its first state may come before its conditions).
    policy = control_plane.admin.get(f"/apis/nvidia.com/v1/clusterpolicies/{policy['metadata']['name']}")
    print(
        f"\nthe real GPU Operator from the mirror: copy {copy_seconds:.1f}s ({len(report.copied)} copied, "
        f"{len(report.not_copied)} listed images absent upstream), upstream requests before its stop "
        f"{upstream_requests}; install {install_seconds:.1f}s; validate {validate_seconds:.1f}s ({statuses}); "
        f"ClusterPolicy state {state!r} ({policy['status'].get('conditions')}); server {server_version}; "
        f"whole test {time.monotonic() - started:.1f}s"
    )
    assert (state, policy["status"]["state"]) == ("notReady", "notReady"), policy["status"]


def test_an_operator_archive_that_does_not_match_its_checksum_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a changed archive (or a checksums file without its line) builds nothing."""
    real = gpu_operator_archive()
    folder = tmp_path / OPERATOR_VERSION
    folder.mkdir()
    copy = folder / real.name
    copy.write_bytes(real.read_bytes()[:-1] + b"\0")
    (folder / "checksums.txt").write_text((real.parent / "checksums.txt").read_text())
    monkeypatch.setenv("AICR_TEST_GPU_OPERATOR_DIR", str(tmp_path))
    with pytest.raises(GpuOperatorMissing, match=r"sha256 [0-9a-f]{64} does not match .*checksums\.txt"):
        gpu_operator_archive()
    (folder / "checksums.txt").write_text("")
    copy.write_bytes(real.read_bytes())
    with pytest.raises(GpuOperatorMissing, match=r"does not match .*\(None\)"):
        gpu_operator_archive()
    monkeypatch.setenv("AICR_TEST_GPU_OPERATOR_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(GpuOperatorMissing, match="lacks"):
        gpu_operator_archive()
