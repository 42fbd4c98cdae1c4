"""The built image verifies aicr's provenance itself: its cosign and its shipped
trusted root, with no network at all (``--network=none``), on real public-good
Sigstore material (the sigstore@3.1.0 npm tarball and its provenance bundle, see
tests/data/sigstore), placed where a preinstalled aicr and its sidecar would be."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from e2e.tools import npm_tarball
from tests.support.podman import PODMAN, ROOT, RUN_LIMITS, built_image

pytestmark = pytest.mark.image

BUNDLE = ROOT / "tests" / "data" / "sigstore" / "sigstore-3.1.0.sigstore.json"
SIGSTORE_JS = "https://github.com/sigstore/sigstore-js/.github/workflows/release.yml@refs/heads/main"
NVIDIA_AT_V120 = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.2.0"


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


@pytest.fixture(scope="module")
def attested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding "aicr" (the attested tarball) and its attestation sidecar."""
    directory = tmp_path_factory.mktemp("attested")
    binary = directory / "aicr"
    binary.write_bytes(npm_tarball().read_bytes())
    binary.chmod(0o755)
    (directory / "aicr-attestation.sigstore.json").write_bytes(BUNDLE.read_bytes())
    directory.chmod(0o755)
    return directory


def plan(image: str, attested: Path, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {
        "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
        "AICR_RUNNER_AICR__BINARY": "/opt/aicr/aicr",
        **env,
    }
    flags = [arg for key, value in settings.items() for arg in ("-e", f"{key}={value}")]
    return subprocess.run(
        [
            *PODMAN,
            "run",
            "--rm",
            "--read-only",
            "--network=none",
            *RUN_LIMITS,
            "--tmpfs",
            "/tmp:U",
            "--tmpfs",
            "/work:U",
            "--tmpfs",
            "/home/aicr:U",
            "-v",
            f"{attested}:/opt/aicr:ro",
            *flags,
            image,
            "plan",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )


def test_the_image_verifies_real_provenance_offline_with_its_cosign_and_root(image: str, attested: Path) -> None:
    proc = plan(image, attested, AICR_RUNNER_AICR__PROVENANCE__IDENTITY=SIGSTORE_JS)
    output = proc.stdout + proc.stderr
    # Verified; then the "aicr" (an npm tarball) cannot run: exit 27, after the check.
    assert proc.returncode == 27, output
    assert "aicr provenance: mode=require, status=verified" in output
    assert f"identity={SIGSTORE_JS}" in output
    assert "logIndex=168704762" in output
    assert re.search(r"integratedTime=2025-02-04T20:35:47Z", output), output


def test_the_image_refuses_provenance_signed_by_anyone_else(image: str, attested: Path) -> None:
    proc = plan(image, attested)  # the default identity: NVIDIA's release workflow at the pinned tag
    output = proc.stdout + proc.stderr
    assert proc.returncode == 29, output
    assert f"signer identity mismatch: the certificate was issued to {SIGSTORE_JS}, expected {NVIDIA_AT_V120}" in output
