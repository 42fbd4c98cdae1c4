"""Pull and verify the data pack (``aicr --data``), fail closed.

The registry sits behind the small ``Registry`` Protocol (manifest + blob), so the
verification here runs the same against oras-py and a test fake:

* the manifest digest is computed from the bytes received and must equal the
  ref's ``@sha256:`` pin when there is one;
* every layer is checked against its descriptor's size and sha256 (oras-py checks
  nothing itself: oras-project/oras-py#247);
* layers are placed the way the Go oras CLI places them: a directory layer
  (``io.deis.oras.content.unpack=true``, or a tar+gzip layer with a title) is
  unpacked by ``archive.safe_extract_all``; any other titled layer becomes the file
  its ``org.opencontainers.image.title`` names;
* the pack must have ``registry.yaml`` at its root.

Failures name the ref and the registry host: 401/403 -> ``PackAuthError``,
missing or unreachable -> ``PackNotFoundError``, anything that does not verify ->
``PackIntegrityError``. The pack is assembled in a staging directory and appears
at ``dest`` only when complete.

``OrasRegistry`` uses oras-py's transport and token flow but reads credentials
only from the runner's credentials file (never ``~/.docker/config.json``,
``$DOCKER_CONFIG``, credential helpers or ``~/.netrc``), and replaces oras-py's
built-in retry (5 attempts, sleeping 2+3**n s, auth failures included) with a
short one that never retries an auth failure. Blob GETs skip requests'
per-request path: they go straight to the same session's urllib3 pool with the
credential oras-py settled on, and whatever that path does not handle (a proxy,
an answer other than 200, 429 or 5xx) goes through oras-py as before.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import http.cookiejar
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urljoin

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions
import urllib3.util
from requests.models import PreparedRequest
from requests.structures import CaseInsensitiveDict
from requests.utils import requote_uri, select_proxy

from aicr_runner import logs
from aicr_runner.errors import (
    ConfigError,
    PackAuthError,
    PackError,
    PackIntegrityError,
    PackNotFoundError,
    RunnerError,
)
from aicr_runner.logs import register_dockerconfig_secrets, register_secret
from aicr_runner.net.archive import safe_extract_all
from aicr_runner.net.deadline import Cancellation, shut_down
from aicr_runner.net.reference import DIGEST, InvalidReference, PackReference
from aicr_runner.net.retry import RETRYABLE_STATUS, BudgetedRetry, RetryNote, Transient, WaitPolicy, parse_retry_after
from aicr_runner.pack._oras_import import oras
from aicr_runner.text import cut

if TYPE_CHECKING:
    from requests.sessions import _Settings as RequestSettings

    from aicr_runner.settings.config import PackSettings

__all__ = [
    "OrasRegistry",
    "PackLayer",
    "PackReference",
    "Placement",
    "PulledPack",
    "Registry",
    "load_registry_credential",
    "pull_pack",
]

ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_UNPACK = "io.deis.oras.content.unpack"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MEDIA_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
TAR_GZIP_MEDIA_TYPES = frozenset(
    {"application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip"}
)
#: Indexes are accepted on the wire only so they can be reported clearly.
ACCEPTED_MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, *sorted(INDEX_MEDIA_TYPES))

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_LAYERS = 256
#: Packs are YAML; these bounds only stop a hostile registry from filling the disk.
MAX_PACK_BLOB_BYTES = 256 * 1024 * 1024
MAX_PACK_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_PACK_MEMBERS = 50_000
#: Blobs fetched at once (the Go oras CLI fetches 3).
MAX_PARALLEL_FETCHES = 4


#: The pack's retry: 1 s, then 2 s, ... (no jitter: a pull runs once per Job).
_BACKOFF_MAX_SECONDS = 30.0
#: Docker Hub's names for itself; its registry API answers on another host.
_DOCKER_HUB_API = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}
_CHUNK_BYTES = 1 << 20

log = logs.get_logger()


def _parse_ref(ref: str) -> PackReference:
    try:
        return PackReference.parse(ref)
    except InvalidReference as exc:
        raise ConfigError([f"AICR_RUNNER_PACK__REF={ref!r}: {exc}"]) from exc


# --- references ---------------------------------------------------------------------


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
    _parse_ref(settings.ref)  # a malformed ref is a ConfigError before anything is opened
    owned: OrasRegistry | None = None
    if registry is None:
        registry = owned = OrasRegistry(settings)
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
    ref = _parse_ref(ref_text)
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
            threading.Thread(target=worker, name=f"pack fetch {index}", daemon=True)
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


# --- credentials -------------------------------------------------------------------------


def _host_aliases(host: str) -> set[str]:
    host = host.lower()
    aliases = {host}
    if host.startswith("localhost"):
        aliases.add(host.replace("localhost", "127.0.0.1", 1))
    elif host.startswith("127.0.0.1"):
        aliases.add(host.replace("127.0.0.1", "localhost", 1))
    docker_hub = {"docker.io", "index.docker.io", "registry-1.docker.io"}
    if host in docker_hub:
        aliases |= docker_hub
    return aliases


def _config_key_host(key: str) -> str:
    """``https://index.docker.io/v1/`` -> ``index.docker.io``; ``host:5000`` stays."""
    key = key.strip()
    if "://" in key:
        key = key.split("://", 1)[1]
    return key.split("/", 1)[0].lower()


def load_registry_credential(path: Path, host: str) -> str:
    """The base64 ``user:password`` for ``host`` from a dockerconfigjson file.

    Only inline ``auth`` or ``username``/``password`` entries count: credential
    helpers are not available in the pod. No usable entry for ``host`` is an error,
    never an anonymous pull.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PackAuthError(f"registry {host}: cannot read the credentials file {path}: {exc.strerror or exc}") from exc
    register_dockerconfig_secrets(raw)
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise PackAuthError(f"registry {host}: credentials file {path} is not valid JSON") from exc
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        raise PackAuthError(f"registry {host}: credentials file {path} has no 'auths' object")
    wanted = _host_aliases(host)
    entry = next((v for k, v in auths.items() if _config_key_host(str(k)) in wanted), None)
    if entry is None:
        known = ", ".join(sorted(_config_key_host(str(k)) for k in auths)) or "none"
        raise PackAuthError(
            f"registry {host}: credentials file {path} has no entry for this registry (entries: {known}); "
            "refusing to pull anonymously"
        )
    return _entry_credential(entry, host, path)


def _entry_credential(entry: Any, host: str, path: Path) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            decoded = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise PackAuthError(f"registry {host}: the 'auth' entry in {path} is not base64") from exc
        if ":" not in decoded:
            raise PackAuthError(f"registry {host}: the 'auth' entry in {path} is not base64 of user:password")
        return str(entry["auth"])
    if isinstance(entry, dict) and entry.get("username") and entry.get("password"):
        encoded = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
        register_secret(encoded)
        return encoded
    raise PackAuthError(
        f"registry {host}: the entry in {path} has neither 'auth' nor 'username'/'password' "
        "(identity tokens and credential helpers are not supported)"
    )


# --- oras-py -------------------------------------------------------------------------------


def route_oras_logging() -> None:
    """Send oras-py's logger through stdlib logging (and so through ``logs``)."""
    for name in ("oras", oras.logger.logger.logger.name):
        stdlib_logger = logging.getLogger(name)
        for handler in list(stdlib_logger.handlers):
            # oras.logger.setup_logger() installs a colouring console handler.
            if isinstance(handler, oras.logger.ColorizingStreamHandler):
                stdlib_logger.removeHandler(handler)
        stdlib_logger.propagate = True


class _KeepRequestAuth(requests.auth.AuthBase):
    """A no-op session auth: its presence stops requests from reading ~/.netrc."""

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        return request


class _SocketWatch:
    """The sockets of one session, so ``abort`` can break any read on them.

    Each socket is registered as a duplicate descriptor: the raw socket as soon
    as TCP connects (a TLS handshake can stall too), the TLS socket once the
    handshake is done. ``shutdown`` acts on the socket, not the descriptor, so
    shutting the duplicate down makes a read blocked on the original return at
    once, in whatever thread it is, whether it waits for a handshake, a status
    line or the next byte of a body. A duplicate lives exactly as long as its
    socket object (a weak-reference finalizer closes it): a response may read on
    after http.client has closed the connection object (``Connection: close``),
    and only this watch ever closes a duplicate, so it is never shut down after
    its descriptor number was reused.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._duplicates: dict[int, socket.socket] = {}
        self._next_key = 0
        self._aborted = False

    def watch(self, sock: socket.socket) -> None:
        # A plain socket on a duplicate descriptor (SSLSocket refuses dup()).
        duplicate = socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))
        with self._lock:
            key = self._next_key
            self._next_key += 1
            self._duplicates[key] = duplicate
            aborted = self._aborted
        weakref.finalize(sock, self._forget, key)
        if aborted:
            shut_down(duplicate)

    def _forget(self, key: int) -> None:
        with self._lock:
            duplicate = self._duplicates.pop(key, None)
        if duplicate is not None:
            duplicate.close()

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            for duplicate in self._duplicates.values():
                shut_down(duplicate)

    def close(self) -> None:
        with self._lock:
            duplicates = list(self._duplicates.values())
            self._duplicates.clear()
        for duplicate in duplicates:
            duplicate.close()


def _watched_pool_classes(watch: _SocketWatch) -> dict[str, type[urllib3.HTTPConnectionPool]]:
    """urllib3 pools whose connections register their sockets with ``watch``."""

    class Watched(urllib3.connection.HTTPConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            watch.watch(sock)
            return sock

    class WatchedTls(urllib3.connection.HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            watch.watch(sock)  # the handshake reads on it
            return sock

        def connect(self) -> None:
            super().connect()
            if isinstance(self.sock, socket.socket):  # not TLS-in-TLS through a proxy
                watch.watch(self.sock)  # the TLS socket that took the descriptor over

    class Pool(urllib3.HTTPConnectionPool):
        ConnectionCls = Watched

    class TlsPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = WatchedTls

    return {"http": Pool, "https": TlsPool}


class _Adapter(requests.adapters.HTTPAdapter):
    """oras-py passes no timeout (a silent registry must not hang the Job), and
    every socket is watched so a cancelled pull can break its reads."""

    def __init__(self, timeout: float, watch: _SocketWatch) -> None:
        self._timeout = timeout
        self._watch = watch
        super().__init__()

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _watched_pool_classes(self._watch)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> urllib3.PoolManager:
        manager: urllib3.PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = _watched_pool_classes(self._watch)
        return manager

    def send(  # noqa: PLR0917 - the signature is HTTPAdapter.send's
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        return super().send(request, stream, timeout or self._timeout, verify, cert, proxies)


class _Session(requests.Session):
    """A session that reads the proxy environment once per host, not on every request.

    requests scans the whole environment (``*_proxy``, ``no_proxy``, the CA bundle
    variables) for each request it sends: with a pod's many variables that is a
    good part of a small blob's cost. The environment does not change during a
    pull, so the answer is kept per scheme and host.
    """

    def __init__(self) -> None:
        super().__init__()
        # As oras-py does: some registries set cookies and then expect a browser.
        self.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self._environment: dict[tuple[str, object, object, object], RequestSettings] = {}

    def merge_environment_settings(
        self,
        url: str | bytes | None,
        proxies: MutableMapping[str, str] | None,
        stream: bool | None,
        verify: bool | str | None,
        cert: str | tuple[str, str] | None,
    ) -> RequestSettings:
        if proxies:  # an explicit per-request setting: nothing to cache
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        where = urllib3.util.parse_url(url.decode() if isinstance(url, bytes) else url or "")
        key = (f"{where.scheme}://{where.netloc}", stream, verify, cert)
        if key not in self._environment:
            self._environment[key] = super().merge_environment_settings(url, proxies, stream, verify, cert)
        return self._environment[key].copy()


class _ChallengeAuth(oras.auth.TokenAuth):  # type: ignore[misc]
    """oras-py's token flow, plus Basic challenges, with no config-file discovery."""

    def __init__(self, basic_credential: str | None) -> None:
        super().__init__()
        if basic_credential:
            # TokenAuth tries an anonymous token only when this attribute is absent.
            self._basic_auth = basic_credential
        #: Set once the registry asked for Basic: later requests send it up front
        #: instead of paying a 401 round trip (and a connection) each.
        self.basic_challenged = False

    def load_configs(self, container: Any, configs: list[str] | None = None) -> None:
        # oras-py would merge ~/.docker/config.json (and run credential helpers);
        # the runner's credentials file is the only source.
        return None

    def preemptive_headers(self) -> dict[str, str]:
        basic = getattr(self, "_basic_auth", None)
        if self.basic_challenged and basic:
            return {"Authorization": f"Basic {basic}"}
        return {}

    def authenticate_request(
        self, original: requests.Response, headers: dict[str, str] | None, refresh: bool = False
    ) -> tuple[dict[str, str], bool]:
        challenge = original.headers.get("Www-Authenticate", "")
        original.close()  # oras-py re-sends without closing it: give its connection back
        if challenge.split(" ", 1)[0].lower() == "basic":
            result = dict(headers or {})
            basic = getattr(self, "_basic_auth", None)
            if basic:
                result["Authorization"] = f"Basic {basic}"
                self.basic_challenged = True
            return result, True
        result, _ = super().authenticate_request(original, headers, refresh)
        # Always re-send: a second 401/403 is then reported by status, instead of
        # oras-py raising a ValueError that its retry loop would retry for minutes.
        return dict(result or {}), True


#: Redirects a blob GET follows before giving up (requests' limit).
_MAX_REDIRECTS = 30
#: A redirect's body up to this size is read so its connection can be kept; a bigger one is closed.
_DRAINED_BODY_BYTES = 64 * 1024
#: The answers a pooled GET hands back; anything else goes through oras-py's request and challenge flow.
_POOLED_STATUS = frozenset({200, *RETRYABLE_STATUS})


#: A pooled GET's way to one origin: the adapter, its pool key (host, TLS) and the verify setting.
_Origin = tuple["_Adapter", Any, Any, bool | str]


class _PooledGets:
    """Blob GETs sent straight on urllib3's pool of the session's adapter.

    requests' path for one request (preparing it, merging settings, finding the
    adapter, building the response, cookies) costs more CPU than a small blob
    takes to arrive. This sends the same GET (the session's headers, the
    adapter's timeout and TLS settings) on the same pool, so on the same
    kept-alive, watched connections, and wraps urllib3's response in a
    ``requests.Response``. Redirects are followed here, without the
    Authorization header when the next URL is another host, port or scheme
    (requests' rule). ``get`` returns None for a URL the proxy environment
    sends through a proxy, and for any answer but 200, 429 or 5xx (its
    connection drained and kept when the body is small): the caller sends the
    request the old way, which handles both.
    """

    def __init__(self, session: _Session, *, verify: bool, timeout_seconds: float) -> None:
        self._session = session
        self._verify = verify
        self._timeout = urllib3.Timeout(connect=timeout_seconds, read=timeout_seconds)
        #: origin -> (adapter, pool key parameters, verify), or None when proxied.
        self._origins: dict[str, _Origin | None] = {}

    def get(self, url: str, auth_headers: Mapping[str, str]) -> requests.Response | None:
        headers = {name: value for name, value in self._session.headers.items() if isinstance(value, str)}
        headers.update(auth_headers)
        strip_auth: Callable[[str, str], bool] = self._session.should_strip_auth
        for _ in range(_MAX_REDIRECTS + 1):
            raw = self._send(url, headers)
            if raw is None:
                return None
            location = raw.get_redirect_location()
            if not location:
                if raw.status in _POOLED_STATUS:
                    return _wrapped(raw, url)
                _let_go(raw)
                return None
            _let_go(raw)
            target = requote_uri(urljoin(url, location))
            if strip_auth(url, target):
                headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
            url = target
        raise requests.TooManyRedirects(f"Exceeded {_MAX_REDIRECTS} redirects.")

    def _send(self, url: str, headers: Mapping[str, str]) -> urllib3.BaseHTTPResponse | None:
        try:
            origin = self._origin(url)
            if origin is None:
                return None
            adapter, host_params, pool_kwargs, verify = origin
            pool = adapter.poolmanager.connection_from_host(**host_params, pool_kwargs=pool_kwargs)
            cert_verify: Callable[..., None] = adapter.cert_verify
            cert_verify(pool, url, verify, None)  # as requests does on every send
            response: urllib3.BaseHTTPResponse = pool.urlopen(
                "GET",
                urllib3.util.parse_url(url).request_uri,
                headers=headers,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
                retries=False,
                timeout=self._timeout,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise _as_requests_error(exc) from exc
        return response

    def _origin(self, url: str) -> _Origin | None:
        where = urllib3.util.parse_url(url)
        key = f"{where.scheme}://{where.netloc}"
        if key not in self._origins:  # the environment does not change during a pull
            settings = self._session.merge_environment_settings(url, {}, True, self._verify, None)
            adapter = self._session.get_adapter(url)
            if select_proxy(url, settings["proxies"]) or not isinstance(adapter, _Adapter):
                self._origins[key] = None
            else:
                request = PreparedRequest()
                request.url = url  # all the pool key is made of
                verify = self._verify if settings["verify"] is None else settings["verify"]
                host_params, pool_kwargs = adapter.build_connection_pool_key_attributes(request, verify)
                self._origins[key] = (adapter, host_params, pool_kwargs, verify)
        return self._origins[key]


def _wrapped(raw: urllib3.BaseHTTPResponse, url: str) -> requests.Response:
    response = requests.Response()
    response.status_code = raw.status
    response.headers = CaseInsensitiveDict(raw.headers)
    response.raw = raw
    response.reason = raw.reason or ""
    response.url = url
    return response


def _let_go(raw: urllib3.BaseHTTPResponse) -> None:
    """Done with an answer whose body is not wanted: keep its connection if the body is small."""
    length = raw.headers.get("Content-Length", "")
    if length.isdigit() and int(length) <= _DRAINED_BODY_BYTES:
        raw.drain_conn()
    else:
        raw.close()
    raw.release_conn()


def _as_requests_error(exc: urllib3.exceptions.HTTPError) -> requests.RequestException:
    """urllib3's error as requests' adapter reports it, so retries and messages stay the same."""
    if isinstance(exc, urllib3.exceptions.SSLError):
        return requests.exceptions.SSLError(exc)
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return requests.ReadTimeout(exc)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return requests.ConnectionError(exc)
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return requests.ConnectTimeout(exc)
    if isinstance(exc, urllib3.exceptions.LocationValueError):
        return requests.exceptions.InvalidURL(exc)
    return requests.ConnectionError(exc)


#: oras-py's do_request without its @retry decorator (2+3**n s sleeps, 5 attempts).
_UNRETRIED_DO_REQUEST: Callable[..., requests.Response] = getattr(
    oras.provider.Registry.do_request, "__wrapped__", oras.provider.Registry.do_request
)


class _OrasProvider(oras.provider.Registry):  # type: ignore[misc]
    def __init__(
        self,
        host: str,
        *,
        plain_http: bool,
        verify_tls: bool,
        basic_credential: str | None,
        attempts: int,
        backoff_seconds: float,
        sleep: Callable[[float], object],
        timeout_seconds: float,
        watch: _SocketWatch,
        aborted: Callable[[], bool],
    ) -> None:
        super().__init__(hostname=host, insecure=plain_http, tls_verify=verify_tls, auth_backend="token")
        self.session = _Session()
        adapter = _Adapter(timeout_seconds, watch)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.auth = _KeepRequestAuth()
        auth = _ChallengeAuth(basic_credential)
        auth.session = self.session
        auth.prefix = self.prefix
        auth._tls_verify = verify_tls
        self.auth = auth
        self._attempts = attempts
        self._backoff_seconds = backoff_seconds
        self._sleep = sleep
        self._aborted = aborted
        self._pooled = _PooledGets(self.session, verify=verify_tls, timeout_seconds=timeout_seconds)

    def do_request(  # noqa: PLR0917 - the signature is oras-py's
        self,
        url: str,
        method: str = "GET",
        data: dict[str, Any] | bytes | None = None,
        headers: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        def send() -> requests.Response:
            return self._unretried(url, method, data, headers, json=json, stream=stream)

        return self._retried(url, send)

    def get_blob(self, url: str) -> requests.Response:
        """A blob GET, retried like ``do_request``: straight on the pool when it can
        be (``_PooledGets``), else, and on any answer but 200, 429 or 5xx (a 401
        that wants a new token, say), through oras-py's request and challenge flow."""

        def send() -> requests.Response:
            auth_headers = dict(self.auth.preemptive_headers())
            if self.auth.token is not None:  # what oras-py's do_request adds
                auth_headers.update(self.auth.get_auth_header())
            pooled = self._pooled.get(url, auth_headers)
            return pooled if pooled is not None else self._unretried(url, "GET", None, {}, json=None, stream=True)

        return self._retried(url, send)

    def _unretried(
        self,
        url: str,
        method: str,
        data: dict[str, Any] | bytes | None,
        headers: dict[str, str] | None,
        *,
        json: dict[str, Any] | None,
        stream: bool,
    ) -> requests.Response:
        headers = {**self.auth.preemptive_headers(), **(headers or {})}
        return _UNRETRIED_DO_REQUEST(self, url, method, data, headers=headers, json=json, stream=stream)

    def _retried(self, url: str, send: Callable[[], requests.Response]) -> requests.Response:
        """``send`` under the shared retry. The last retryable answer is returned
        for the caller to word; the last connection error is raised as requests
        raised it."""

        def attempt() -> requests.Response:
            try:
                response = send()
            except requests.exceptions.SSLError:
                raise  # a certificate problem does not heal by waiting
            except (requests.ConnectionError, requests.Timeout) as exc:
                if self._aborted():  # an abort broke it on purpose: no retry
                    raise
                raise _BrokenOff(f"{type(exc).__name__}: {exc}", exc) from exc
            if response.status_code not in RETRYABLE_STATUS or self._aborted():
                return response
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise _RetryableAnswer(f"HTTP {response.status_code}", response, retry_after)

        retry = BudgetedRetry(
            WaitPolicy(initial=self._backoff_seconds, maximum=_BACKOFF_MAX_SECONDS),
            attempts=self._attempts,
            sleep=self._sleep,
            on_retry=lambda note: self._before_retry(url, note),
        )
        try:
            return retry.call(attempt)
        except _RetryableAnswer as exc:
            return exc.response
        except _BrokenOff as exc:
            raise exc.error from None  # as requests raised it

    def _before_retry(self, url: str, note: RetryNote) -> None:
        log.warning(
            "pack registry retry",
            attempt=note.attempt,
            max_attempts=self._attempts,
            url=url,
            reason=note.reason,
            wait=note.wait,
        )
        if isinstance(note.error, _RetryableAnswer):
            note.error.response.close()  # its connection goes back to the pool before the wait


class _RetryableAnswer(Transient):
    """An answer waiting may change (429, 5xx): the last one is the caller's to word."""

    def __init__(self, reason: str, response: requests.Response, retry_after: float | None) -> None:
        super().__init__(reason, retry_after)
        self.response = response


class _BrokenOff(Transient):
    """A connection error or timeout: the last one is raised as requests raised it."""

    def __init__(self, reason: str, error: requests.RequestException) -> None:
        super().__init__(reason)
        self.error = error


class OrasRegistry:
    """``Registry`` on oras-py for the one registry host of ``settings.ref``.

    One session (so one pool of kept-alive connections) serves the manifest
    and every blob. ``abort`` breaks every request in flight and makes later
    ones fail at once; ``close`` releases the connections.
    """

    def __init__(
        self,
        settings: PackSettings,
        *,
        attempts: int = 3,
        backoff_seconds: float = 1.0,
        sleep: Callable[[float], object] | None = None,
        timeout_seconds: float = 60.0,
    ) -> None:
        self._ref = _parse_ref(settings.ref)
        self._credentials_file = Path(settings.credentials_file) if settings.credentials_file else None
        credential = (
            load_registry_credential(self._credentials_file, self._ref.registry) if self._credentials_file else None
        )
        route_oras_logging()
        self._attempts = attempts
        self._aborted = threading.Event()
        self._watch = _SocketWatch()
        self._provider = _OrasProvider(
            self._ref.registry,
            plain_http=settings.plain_http,
            verify_tls=not settings.insecure_tls,
            basic_credential=credential,
            attempts=attempts,
            backoff_seconds=backoff_seconds,
            # A back-off between retries ends early on abort (the next attempt then fails at once).
            sleep=sleep or self._aborted.wait,
            timeout_seconds=timeout_seconds,
            watch=self._watch,
            aborted=self._aborted.is_set,
        )
        self._scheme = "http" if settings.plain_http else "https"
        self._api_host = _DOCKER_HUB_API.get(self._ref.registry.lower(), self._ref.registry)

    def abort(self) -> None:
        self._aborted.set()
        self._watch.abort()

    def close(self) -> None:
        self._provider.session.close()
        self._watch.close()

    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        parsed = self._same_registry(ref)
        url = f"{self._scheme}://{self._api_host}/v2/{parsed.repository}/manifests/{parsed.reference}"
        accept = {"Accept": ", ".join(ACCEPTED_MANIFEST_TYPES)}
        with self._get(
            url, ref, "manifest", lambda: self._provider.do_request(url, "GET", headers=accept, stream=True)
        ) as response:
            raw = self._read_capped(response, ref, "manifest", MAX_MANIFEST_BYTES)
        where = self._where(ref)
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise PackIntegrityError(f"{where}: the manifest is not JSON") from exc
        if not isinstance(manifest, dict):
            raise PackIntegrityError(f"{where}: the manifest is not a JSON object")
        return manifest, "sha256:" + hashlib.sha256(raw).hexdigest()

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        parsed = self._same_registry(ref)
        url = f"{self._scheme}://{self._api_host}/v2/{parsed.repository}/blobs/{digest}"
        with self._get(url, ref, f"blob {digest}", lambda: self._provider.get_blob(url)) as response:
            yield from self._body(response, ref, f"blob {digest}", size)

    # -- helpers --

    def _where(self, ref: str) -> str:
        return f"pack {ref} (registry {self._ref.registry})"

    def _same_registry(self, ref: str) -> PackReference:
        parsed = _parse_ref(ref)
        if parsed.registry != self._ref.registry:
            raise ValueError(f"this OrasRegistry serves {self._ref.registry}, not {parsed.registry}")
        return parsed

    def _credential_note(self) -> str:
        if self._credentials_file is None:
            return "no credential was given (set AICR_RUNNER_PACK__CREDENTIALS_FILE for a private pack)"
        return f"the credential from {self._credentials_file} was rejected"

    def _stopped(self, ref: str, what: str) -> PackError:
        return PackError(f"{self._where(ref)}: the {what} request to registry {self._ref.registry} was stopped")

    def _get(self, url: str, ref: str, what: str, send: Callable[[], requests.Response]) -> requests.Response:
        where = self._where(ref)
        host = self._ref.registry
        if self._aborted.is_set():
            raise self._stopped(ref, what)
        try:
            response = send()
        except requests.exceptions.SSLError as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise PackNotFoundError(
                f"{where}: TLS failure talking to registry {host} ({_short(exc)}); not retried. A plain-HTTP "
                "registry needs AICR_RUNNER_PACK__PLAIN_HTTP=true; a private CA must be trusted by the image "
                "(AICR_RUNNER_PACK__INSECURE_TLS=true skips verification, for lab registries only)"
            ) from exc
        except requests.RequestException as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            if isinstance(exc, requests.ConnectionError):
                raise PackNotFoundError(
                    f"{where}: registry {host} is unreachable after {self._attempts} attempt(s) ({_short(exc)})"
                ) from exc
            if isinstance(exc, requests.Timeout):
                raise PackNotFoundError(
                    f"{where}: registry {host} timed out after {self._attempts} attempt(s) ({_short(exc)})"
                ) from exc
            raise PackError(f"{where}: request to registry {host} failed ({_short(exc)})") from exc
        status = response.status_code
        if status == 200:
            return response
        code = _registry_error_code(response)
        response.close()
        detail = f"HTTP {status}{f' {code}' if code else ''}"
        if status in (401, 403):
            raise PackAuthError(f"{where}: registry {host} refused the {what} ({detail}); {self._credential_note()}")
        if status == 404:
            raise PackNotFoundError(f"{where}: {what} not found on registry {host} ({detail})")
        raise PackError(f"{where}: registry {host} answered {detail} for the {what}")

    def _body(self, response: requests.Response, ref: str, what: str, limit: int) -> Iterator[bytes]:
        """The body in reads of at most one byte past what is left of ``limit``: a
        body that runs on is cut there by the caller, not a whole chunk later."""
        remaining = limit + 1
        try:
            while remaining > 0:
                chunk = response.raw.read(min(_CHUNK_BYTES, remaining), decode_content=True)
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise PackNotFoundError(
                f"{self._where(ref)}: the {what} download from registry {self._ref.registry} broke off ({_short(exc)})"
            ) from exc

    def _read_capped(self, response: requests.Response, ref: str, what: str, limit: int) -> bytes:
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > limit:
            raise PackIntegrityError(f"{self._where(ref)}: the {what} is {announced} bytes, over the limit of {limit}")
        buffer = bytearray()
        for chunk in self._body(response, ref, what, limit):
            buffer += chunk
            if len(buffer) > limit:
                raise PackIntegrityError(f"{self._where(ref)}: the {what} exceeds {limit} bytes")
        return bytes(buffer)


def _registry_error_code(response: requests.Response) -> str:
    """The distribution error code (MANIFEST_UNKNOWN, UNAUTHORIZED, ...) if the body has one."""
    try:
        body = next(response.iter_content(64 * 1024), b"")
        errors = json.loads(body).get("errors") or []
        return str(errors[0].get("code", "")) if errors else ""
    except (ValueError, AttributeError, TypeError, IndexError, requests.RequestException):
        return ""


_ROOT_CAUSE = re.compile(r"\[SSL: [A-Z_]+\][^(]*|\[Errno -?\d+\][^'\")]*|timed out|Read timed out")


def _short(exc: BaseException) -> str:
    """The useful part of a requests/urllib3 error (they nest "Max retries exceeded" wrappers)."""
    text = str(exc)
    match = _ROOT_CAUSE.search(text)
    if match:
        return match.group(0).strip()
    return cut(text, 300)
