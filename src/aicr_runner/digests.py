"""File digests, shared by the release download and the pack pull."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (never whole into memory)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
