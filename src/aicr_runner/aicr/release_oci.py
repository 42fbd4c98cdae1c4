"""The aicr release from a registry (``aicr.releaseRef``), verified as the HTTP download is.

``aicr-runner mirror --to`` pushes the pinned release as one OCI artifact
(``mirror.release_artifact``): a layer per file, each titled with its file name
(``org.opencontainers.image.title``): the linux archive of each architecture and
``aicr_checksums.txt``. Here that artifact is read through the data pack's
registry client (``pack.registry``: its timeouts, retries, credentials file,
plain-HTTP and TLS settings, an abort that breaks any read), layers found by
their title only, so an artifact pushed by hand with ``oras push`` works too.

Fail closed, with the HTTP path's exit codes: a missing file or an unreachable
registry is a ``DownloadError`` (20); a blob that is not its descriptor's
size and digest, a manifest that is not the ref's ``@sha256:`` pin, and then
exactly the HTTP path's checks (the archive's sha256 against its one line of
the checksums file and the reviewed pin) are a ``ChecksumError`` (21). The
archive is unpacked as the HTTP path unpacks it (``release.install_verified``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aicr_runner.aicr.release import (
    CHECKSUMS_NAME,
    MAX_ARCHIVE_BYTES,
    MAX_CHECKSUMS_BYTES,
    archive_name,
    expected_sha256,
    install_verified,
)
from aicr_runner.errors import ChecksumError, DownloadError, PackError, PackIntegrityError
from aicr_runner.net.deadline import Cancellation
from aicr_runner.net.reference import DIGEST
from aicr_runner.pack.oci import ANNOTATION_TITLE, INDEX_MEDIA_TYPES, MAX_LAYERS, parse_ref
from aicr_runner.pack.registry import AICR_RELEASE, RegistryClient

if TYPE_CHECKING:
    from aicr_runner.aicr.binary import AicrBinary
    from aicr_runner.pack.pull import Registry
    from aicr_runner.settings.config import AicrSettings, PackSettings

__all__ = ["ARCHIVE_MEDIA_TYPE", "ARTIFACT_TYPE", "CHECKSUMS_MEDIA_TYPE", "fetch_aicr_from_registry", "source_of"]

#: What ``mirror`` pushes; the fetch reads layers by title and does not require these.
ARTIFACT_TYPE = "application/vnd.aicr-runner.aicr-release.v1"
ARCHIVE_MEDIA_TYPE = "application/vnd.aicr-runner.aicr-release.archive.v1.tar+gzip"
CHECKSUMS_MEDIA_TYPE = "application/vnd.aicr-runner.aicr-release.checksums.v1+text"


def source_of(ref: str, name: str) -> str:
    """How the run report names a file of the artifact: ``oci://<ref>#<file>``."""
    return f"oci://{ref}#{name}"


def fetch_aicr_from_registry(
    settings: AicrSettings,
    transport: PackSettings,
    dest_dir: Path,
    registry: Registry | None = None,
    *,
    cancelled: Cancellation | None = None,
) -> AicrBinary:
    """The release artifact ``settings.release_ref`` verified and unpacked into ``dest_dir``.

    ``transport``: the pack's registry settings (credentials file, plain HTTP,
    TLS), used with the release's ref. ``cancelled`` (the download budget or a
    shutdown) aborts every request in flight.
    """
    ref = settings.release_ref
    owned: RegistryClient | None = None
    if registry is None:
        registry = owned = RegistryClient(
            transport.model_copy(update={"ref": ref}),
            attempts=settings.download_attempts,
            timeout_seconds=settings.download_timeout_seconds,
            subject=AICR_RELEASE,
        )
    cancelled = cancelled or Cancellation()
    forget = cancelled.on_cancel(registry.abort)
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = archive_name(settings)
    try:
        archive_path, actual, expected = _download(registry, ref, name, dest_dir, cancelled)
    except PackIntegrityError as exc:  # the registry client names the release itself (AICR_RELEASE)
        raise ChecksumError(exc.message) from exc
    except PackError as exc:
        raise DownloadError(exc.message) from exc
    finally:
        forget()
        if owned is not None:
            owned.close()
    return install_verified(
        settings,
        archive_path,
        actual=actual,
        expected=expected,
        source=source_of(ref, name),
        checksums_source=source_of(ref, CHECKSUMS_NAME),
    )


def _download(
    registry: Registry, ref: str, name: str, dest_dir: Path, cancelled: Cancellation
) -> tuple[Path, str, str]:
    """The checksums file, then the archive: the archive's path, its sha256, and the
    sha256 the checksums file lists for it."""
    layers = _layers_by_title(registry, ref)
    checksums_path = dest_dir / CHECKSUMS_NAME
    _blob_to_file(
        registry,
        ref,
        _layer(layers, CHECKSUMS_NAME, ref),
        checksums_path,
        max_bytes=MAX_CHECKSUMS_BYTES,
        cancelled=cancelled,
    )
    checksums_source = source_of(ref, CHECKSUMS_NAME)
    expected = expected_sha256(checksums_path.read_text(errors="replace"), name, checksums_source)
    archive_path = dest_dir / name
    actual = _blob_to_file(
        registry, ref, _layer(layers, name, ref), archive_path, max_bytes=MAX_ARCHIVE_BYTES, cancelled=cancelled
    )
    return archive_path, actual, expected


def _layers_by_title(registry: Registry, ref: str) -> dict[str, Mapping[str, Any]]:
    manifest, digest = registry.get_manifest(ref)
    pinned = parse_ref(ref).digest
    if pinned and digest != pinned:
        raise ChecksumError(f"aicr release {ref}: manifest digest {digest} does not match the pinned {pinned}")
    if manifest.get("mediaType") in INDEX_MEDIA_TYPES or "manifests" in manifest:
        raise DownloadError(f"aicr release {ref}: an index, not the release artifact `aicr-runner mirror` pushes")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) > MAX_LAYERS:
        raise ChecksumError(f"aicr release {ref}: the manifest has no list of at most {MAX_LAYERS} layers")
    found: dict[str, Mapping[str, Any]] = {}
    for layer in layers:
        title = (layer.get("annotations") or {}).get(ANNOTATION_TITLE) if isinstance(layer, dict) else None
        if isinstance(title, str) and title:
            if title in found:
                raise ChecksumError(f"aicr release {ref}: two layers are titled {title!r}")
            found[title] = layer
    return found


def _layer(layers: Mapping[str, Mapping[str, Any]], name: str, ref: str) -> tuple[str, int]:
    """The digest and size of the layer titled ``name``."""
    layer = layers.get(name)
    if layer is None:
        held = ", ".join(sorted(layers)) or "no titled layer"
        raise DownloadError(f"aicr release {ref} has no file {name} (it holds {held}); mirror this release again")
    digest, size = layer.get("digest"), layer.get("size")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest) or not isinstance(size, int) or size < 0:
        raise ChecksumError(f"aicr release {ref}: the layer of {name} has no sha256 digest and size")
    return digest, size


def _blob_to_file(
    registry: Registry, ref: str, layer: tuple[str, int], dest: Path, *, max_bytes: int, cancelled: Cancellation
) -> str:
    """The blob streamed to ``dest``, checked against its descriptor; its sha256 (hex).
    Nothing is left at ``dest`` unless it is the layer."""
    digest, size = layer
    where = f"aicr release {ref}: {dest.name} ({digest})"
    if size > max_bytes:
        raise ChecksumError(f"{where} is {size} bytes, over the limit of {max_bytes}")
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with partial.open("wb") as out:
            received, hex_digest = _stream(registry.blob_chunks(ref, digest, size), out, size, where, cancelled)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if received != size or f"sha256:{hex_digest}" != digest:
        partial.unlink(missing_ok=True)
        raise ChecksumError(f"{where}: received {received} bytes with sha256:{hex_digest}; not the layer")
    partial.replace(dest)
    return hex_digest


def _stream(chunks: Iterator[bytes], out: IO[bytes], size: int, where: str, cancelled: Cancellation) -> tuple[int, str]:
    """What arrived: its length and sha256 (hex), cut one byte past ``size``."""
    hasher, received = hashlib.sha256(), 0
    for chunk in chunks:
        if cancelled():
            raise DownloadError(f"{where}: the download was stopped ({received} bytes received)")
        received += len(chunk)
        if received > size:
            raise ChecksumError(f"{where} runs past its declared {size} bytes")
        hasher.update(chunk)
        out.write(chunk)
    return received, hasher.hexdigest()
