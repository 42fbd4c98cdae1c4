"""File digests, shared by the release download, the pack pull and provenance."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["file_digest", "sha256_file"]


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file with a hashlib algorithm, read in chunks (never whole into memory)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    return file_digest(path, "sha256")
