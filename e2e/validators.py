"""aicr v0.11.1's real ``deployment`` validator on the e2e node.

``aicr validate`` starts one Job per check with the image
``ghcr.io/nvidia/aicr-validators/deployment:v0.11.1`` and no pull policy (so a
loaded ``:v0.11.1`` tag is not pulled). The program NVIDIA publishes in that image
is in the shared test data (``aicr-validators/v0.11.1``, built from the tag's
source); here it gets the published image's layout, built ``FROM scratch``
(public base images cannot be pulled): the binary at ``/deployment``,
``/app/testdata``, ``WORKDIR /app``, distroless's ``nonroot`` user as its
numeric id (65532), ``ENTRYPOINT ["/deployment"]``. The image is loaded into the
node's containerd under the published name.

``operator-health`` needs a Running pod labelled ``app=gpu-operator`` in the
namespace ``gpu-operator``; ``gpu-operator-version`` a Deployment ``gpu-operator``
there whose ``app.kubernetes.io/version`` label (or image tag) satisfies the
recipe's constraint. ``GPU_OPERATOR_TEMPLATE`` is the stand-in gpu-operator
chart's Deployment, named and labelled as NVIDIA's chart names and labels its
operator Deployment; its one container is the node's pause program. Its pods
need kube-controller-manager's Deployment and ReplicaSet controllers, which the
session's control plane does not run: ``deployment_controllers`` starts them.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.harness.apiserver import ControlPlane
from e2e.harness.controllers import start_controller_manager
from e2e.harness.podman import image_exists, podman_build
from e2e.testdata import shared_folder

__all__ = [
    "GPU_OPERATOR_TEMPLATE",
    "VALIDATORS_ENV",
    "VALIDATOR_IMAGE",
    "ValidatorsMissing",
    "deployment_controllers",
    "more_controllers",
    "validator_archive",
    "validator_image",
]

#: The image aicr validate v0.11.1 runs for the deployment phase (its embedded catalog).
VALIDATOR_IMAGE = "ghcr.io/nvidia/aicr-validators/deployment:v0.11.1"
VALIDATORS_ENV = "AICR_TEST_VALIDATORS_DIR"
ARCHIVE = "aicr-validator-deployment_0.11.1_linux_amd64.tar.gz"
#: distroless's ``nonroot`` user, which the published image runs as.
NONROOT = "65532:65532"
#: The stand-in gpu-operator chart's operator Deployment (NVIDIA's chart names it
#: ``gpu-operator`` and labels its pods ``app: gpu-operator``, the Deployment
#: ``app.kubernetes.io/version: <appVersion>``). ``__IMAGE__`` is the node's pause image.
GPU_OPERATOR_TEMPLATE = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpu-operator
  labels:
    app.kubernetes.io/name: gpu-operator
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
    app.kubernetes.io/component: gpu-operator
spec:
  replicas: 1
  selector:
    matchLabels:
      app: gpu-operator
  template:
    metadata:
      labels:
        app: gpu-operator
        app.kubernetes.io/component: gpu-operator
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
        - name: gpu-operator
          image: __IMAGE__
          securityContext:
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
"""


class ValidatorsMissing(RuntimeError):
    """The validator archive is not where AICR_TEST_VALIDATORS_DIR (or the releases' sibling) says."""


def validators_root() -> Path:
    """``AICR_TEST_VALIDATORS_DIR``; unset, ``aicr-validators`` next to the
    ``AICR_TEST_RELEASES_DIR`` folder (the shared test data's layout)."""
    return shared_folder(VALIDATORS_ENV, "aicr-validators", f"v0.11.1/{ARCHIVE}", ValidatorsMissing)


def validator_archive() -> Path:
    """The archive, checked against its ``checksums.txt``."""
    folder = validators_root() / "v0.11.1"
    archive, sums = folder / ARCHIVE, folder / "checksums.txt"
    if not archive.is_file() or not sums.is_file():
        raise ValidatorsMissing(f"{folder} lacks {ARCHIVE} or checksums.txt (the real deployment validator)")
    lines = (line.partition("  ") for line in sums.read_text().splitlines())
    expected = {name.strip(): digest for digest, _, name in lines}
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    if expected.get(ARCHIVE) != actual:
        raise ValidatorsMissing(f"{archive}: sha256 {actual} does not match {sums} ({expected.get(ARCHIVE)})")
    return archive


def validator_image(archive: Path) -> str:
    """The published layout ``FROM scratch``, built with podman; the tag is a hash
    of the archive and the layout (built once per content)."""
    layout = f"FROM scratch\nCOPY deployment /deployment\nCOPY app /app\nWORKDIR /app\nUSER {NONROOT}\n"
    layout += 'ENTRYPOINT ["/deployment"]\n'
    digest = hashlib.sha256(archive.read_bytes() + layout.encode()).hexdigest()[:16]
    tag = f"localhost/aicr-validators-deployment:{digest}"
    if _podman_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="e2e-validator-") as context:
        with tarfile.open(archive) as tar:
            tar.extractall(context, members=[m for m in tar.getmembers() if m.name != "LICENSE"], filter="data")
        (Path(context) / "Containerfile").write_text(layout)
        podman_build(Path(context), tag)
    return tag


def _podman_exists(tag: str) -> bool:
    return image_exists(tag)


@contextmanager
def deployment_controllers(plane: ControlPlane, workdir: Path) -> Iterator[None]:
    """kube-controller-manager with only the Deployment and ReplicaSet controllers,
    next to the session's (which runs neither), while the block runs."""
    with more_controllers(plane, workdir, ("deployment-controller", "replicaset-controller")):
        yield


@contextmanager
def more_controllers(plane: ControlPlane, workdir: Path, controllers: tuple[str, ...]) -> Iterator[None]:
    """kube-controller-manager with only ``controllers``, next to the session's,
    while the block runs. It uses the session controller manager's identity (each
    controller then acts as its own ServiceAccount, as in a cluster)."""
    workdir.mkdir(parents=True, exist_ok=True)
    proc = start_controller_manager(
        kubeconfig=plane.workdir / "kube-controller-manager.kubeconfig",
        ca_file=plane.ca_file,
        service_account_key=_signing_key(plane),
        admin=plane.admin,
        workdir=workdir,
        controllers=controllers,
    )
    try:
        yield
    finally:
        proc.stop()


def _signing_key(plane: ControlPlane) -> Path:
    """The key the session's token controller signs with (start_control_plane's ``pki/sa.key``)."""
    return plane.workdir / "pki" / "sa.key"
