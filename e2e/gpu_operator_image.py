"""NVIDIA's GPU Operator v25.10.1 image, built here from the shared test data.

The chart ``gpu-operator-v25.10.1`` starts ``nvcr.io/nvidia/gpu-operator:v25.10.1``.
That image cannot be pulled here; the operator itself is in the shared test data
(``gpu-operator/v25.10.1/gpu-operator-v25.10.1-linux-amd64.tar.gz``: the tag's
unmodified source built, plus the assets the image carries), located by
``AICR_TEST_GPU_OPERATOR_DIR`` (unset: ``gpu-operator`` beside
``AICR_TEST_RELEASES_DIR``; scripts/test.sh sets it to
``<repo>/../shared/testdata/gpu-operator``).

The image has the tag's ``docker/Dockerfile`` layout on the project's
mmdebstrap Debian base (``scripts/image-inputs.sh base``, cached by recipe;
NVIDIA's is a CUDA UBI base, which cannot be pulled here): the archive's tree at
``/`` (``/usr/bin/gpu-operator``, ``/usr/bin/gather``, ``/opt/gpu-operator/``,
``/licenses``), user ``65532:65532``, ``ENTRYPOINT ["/usr/bin/gpu-operator"]``.
The archive is checked against its ``checksums.txt`` first (a mismatch fails:
nothing is built from it). The tag is a hash of every input, so it is built once
per content and found by later sessions (CI builds it once).
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from pathlib import Path

from e2e.agent_image import base_image_tar
from e2e.harness.podman import content_tag, image_exists, podman_build
from e2e.testdata import shared_folder

__all__ = [
    "GPU_OPERATOR_ENV",
    "OPERATOR_IMAGE",
    "OPERATOR_VERSION",
    "GpuOperatorMissing",
    "gpu_operator_archive",
    "gpu_operator_image",
]

OPERATOR_VERSION = "v25.10.1"
#: The name the real chart renders for the operator (values ``operator.repository/image:version``).
OPERATOR_IMAGE = f"nvcr.io/nvidia/gpu-operator:{OPERATOR_VERSION}"
GPU_OPERATOR_ENV = "AICR_TEST_GPU_OPERATOR_DIR"
ARCHIVE = f"gpu-operator-{OPERATOR_VERSION}-linux-amd64.tar.gz"
#: The tag's docker/Dockerfile, minus what needs CUDA (see the test data's README).
LAYOUT = """FROM scratch
ADD base.tar /
ADD tree /
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpu-operator"]
"""


class GpuOperatorMissing(RuntimeError):
    """The operator archive is absent, or does not match its checksums file."""


def gpu_operator_root() -> Path:
    return shared_folder(GPU_OPERATOR_ENV, "gpu-operator", f"{OPERATOR_VERSION}/{ARCHIVE}", GpuOperatorMissing)


def gpu_operator_archive() -> Path:
    """The archive, its sha256 checked against ``checksums.txt`` (fail closed)."""
    folder = gpu_operator_root() / OPERATOR_VERSION
    archive, sums = folder / ARCHIVE, folder / "checksums.txt"
    if not archive.is_file() or not sums.is_file():
        raise GpuOperatorMissing(f"{folder} lacks {ARCHIVE} or checksums.txt (the GPU Operator {OPERATOR_VERSION})")
    lines = (line.partition("  ") for line in sums.read_text().splitlines())
    expected = {name.strip(): digest.strip() for digest, _, name in lines}
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    if expected.get(ARCHIVE) != actual:
        raise GpuOperatorMissing(f"{archive}: sha256 {actual} does not match {sums} ({expected.get(ARCHIVE)})")
    return archive


def gpu_operator_image(archive: Path) -> str:
    """The image, built with podman (or found: the tag hashes the base, the archive
    and the layout)."""
    with tempfile.TemporaryDirectory(prefix="e2e-gpu-operator-") as scratch:
        context = Path(scratch)
        base = base_image_tar(context / "inputs")
        base.rename(context / "base.tar")
        tag = content_tag("gpu-operator", LAYOUT, archive, context / "base.tar")
        if image_exists(tag):
            return tag
        tree = context / "tree"
        tree.mkdir()
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        (context / "Containerfile").write_text(LAYOUT)
        podman_build(context, tag)
    return tag
