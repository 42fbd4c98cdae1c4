"""The aicr release from a registry artifact: the layout ``mirror`` pushes, found by
title, each blob checked, then the HTTP path's checks; every fault fails closed
with the HTTP path's exit code. The registry is a fake of ``pack.pull.Registry``
(the real registry: tests/integration/test_release_artifact.py)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.aicr.release_oci import (
    ARCHIVE_MEDIA_TYPE,
    ARTIFACT_TYPE,
    CHECKSUMS_MEDIA_TYPE,
    fetch_aicr_from_registry,
)
from aicr_runner.errors import ChecksumError, DownloadError, ExitCode, PackAuthError, PackNotFoundError
from aicr_runner.net.deadline import Cancellation
from aicr_runner.settings.config import PackSettings, Sha256Pins
from tests.unit.aicr.test_release import AMD64_TAR, ARM64_TAR, BINARY, goreleaser_sums, settings

REF = "mirror.example.test:5000/site/nvidia/aicr/release:v1.2.0"
AMD64 = "aicr_1.2.0_linux_amd64.tar.gz"
ARM64 = "aicr_1.2.0_linux_arm64.tar.gz"
SUMS = "aicr_checksums.txt"


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def layer(title: str, data: bytes, media_type: str = ARCHIVE_MEDIA_TYPE) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": digest_of(data),
        "size": len(data),
        "annotations": {"org.opencontainers.image.title": title},
    }


def release_files(sums: bytes | None = None) -> dict[str, bytes]:
    return {AMD64: AMD64_TAR, ARM64: ARM64_TAR, SUMS: sums if sums is not None else goreleaser_sums()}


def manifest_for(files: dict[str, bytes]) -> dict[str, Any]:
    """What ``mirror`` pushes (``oras push --artifact-type``): an OCI manifest, a titled layer per file."""
    return {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest_of(b"{}"), "size": 2},
        "layers": [
            layer(name, data, CHECKSUMS_MEDIA_TYPE if name == SUMS else ARCHIVE_MEDIA_TYPE)
            for name, data in files.items()
        ],
        "annotations": {"org.opencontainers.image.created": "1970-01-01T00:00:00Z"},
    }


@dataclass
class FakeRegistry:
    files: dict[str, bytes] = field(default_factory=release_files)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: digest -> what a blob download returns instead of the file.
    served: dict[str, bytes] = field(default_factory=dict)
    #: Raised by the blob download (a registry fault).
    blob_error: Exception | None = None
    fetched: list[str] = field(default_factory=list)
    aborted: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.manifest = self.manifest or manifest_for(self.files)

    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        return self.manifest, digest_of(json.dumps(self.manifest).encode())

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        self.fetched.append(digest)
        if self.blob_error is not None:
            raise self.blob_error
        by_digest = {digest_of(data): data for data in self.files.values()}
        yield self.served.get(digest, by_digest[digest])

    def abort(self) -> None:
        self.aborted.set()


def fetch(tmp_path: Path, registry: FakeRegistry, ref: str = REF, **overrides: Any) -> Any:
    aicr = settings(release_ref=ref, **overrides)
    return fetch_aicr_from_registry(aicr, PackSettings(), tmp_path / "aicr-release", registry)


def test_the_release_comes_from_the_artifact_verified_and_unpacked(tmp_path: Path) -> None:
    registry = FakeRegistry()
    binary = fetch(tmp_path, registry)
    assert binary.path.read_bytes() == BINARY
    assert binary.path.stat().st_mode & 0o111
    assert binary.attestation_path is not None
    assert binary.attestation_path.is_file()
    assert binary.tarball_sha256 == hashlib.sha256(AMD64_TAR).hexdigest()
    assert binary.source_url == f"oci://{REF}#{AMD64}"
    # Only the checksums file and this arch's archive are read; the archive does not stay.
    assert registry.fetched == [digest_of(goreleaser_sums()), digest_of(AMD64_TAR)]
    assert sorted(p.name for p in (tmp_path / "aicr-release").iterdir()) == sorted(
        ["aicr", "aicr-attestation.sigstore.json", SUMS]
    )


def test_the_arm64_archive_is_taken_for_arm64(tmp_path: Path) -> None:
    registry = FakeRegistry()
    binary = fetch(tmp_path, registry, arch="arm64")
    assert binary.tarball_sha256 == hashlib.sha256(ARM64_TAR).hexdigest()


def test_a_pinned_manifest_digest_is_enforced(tmp_path: Path) -> None:
    registry = FakeRegistry()
    good = registry.get_manifest(REF)[1]
    assert fetch(tmp_path / "a", registry, ref=f"{REF.rsplit(':', 1)[0]}@{good}").path.is_file()
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ChecksumError, match=f"does not match the pinned {wrong}") as caught:
        fetch(tmp_path / "b", registry, ref=f"{REF.rsplit(':', 1)[0]}@{wrong}")
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED


def test_a_missing_file_is_a_download_failure_naming_what_the_artifact_holds(tmp_path: Path) -> None:
    files = release_files()
    del files[AMD64]
    with pytest.raises(DownloadError, match=f"has no file {AMD64} \\(it holds {ARM64}, {SUMS}\\)") as caught:
        fetch(tmp_path, FakeRegistry(files=files))
    assert caught.value.exit_code == ExitCode.DOWNLOAD_FAILED
    files = release_files()
    del files[SUMS]
    with pytest.raises(DownloadError, match=f"has no file {SUMS}"):
        fetch(tmp_path, FakeRegistry(files=files))


def test_a_corrupted_blob_fails_closed_and_leaves_nothing(tmp_path: Path) -> None:
    corrupted = bytearray(AMD64_TAR)
    corrupted[100] ^= 0xFF
    registry = FakeRegistry(served={digest_of(AMD64_TAR): bytes(corrupted)})
    with pytest.raises(ChecksumError, match=f"{AMD64} \\({digest_of(AMD64_TAR)}\\): received") as caught:
        fetch(tmp_path, registry)
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not list((tmp_path / "aicr-release").glob("aicr*.tar.gz*"))
    assert not (tmp_path / "aicr-release" / "aicr").exists()


def test_a_blob_longer_than_its_descriptor_is_cut_and_refused(tmp_path: Path) -> None:
    registry = FakeRegistry(served={digest_of(AMD64_TAR): AMD64_TAR + b"more"})
    with pytest.raises(ChecksumError, match="runs past its declared"):
        fetch(tmp_path, registry)


def test_a_checksum_mismatch_fails_as_the_http_path_does(tmp_path: Path) -> None:
    """The artifact's checksums file lists another archive: the blob is its layer, but not the release."""
    other = goreleaser_sums(amd64=b"another archive")
    with pytest.raises(ChecksumError, match="sha256 mismatch: expected") as caught:
        fetch(tmp_path, FakeRegistry(files=release_files(sums=other)))
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not (tmp_path / "aicr-release" / "aicr").exists()


def test_the_reviewed_pin_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ChecksumError, match="does not match the reviewed amd64 pin"):
        fetch(tmp_path, FakeRegistry(), sha256=Sha256Pins(amd64="ab" * 32))
    pinned = Sha256Pins(amd64=hashlib.sha256(AMD64_TAR).hexdigest())
    assert fetch(tmp_path / "ok", FakeRegistry(), sha256=pinned).path.is_file()


def test_an_index_or_a_manifest_without_layers_is_refused(tmp_path: Path) -> None:
    index = {"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
    with pytest.raises(DownloadError, match="an index, not the release artifact"):
        fetch(tmp_path, FakeRegistry(manifest=index))
    with pytest.raises(ChecksumError, match="no list of at most"):
        fetch(tmp_path, FakeRegistry(manifest={"schemaVersion": 2, "layers": "none"}))


def test_two_layers_with_one_title_are_refused(tmp_path: Path) -> None:
    registry = FakeRegistry()
    registry.manifest["layers"].append(layer(AMD64, b"a second one"))
    with pytest.raises(ChecksumError, match=f"two layers are titled '{AMD64}'"):
        fetch(tmp_path, registry)


@pytest.mark.parametrize(
    ("fault", "exit_code"),
    [
        (
            PackNotFoundError(f"aicr release {REF} (registry y): registry y is unreachable after 5 attempt(s)"),
            ExitCode.DOWNLOAD_FAILED,
        ),
        (
            PackAuthError(f"aicr release {REF} (registry y): registry y refused the blob (HTTP 401)"),
            ExitCode.DOWNLOAD_FAILED,
        ),
    ],
)
def test_registry_faults_are_download_failures(tmp_path: Path, fault: Exception, exit_code: ExitCode) -> None:
    with pytest.raises(DownloadError, match=f"^aicr release {re.escape(REF)} \\(registry y\\): registry y") as caught:
        fetch(tmp_path, FakeRegistry(blob_error=fault))
    assert caught.value.exit_code == exit_code


def test_a_cancel_aborts_the_registry_and_stops_the_download(tmp_path: Path) -> None:
    registry = FakeRegistry()
    cancelled = Cancellation()
    cancelled.cancel()
    aicr = settings(release_ref=REF)
    with pytest.raises(DownloadError, match="the download was stopped"):
        fetch_aicr_from_registry(aicr, PackSettings(), tmp_path, registry, cancelled=cancelled)
    assert registry.aborted.is_set()
