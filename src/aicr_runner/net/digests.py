"""File digests, shared by the release download, the pack pull and provenance."""

from __future__ import annotations

from pathlib import Path

__all__ = ["binary_digest", "file_digest", "remember_digest", "sha256_file"]

#: (device, inode, size, mtime, ctime, algorithm) -> hex digest, for this process.
_binary_digests: dict[tuple[int, int, int, int, int, str], str] = {}


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file with a hashlib algorithm, read in chunks (never whole into memory)."""
    import hashlib  # OpenSSL's bindings: only a run that hashes loads them

    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    return file_digest(path, "sha256")


def _identity(path: Path, algorithm: str) -> tuple[int, int, int, int, int, str]:
    stat = path.stat()
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, algorithm)


def remember_digest(path: Path, algorithm: str, digest: str) -> None:
    """Record ``digest`` as ``binary_digest``'s answer for ``path`` as it is now: for
    a binary the run has just written and hashed as it wrote it (the fetched
    release), so the provenance check does not read 60 MB again. Any later change
    to the file (its ctime) makes ``binary_digest`` hash it afresh."""
    _binary_digests[_identity(path, algorithm)] = digest


def binary_digest(path: Path, algorithm: str = "sha256") -> str:
    """``file_digest`` of the aicr binary, computed once per run: the pin check
    and the provenance check both need it, and it is 60 MB. Keyed by the file's
    identity and change times (a rewrite or chmod changes ctime), so a replaced
    file is hashed again. Only for a file the run does not write itself."""
    key = _identity(path, algorithm)
    digest = _binary_digests.get(key)
    if digest is None:
        digest = _binary_digests[key] = file_digest(path, algorithm)
    return digest
