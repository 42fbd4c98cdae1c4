"""Pull and verify the data pack (``aicr --data``), fail closed.

The registry sits behind the small ``Registry`` Protocol (manifest + blob), so the
verification here runs the same against the registry client and a test fake:

* the manifest digest is computed from the bytes received and must equal the
  ref's ``@sha256:`` pin when there is one;
* every layer is checked against its descriptor's size and sha256 as it streams in;
* layers are placed the way the Go oras CLI places them: a directory layer
  (``io.deis.oras.content.unpack=true``, or a tar+gzip layer with a title) is
  unpacked by ``archive.safe_extract_all``; any other titled layer becomes the file
  its ``org.opencontainers.image.title`` names;
* the pack must have ``registry.yaml`` at its root.

Failures name the ref and the registry host: 401/403 -> ``PackAuthError``,
missing or unreachable -> ``PackNotFoundError``, anything that does not verify ->
``PackIntegrityError``. The pack is assembled in a staging directory and appears
at ``dest`` only when complete.

The registry client is ``pack.registry``; the vocabulary and limits are
``pack.oci``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from aicr_runner import logs
from aicr_runner.errors import PackError, PackIntegrityError, RunnerError
from aicr_runner.net.archive import safe_extract_all
from aicr_runner.net.deadline import Cancellation, thread_in_context
from aicr_runner.net.reference import DIGEST
from aicr_runner.pack.oci import (
    ANNOTATION_TITLE,
    ANNOTATION_UNPACK,
    DOCKER_MANIFEST,
    INDEX_MEDIA_TYPES,
    MAX_LAYERS,
    MAX_PACK_BLOB_BYTES,
    MAX_PACK_MEMBERS,
    MAX_PACK_UNPACKED_BYTES,
    MAX_PARALLEL_FETCHES,
    OCI_MANIFEST,
    TAR_GZIP_MEDIA_TYPES,
    parse_ref,
)
from aicr_runner.pack.registry import RegistryClient

if TYPE_CHECKING:
    from aicr_runner.settings.config import PackSettings

__all__ = [
    "PackLayer",
    "Placement",
    "PulledPack",
    "Registry",
    "pull_pack",
]

log = logs.get_logger()


# --- the registry interface ------------------------------------------------------------


class Registry(Protocol):
    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        """The manifest and the sha256 digest of the bytes it came in."""
        ...

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        """The blob's bytes as they arrive, unverified: ``pull_pack`` hashes them and
        cuts the stream past ``size`` (the declared size), so a read should ask for
        no more than ``size + 1`` bytes. Closing the iterator ends the request."""
        ...

    def abort(self) -> None:
        """Break every request in flight (a blocked read returns at once) and fail later ones."""
        ...


class Placement(StrEnum):
    DIRECTORY = "directory"
    FILE = "file"
    #: A layer without a title: the Go oras CLI skips those on pull, and so do we.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class PackLayer:
    """One manifest layer and how it was placed (a docstring also spares dataclass an inspect.signature at import)."""

    digest: str
    size: int
    media_type: str
    title: str
    placement: Placement


@dataclass(frozen=True)
class PulledPack:
    """The pulled pack: where it is and what it was pulled from."""

    path: Path
    ref: str
    manifest_digest: str
    layers: tuple[PackLayer, ...]


# --- pulling -------------------------------------------------------------------------------


def pull_pack(
    settings: PackSettings,
    dest: Path,
    registry: Registry | None = None,
    *,
    cancelled: Cancellation | None = None,
) -> PulledPack:
    """Pull ``settings.ref`` into ``dest`` (absent or empty), verifying everything.

    ``cancelled`` (``deadline.bounded``'s, for the pull budget and SIGTERM)
    aborts the registry's requests in flight and stops every fetch worker; the
    staging directory is removed before this returns.
    """
    if not settings.ref:
        raise ValueError("pull_pack needs a pack reference")
    parse_ref(settings.ref)  # a malformed ref is a ConfigError before anything is opened
    owned: RegistryClient | None = None
    if registry is None:
        registry = owned = RegistryClient(settings)
    # The pull's own stop: set by the caller's cancellation or by the first
    # failing fetch; either way every request in flight is broken off.
    stop = Cancellation()
    stop.on_cancel(registry.abort)
    forget = cancelled.on_cancel(stop.cancel) if cancelled is not None else (lambda: None)
    try:
        return _pull(registry, settings.ref, dest, stop)
    finally:
        forget()
        if owned is not None:
            owned.close()


def _pull(registry: Registry, ref_text: str, dest: Path, stop: Cancellation) -> PulledPack:
    ref = parse_ref(ref_text)
    where = f"pack {ref_text} (registry {ref.registry})"
    manifest, manifest_digest = registry.get_manifest(ref_text)
    if ref.digest and manifest_digest != ref.digest:
        raise PackIntegrityError(f"{where}: manifest digest {manifest_digest} does not match the pinned {ref.digest}")
    layers = _layers(manifest, where)

    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise RunnerError(f"{where}: destination {dest} exists and is not an empty directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        assembler = _Assembler(registry, ref_text, where, staging, stop)
        assembler.prefetch(layers)
        placed = tuple(assembler.place(layer) for layer in layers)
        _require_registry_yaml(assembler.content, ref_text, ref.registry)
        _publish(assembler.content, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    log.info(
        "pack pulled",
        ref=ref_text,
        manifest_digest=manifest_digest,
        layers=len(placed),
        pinned=ref.digest is not None,
    )
    return PulledPack(path=dest, ref=ref_text, manifest_digest=manifest_digest, layers=placed)


@dataclass(frozen=True)
class _Descriptor:
    """A manifest layer descriptor, checked."""

    digest: str
    size: int
    media_type: str
    annotations: Mapping[str, str]


def _layers(manifest: Mapping[str, Any], where: str) -> list[_Descriptor]:
    media_type = manifest.get("mediaType")
    if media_type in INDEX_MEDIA_TYPES or "manifests" in manifest:
        raise PackIntegrityError(
            f"{where} is an image index, not a single artifact; push the pack with `oras push` "
            "or reference one of its manifests by digest"
        )
    if manifest.get("schemaVersion") != 2 or media_type not in (None, OCI_MANIFEST, DOCKER_MANIFEST):
        raise PackIntegrityError(f"{where}: unsupported manifest (mediaType {media_type!r})")
    raw_layers = manifest.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise PackIntegrityError(f"{where}: the manifest lists no layers")
    if len(raw_layers) > MAX_LAYERS:
        raise PackIntegrityError(f"{where}: {len(raw_layers)} layers, over the limit of {MAX_LAYERS}")
    layers: list[_Descriptor] = []
    for index, raw in enumerate(raw_layers):
        if not isinstance(raw, dict):
            raise PackIntegrityError(f"{where}: layer {index} is not a descriptor")
        digest, size, layer_type = raw.get("digest"), raw.get("size"), raw.get("mediaType")
        annotations = raw.get("annotations") or {}
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise PackIntegrityError(f"{where}: layer {index} digest {digest!r} is not sha256:<64 hex>")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise PackIntegrityError(f"{where}: layer {index} size {size!r} is not a byte count")
        if not isinstance(layer_type, str) or not isinstance(annotations, dict):
            raise PackIntegrityError(f"{where}: layer {index} has a malformed mediaType or annotations")
        layers.append(_Descriptor(digest, size, layer_type, {str(k): str(v) for k, v in annotations.items()}))
    total = sum(layer.size for layer in layers)
    if total > MAX_PACK_BLOB_BYTES:
        raise PackIntegrityError(f"{where}: layers total {total} bytes, over the limit of {MAX_PACK_BLOB_BYTES}")
    return layers


class _Assembler:
    """Fetches, verifies and places layers into ``staging/pack``."""

    def __init__(self, registry: Registry, ref: str, where: str, staging: Path, stop: Cancellation) -> None:
        self._registry = registry
        self._ref = ref
        self._where = where
        self._stop = stop
        self._blobs = staging / "blobs"
        self._blobs.mkdir()
        self.content = staging / "pack"
        self.content.mkdir()

    def _placement(self, layer: _Descriptor) -> tuple[str, bool, bool, PurePosixPath | None]:
        """title, unpack, is_directory, safe relative path; raises on a hostile title."""
        title = layer.annotations.get(ANNOTATION_TITLE, "")
        unpack = layer.annotations.get(ANNOTATION_UNPACK, "").lower() == "true"
        is_directory = unpack or (layer.media_type in TAR_GZIP_MEDIA_TYPES and bool(title))
        relative = _safe_title(title, self._where) if title else None
        return title, unpack, is_directory, relative

    def prefetch(self, layers: list[_Descriptor]) -> None:
        """Fetch and verify every blob that will be placed, a few at a time.

        Every title is checked first: a hostile one fails before anything is
        fetched. Each blob is verified as it streams in. The first failure stops
        the pull (the other workers' requests are broken off, no new fetch
        starts) and is raised once the workers have ended.

        The workers are daemon threads, not an executor's: the interpreter
        joins an executor's workers at exit, so one blocked read could hold the
        process past its budget and past SIGTERM.
        """
        wanted: dict[str, tuple[_Descriptor, str]] = {}
        for layer in layers:
            title, _, is_directory, relative = self._placement(layer)
            if is_directory or relative is not None:
                wanted.setdefault(layer.digest, (layer, title))
        if len(wanted) < 2:
            return
        jobs = iter(list(wanted.values()))
        lock = threading.Lock()
        failures: list[BaseException] = []

        def worker() -> None:
            while not self._stop():
                with lock:
                    job = next(jobs, None)
                if job is None:
                    return
                try:
                    self._verified_blob(*job)
                except BaseException as exc:  # noqa: BLE001 - raised by the pulling thread
                    with lock:
                        failures.append(exc)
                    self._stop.cancel()
                    return

        workers = [
            # Each in a copy of the pulling step's context: the fetchers' events carry its step.
            thread_in_context(worker, name=f"pack fetch {index}")
            for index in range(min(MAX_PARALLEL_FETCHES, len(wanted)))
        ]
        for thread in workers:
            thread.start()
        _join(workers, self._stop)
        if failures:
            raise failures[0]
        self._raise_if_stopped("the pull")

    def place(self, layer: _Descriptor) -> PackLayer:
        title, unpack, is_directory, relative = self._placement(layer)
        if not is_directory and relative is None:
            log.warning("pack layer without a title skipped", ref=self._ref, digest=layer.digest)
            return PackLayer(layer.digest, layer.size, layer.media_type, "", Placement.SKIPPED)
        blob = self._verified_blob(layer, title)
        if not is_directory and relative is not None:
            _place_file(blob, self.content, relative, self._where)
            return PackLayer(layer.digest, layer.size, layer.media_type, title, Placement.FILE)
        safe_extract_all(
            blob,
            self.content,
            max_total_bytes=MAX_PACK_UNPACKED_BYTES - _unpacked_bytes(self.content),
            max_members=MAX_PACK_MEMBERS,
            # The Go oras CLI tars a pushed directory under its own name and refuses
            # members outside it on pull; so do we.
            root=relative.as_posix() if unpack and relative else None,
            error_type=PackIntegrityError,
            label=f"{self._where}: {_layer_name(layer.digest, title)}",
        )
        return PackLayer(layer.digest, layer.size, layer.media_type, title, Placement.DIRECTORY)

    def _raise_if_stopped(self, what: str) -> None:
        if self._stop():
            raise PackError(f"{self._where}: {what} was stopped")

    def _verified_blob(self, layer: _Descriptor, title: str) -> Path:
        """The blob, fetched once: hashed as it streams, cut off past its declared size."""
        blob = self._blobs / layer.digest.removeprefix("sha256:")
        if blob.exists():  # the same content under two titles: fetched and verified once
            return blob
        name = _layer_name(layer.digest, title)
        self._raise_if_stopped(f"the fetch of {name}")
        partial = blob.with_suffix(".partial")
        hasher = hashlib.sha256()
        received = 0
        with (
            partial.open("wb") as out,
            contextlib.closing(self._registry.blob_chunks(self._ref, layer.digest, layer.size)) as chunks,
        ):
            for chunk in chunks:
                self._raise_if_stopped(f"the fetch of {name}")
                received += len(chunk)
                if received > layer.size:
                    raise PackIntegrityError(
                        f"{self._where}: {name} runs past the {layer.size} bytes the manifest declares; "
                        f"cut off at {received} bytes"
                    )
                hasher.update(chunk)
                out.write(chunk)
        if received != layer.size:
            raise PackIntegrityError(f"{self._where}: {name} is {received} bytes, the manifest says {layer.size}")
        actual = "sha256:" + hasher.hexdigest()
        if actual != layer.digest:
            raise PackIntegrityError(f"{self._where}: {name} digest mismatch: expected {layer.digest}, got {actual}")
        partial.replace(blob)
        return blob


#: After a stop, how long the pulling thread waits for its fetch workers: one
#: blocked in a TCP connect or DNS lookup (which no socket shutdown reaches)
#: is left to its timeout; it is a daemon and holds nothing the pull needs.
_STOPPED_WORKERS_GRACE_SECONDS = 1.0


def _join(workers: list[threading.Thread], stop: Cancellation) -> None:
    stopped_at: float | None = None
    for thread in workers:
        while thread.is_alive():
            thread.join(0.05)
            if stop():
                stopped_at = stopped_at or time.monotonic()
                if time.monotonic() - stopped_at > _STOPPED_WORKERS_GRACE_SECONDS:
                    return


def _layer_name(digest: str, title: str) -> str:
    """How messages name a layer: by its title, which the user pushed, when it has one."""
    return f"layer {title!r} ({digest})" if title else f"layer {digest}"


def _safe_title(title: str, where: str) -> PurePosixPath:
    """A layer title as a relative path that stays inside the pack."""
    parts = [part for part in PurePosixPath(title).parts if part not in ("", ".")]
    if not parts or title.startswith("/") or "\\" in title or "\x00" in title or ".." in parts:
        raise PackIntegrityError(f"{where}: layer title {title!r} is not a safe relative path")
    return PurePosixPath(*parts)


def _place_file(blob: Path, content: Path, relative: PurePosixPath, where: str) -> None:
    target = content.joinpath(*relative.parts)
    # No link can exist under content (extraction refuses links), but an earlier
    # layer may have put a file where this path needs a directory, or vice versa.
    for parent in reversed(target.relative_to(content).parents):
        node = content / parent
        if node.is_symlink() or (node.exists() and not node.is_dir()):
            raise PackIntegrityError(f"{where}: layer {relative} conflicts with {parent} from another layer")
    if target.exists() or target.is_symlink():
        raise PackIntegrityError(f"{where}: two layers both provide {relative}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # The verified blob becomes the file (one directory tree, so a hard link);
    # a blob placed under a second title is copied, so no two pack files share an inode.
    if blob.stat().st_nlink > 1:
        shutil.copyfile(blob, target)
    else:
        try:
            os.link(blob, target)
        except OSError:
            shutil.copyfile(blob, target)
    target.chmod(0o644)


def _require_registry_yaml(content: Path, ref: str, host: str) -> None:
    registry_yaml = content / "registry.yaml"
    if registry_yaml.is_file() and not registry_yaml.is_symlink():
        return
    nested = sorted(str(p.relative_to(content)) for p in content.glob("*/registry.yaml"))
    hint = (
        f"; found {nested[0]} instead: push from inside the pack directory, e.g. "
        "`oras push <ref> registry.yaml overlays/`"
        if nested
        else ""
    )
    raise PackIntegrityError(
        f"pack {ref} has no registry.yaml; aicr requires it even as a stub (registry {host}){hint}"
    )


def _publish(content: Path, dest: Path) -> None:
    if not dest.exists():
        content.replace(dest)
        return
    # dest is an empty directory (possibly a mount point): move entries into it.
    for entry in content.iterdir():
        shutil.move(str(entry), dest / entry.name)


def _unpacked_bytes(content: Path) -> int:
    return sum(path.stat().st_size for path in content.rglob("*") if path.is_file())
