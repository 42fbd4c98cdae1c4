"""The aicr binary the run uses, and a preinstalled one's checks.

Kept apart from ``release`` (the download, with httpx and tenacity) so a run
with a preinstalled aicr never imports the HTTP stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from aicr_runner.errors import ChecksumError, ToolError
from aicr_runner.net.digests import binary_digest

__all__ = ["ATTESTATION_NAME", "AicrBinary", "use_preinstalled"]

ATTESTATION_NAME = "aicr-attestation.sigstore.json"


@dataclass(frozen=True)
class AicrBinary:
    path: Path
    #: The Sigstore attestation beside the binary (``aicr bundle --attest`` needs it).
    attestation_path: Path | None
    #: The release tag (``v1.2.0``); empty for a preinstalled binary.
    version: str
    #: sha256 of the verified release archive; empty for a preinstalled binary.
    tarball_sha256: str
    #: Where the archive came from, or the preinstalled binary's path.
    source_url: str
    #: sha256 of the binary that will run; empty for a preinstalled binary
    #: without a pin (the provenance check hashes it when it verifies).
    binary_sha256: str = ""


def use_preinstalled(path: str | Path, sha256: str) -> AicrBinary:
    """Use an aicr already on disk; verify it when ``sha256`` is given."""
    binary = Path(path)
    if not binary.is_file():
        raise ToolError(f"preinstalled aicr {binary} does not exist or is not a file")
    if not os.access(binary, os.X_OK):
        raise ToolError(f"preinstalled aicr {binary} is not executable")
    expected = sha256.strip().lower()
    actual = binary_digest(binary) if expected else ""
    if expected and actual != expected:
        raise ChecksumError(f"preinstalled aicr {binary}: sha256 mismatch: expected {expected}, got {actual}")
    sidecar = binary.with_name(ATTESTATION_NAME)
    return AicrBinary(
        path=binary,
        attestation_path=sidecar if sidecar.is_file() else None,
        version="",
        tarball_sha256="",
        source_url=str(binary),
        binary_sha256=actual,
    )
