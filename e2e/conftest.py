"""Session fixtures for the end-to-end tests: real etcd + kube-apiserver +
kube-controller-manager (the Job controller), a real node (containerd, kubelet,
kube-scheduler), a real registry with htpasswd auth, the pinned helm and oras.

Everything is started lazily (a test that needs only the registry does not start
the API server) and stopped at session end; the processes also die with pytest
if it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane, start_control_plane
from e2e.harness.helm import Helm
from e2e.harness.node import (
    HostNetwork,
    JobRun,
    Kubelet,
    RealNode,
    claim_host_network,
    derive_image,
    load_image,
    start_node,
)
from e2e.harness.registry import Registry, start_registry
from e2e.harness.tools import use_tools
from e2e.helm_redirect import HELM_REDIRECT, HELM_REDIRECT_DIR
from e2e.node_image import CHART_DEFAULT_IMAGE, pod_fake_aicr_launcher, test_image
from e2e.reports import CHARTS, COMPONENTS, PACK_SECRET, Release
from e2e.scenarios import write_org_pack
from e2e.tools import floor_apiserver_name, tool
from tests.support.real_aicr import FolderMirror

# The harness runs the pinned tools, each built on first use (e2e/tools.py).
use_tools(tool)

#: Seconds each session component took to start (reported in the terminal summary).
STARTUP: dict[str, float] = {}
#: How the session's pods ran (reported in the terminal summary).
POD_MODE: dict[str, str] = {}


@pytest.fixture(scope="session")
def e2e_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def host_network() -> Iterator[HostNetwork]:
    """This session's slot on the machine: the node's bridge and pod subnet (see
    e2e/harness/node/host.py); every host change is undone at session end."""
    host = claim_host_network()
    try:
        yield host
    finally:
        host.teardown()


@pytest.fixture(scope="session")
def pod_host(host_network: HostNetwork) -> str:
    """The address the pods reach this host's test servers at (registry, release
    mirror, chart repository): the node's bridge address. Every URL a pod is
    given is built from it, and the servers listen on it."""
    return host_network.gateway


@pytest.fixture(scope="session")
def real_aicr_release() -> Path:
    """The real aicr v0.11.1 release folder (AICR_TEST_RELEASES_DIR, set by
    scripts/test.sh); missing: the test fails with the reason, never skips."""
    from tests.support.real_aicr import RealAicrMissing, release_dir

    try:
        return release_dir()
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def control_plane(e2e_workdir: Path, host_network: HostNetwork) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on loopback (RBAC,
    ServiceAccount issuer, TLS, the Job controller), its Services in the slot's range."""
    plane = start_control_plane(e2e_workdir / "apiserver", service_cidr=host_network.service_cidr)
    STARTUP["etcd + kube-apiserver"] = plane.startup_seconds - plane.controller_manager_seconds
    STARTUP["kube-controller-manager"] = plane.controller_manager_seconds
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def floor_control_plane(e2e_workdir: Path) -> Iterator[ControlPlane]:
    """etcd + the kube-apiserver of the oldest minor the chart supports
    (KUBE_APISERVER_FLOOR_VERSION), built like ``control_plane``'s, without
    controllers: kube-controller-manager of the image's minor would be outside its
    skew, and installing the chart and a runner run on this host need none."""
    plane = start_control_plane(
        e2e_workdir / "apiserver-floor", apiserver_tool=floor_apiserver_name(), controllers=False
    )
    STARTUP[f"etcd + {floor_apiserver_name()}"] = plane.startup_seconds
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def floor_helm(floor_control_plane: ControlPlane, e2e_workdir: Path) -> Helm:
    """The pinned helm, talking to the floor's API server as cluster admin."""
    return Helm(floor_control_plane.kubeconfig, e2e_workdir / "helm-home-floor")


@pytest.fixture(scope="session")
def registry(e2e_workdir: Path, pod_host: str) -> Iterator[Registry]:
    """An OCI registry on the node's bridge address (plain HTTP) that demands
    ``registry.username`` / ``registry.password`` on every request."""
    reg = start_registry(e2e_workdir / "registry", address=pod_host)
    STARTUP["docker-registry"] = reg.startup_seconds
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture
def registry_auth_file(registry: Registry, tmp_path: Path) -> Path:
    """A dockerconfigjson file with the registry's credentials (``config.json``)."""
    return registry.write_docker_config(tmp_path / "registry-auth" / "config.json")


@pytest.fixture(scope="session")
def helm(control_plane: ControlPlane, e2e_workdir: Path) -> Helm:
    """The pinned helm, talking to the test API server as cluster admin."""
    started = time.monotonic()
    h = Helm(control_plane.kubeconfig, e2e_workdir / "helm-home")
    STARTUP["helm (locate)"] = time.monotonic() - started
    return h


@pytest.fixture(scope="session")
def node(control_plane: ControlPlane, host_network: HostNetwork, e2e_workdir: Path) -> Iterator[RealNode]:
    """containerd, a real kubelet and kube-scheduler (e2e/harness/node), Ready and
    untainted, with the session's aicr-runner image loaded."""
    started = time.monotonic()
    real = start_node(control_plane, host_network, e2e_workdir / "node")
    STARTUP["containerd + kubelet + kube-scheduler (node Ready)"] = real.startup_seconds
    try:
        yield real
    finally:
        real.stop()
        STARTUP["node (whole fixture)"] = time.monotonic() - started


@pytest.fixture(scope="session")
def e2e_image(node: RealNode) -> str:
    """The image scripts/build-image.sh builds, plus the test material pods use
    (the fake aicr at FAKE_AICR_PATH with its package; the image's own oras is E2E_ORAS),
    loaded into the node under the chart's default image name as well."""
    started = time.monotonic()
    image = test_image()
    load_image(node.runtime, image, CHART_DEFAULT_IMAGE)
    STARTUP["e2e image into containerd"] = time.monotonic() - started
    POD_MODE["image"] = image
    return image


@pytest.fixture(scope="session")
def kubelet(node: RealNode, e2e_image: str) -> Kubelet:
    """What tests see of the pods the node runs (run_job, run_job_to_completion, serving)."""
    return Kubelet(node, CHART_DEFAULT_IMAGE)


@pytest.fixture
def make_kubelet(node: RealNode, e2e_image: str) -> Callable[..., Kubelet]:
    """``make_kubelet(image_files=..., image_env=...) -> Kubelet``: an image derived
    from the e2e image, loaded into the node; install the chart with
    ``**k.image_values()`` so the release's pods run it."""

    def make(*, image_files: dict[str, Path] | None = None, image_env: dict[str, str] | None = None) -> Kubelet:
        image = derive_image(e2e_image, {k: Path(v) for k, v in (image_files or {}).items()}, image_env)
        load_image(node.runtime, image)
        return Kubelet(node, image)

    return make


@pytest.fixture(scope="session")
def fake_aicr(e2e_workdir: Path) -> Path:
    """A launcher for the contract-faithful fake aicr (tests/fake_aicr), run on this host."""
    from tests.fake_aicr import install_fake_aicr

    return install_fake_aicr(e2e_workdir / "fake-aicr")


@pytest.fixture(scope="session")
def pod_fake_aicr(e2e_workdir: Path) -> Path:
    """The fake aicr's launcher as the pods run it: the image's Python, the package
    at FAKE_AICR_PACKAGE (both in the e2e image)."""
    return pod_fake_aicr_launcher(e2e_workdir / "pod-fake-aicr")


@pytest.fixture(scope="session")
def aicr_kubelet(kubelet: Kubelet) -> Kubelet:
    """The e2e image carries the fake aicr at FAKE_AICR_PATH: the same view as ``kubelet``."""
    return kubelet


@pytest.fixture
def run_job(kubelet: Kubelet) -> Callable[..., JobRun]:
    """``run_job(release, namespace, **kw) -> JobRun``: run the release's Job once."""
    return kubelet.run_job


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, once kube-controller-manager has added its
    ``default`` ServiceAccount and ``kube-root-ca.crt``. Not deleted: the
    namespace controller does not run (nothing needs it), and the API server goes
    away at session end anyway."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    control_plane.ensure_namespace(name)
    return name


# -- fixtures several scenario modules share ----------------------------------------------


@pytest.fixture
def release(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    registry: Registry,
    registry_auth_file: Path,
    namespace: str,
    tmp_path: Path,
) -> Release:
    """A release whose runs write the verdict report (e2e/reports.py): its org pack
    pushed, its pull Secret (test_reports, test_fleet, test_monitoring)."""
    control_plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    pack = write_org_pack(tmp_path / "pack", chart_repository=CHARTS, namespace=f"{namespace}-acme", charts=COMPONENTS)
    ref = oras.push_pack(pack, registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0"), registry_config=registry_auth_file)
    return Release(helm, control_plane, namespace, ref.ref)


@pytest.fixture(scope="module")
def release_mirror(real_aicr_release: Path, pod_host: str) -> Iterator[FolderMirror]:
    """The real aicr release folder served to pods (test_real_aicr, test_real_validators)."""
    with FolderMirror(real_aicr_release.parent, host=pod_host) as served:
        yield served


@pytest.fixture
def redirect_kubelet(make_kubelet: Callable[..., Kubelet], tmp_path: Path) -> Kubelet:
    """The e2e image plus the chart-redirecting helm (e2e/helm_redirect.py), first
    on the pod's PATH (test_real_aicr, test_real_validators)."""
    wrapper = tmp_path / "helm"
    wrapper.write_text(HELM_REDIRECT)
    wrapper.chmod(0o755)
    return make_kubelet(image_files={f"{HELM_REDIRECT_DIR}/helm": wrapper})


#: Modules that leave what a session cannot undo, run after every other when one session
#: runs them all (CI gives this one a session of its own: scripts/test.sh): the whole real
#: recipe's install leaves its CRDs and namespaces that cannot go (no namespace controller
#: runs), into which the other real-aicr tests install.
RUN_LAST = ("test_air_gapped_recipe.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name in RUN_LAST)  # stable: every other order kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if POD_MODE:
        terminalreporter.write_line(f"e2e pods ran on the real node (containerd, kubelet), image {POD_MODE['image']}")
    if STARTUP:
        parts = ", ".join(f"{k} {v:.2f}s" for k, v in STARTUP.items())
        terminalreporter.write_line(f"e2e harness startup: {parts}")
