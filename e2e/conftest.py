"""Session fixtures for the end-to-end tests: real etcd + kube-apiserver +
kube-controller-manager (the Job controller), a real registry with htpasswd auth,
the pinned helm and oras, and a stand-in kubelet.

Everything is started lazily (a test that needs only the registry does not start
the API server) and stopped at session end; the processes also die with pytest
if it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.apiserver import ControlPlane, start_control_plane
from e2e.harness.helm import Helm
from e2e.harness.kubelet import FAKE_AICR_PACKAGE, FAKE_AICR_PATH, JobRun, Kubelet
from e2e.harness.registry import Registry, start_registry

#: Seconds each session component took to start (reported in the terminal summary).
STARTUP: dict[str, float] = {}
#: How the session's pods ran (reported in the terminal summary).
POD_MODE: dict[str, str] = {}


@pytest.fixture(scope="session")
def e2e_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def pod_host() -> str:
    """The address the pods reach this host's test servers at (release mirror,
    chart repository): every URL a pod is given is built from it. The stand-in
    kubelet runs pods in the host's network namespace, so loopback; a kubelet
    with a pod network re-points it at an address the pods can route to."""
    return "127.0.0.1"


@pytest.fixture(scope="session")
def real_aicr_release() -> Path:
    """The real aicr v0.11.1 release folder (AICR_TEST_RELEASES_DIR, set by
    scripts/test.sh); missing: the test fails with the reason, never skips."""
    from tests.real_aicr import RealAicrMissing, release_dir

    try:
        return release_dir()
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def control_plane(e2e_workdir: Path) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on loopback (RBAC,
    ServiceAccount issuer, TLS, the Job controller)."""
    plane = start_control_plane(e2e_workdir / "apiserver")
    STARTUP["etcd + kube-apiserver"] = plane.startup_seconds - plane.controller_manager_seconds
    STARTUP["kube-controller-manager"] = plane.controller_manager_seconds
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def registry(e2e_workdir: Path) -> Iterator[Registry]:
    """An OCI registry on loopback (plain HTTP) that demands ``registry.username`` /
    ``registry.password`` on every request."""
    reg = start_registry(e2e_workdir / "registry")
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
def kubelet(control_plane: ControlPlane, e2e_workdir: Path) -> Kubelet:
    started = time.monotonic()
    k = Kubelet(control_plane, e2e_workdir / "kubelet")
    STARTUP[f"kubelet (sandbox={k.sandbox})"] = time.monotonic() - started
    POD_MODE["mode"] = k.sandbox
    POD_MODE["image"] = k.image
    return k


@pytest.fixture
def make_kubelet(control_plane: ControlPlane, tmp_path: Path) -> Callable[..., Kubelet]:
    """``make_kubelet(**options) -> Kubelet`` with other image defaults or sandbox."""
    count = 0

    def make(**options: Any) -> Kubelet:
        nonlocal count
        count += 1
        return Kubelet(control_plane, tmp_path / f"kubelet-{count}", **options)

    return make


@pytest.fixture(scope="session")
def fake_aicr(e2e_workdir: Path) -> Path:
    """A launcher for the contract-faithful fake aicr (tests/fake_aicr), run on this host."""
    from tests.fake_aicr import install_fake_aicr

    return install_fake_aicr(e2e_workdir / "fake-aicr")


@pytest.fixture(scope="session")
def pod_fake_aicr(e2e_workdir: Path, kubelet: Kubelet, fake_aicr: Path) -> Path:
    """The fake aicr's launcher for the pods: in the image (podman mode) it runs with
    the image's Python from FAKE_AICR_PACKAGE; in the fallback modes it is the host's."""
    from tests.fake_aicr import install_fake_aicr
    from tests.podman import IMAGE_PYTHON

    if kubelet.sandbox != "podman":
        return fake_aicr
    return install_fake_aicr(e2e_workdir / "pod-fake-aicr", python=IMAGE_PYTHON, package_dir=FAKE_AICR_PACKAGE)


@pytest.fixture(scope="session")
def aicr_kubelet(control_plane: ControlPlane, e2e_workdir: Path, pod_fake_aicr: Path, kubelet: Kubelet) -> Kubelet:
    """A kubelet whose image also carries the fake aicr at FAKE_AICR_PATH."""
    return Kubelet(
        control_plane,
        e2e_workdir / "aicr-kubelet",
        image_files={FAKE_AICR_PATH: pod_fake_aicr},
        sandbox=kubelet.sandbox,
        image=kubelet.image or None,
    )


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if POD_MODE:
        where = (
            f"podman, from the built image {POD_MODE['image']}"
            if POD_MODE["mode"] == "podman"
            else f"{POD_MODE['mode']}, this checkout standing in for the image "
            f"({'E2E_SANDBOX' if os.environ.get('E2E_SANDBOX') else 'podman is missing'})"
        )
        terminalreporter.write_line(f"e2e pods ran with {where}")
    if STARTUP:
        parts = ", ".join(f"{k} {v:.2f}s" for k, v in STARTUP.items())
        terminalreporter.write_line(f"e2e harness startup: {parts}")
