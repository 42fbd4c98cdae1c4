"""The digests of ``mirror --to``, read in the runner's process: only an item whose
target digest differs from its source's costs an oras process (the copy).

A registry reference is resolved by ``HEAD`` of its manifest (the registry's
``Docker-Content-Digest``; a registry that sends none has the manifest fetched and
hashed), a chart's manifest is fetched, both by ``pack.registry``'s client (token
auth, retries, every socket breakable). An ``oci-layout:DIR:TAG`` reference (an
archive's) is read from the layout's ``index.json``, no HTTP.

What oras would use is used: the docker config (``--registry-config``, else
``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``), the ``--plain-http``
hosts, the ``--resolve`` rules (the name kept for TLS), the system's CA store or
``SSL_CERT_FILE``. A registry whose credential only a credential helper
(``credsStore``, ``credHelpers``) or an identity token holds, or a reference the
registry client cannot parse, is not read here: ``serves`` says so, and the copier
asks oras, as it did for every read before.

Each read ends by its deadline and at once on SIGTERM (``net.deadline.bounded``:
the host's requests in flight are broken off). A registry's answer is translated by
its fields, once, here: 404 is "not there", a refusal (401/403, a refused token)
``AUTH_REFUSED``, anything else the side's unavailability.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aicr_runner.errors import InterruptedRun, PackAuthError, PackError
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.tool_call import RESUME

if TYPE_CHECKING:
    import httpx

    from aicr_runner.net.deadline import Cancellation
    from aicr_runner.pack.registry import RegistryClient

__all__ = ["LAYOUT", "DigestReads", "resolve_rules"]

#: A reference into an OCI image layout directory: ``oci-layout:DIR:TAG`` (oras' ``--oci-layout``).
LAYOUT = "oci-layout:"
_REF_NAME = "org.opencontainers.image.ref.name"
#: A read's socket operations each end by this (the read as a whole by the copier's deadline).
_SOCKET_SECONDS = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class _Reach:
    """``pack.registry.Reach`` of one registry host."""

    ref: str
    credentials_file: str
    plain_http: bool
    insecure_tls: bool = False


def resolve_rules(rules: Sequence[str]) -> dict[str, dict[int, tuple[str, int]]]:
    """oras' ``--resolve HOST:PORT:ADDRESS[:PORT]`` rules (checked by ``mirror.arguments``),
    as ``net.http.client`` takes them: host -> {port: (address, port)}."""
    mapped: dict[str, dict[int, tuple[str, int]]] = {}
    for rule in rules:
        host, port, address, *to = rule.split(":")
        mapped.setdefault(host.lower(), {})[int(port)] = (address, int(to[0]) if to else int(port))
    return mapped


class _Opened:
    """What the reads opened: one HTTP client for every registry, a registry client per host."""

    def __init__(self) -> None:
        self.http: httpx.Client | None = None
        self.clients: dict[str, RegistryClient] = {}

    def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        http, self.http = self.http, None
        for client in clients:
            client.close()
        if http is not None:
            http.close()


class DigestReads:
    """The in-process reads of ``OrasCopier``: ``digest`` and ``manifest`` of a
    reference ``serves`` says it reads. Nothing is opened before the first read;
    what was is closed by ``close``, or when the reads are dropped unclosed."""

    def __init__(
        self,
        *,
        registry_config: Path | None,
        plain_http: frozenset[str],
        resolve: Sequence[str],
        timeout_seconds: float,
        interrupted: Callable[[], bool],
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self._config_path = registry_config or _docker_config(environ)
        self._plain_http = plain_http
        self._resolve = resolve_rules(resolve)
        self._timeout = timeout_seconds
        self._interrupted = interrupted
        self._lock = threading.RLock()  # a client is made under it, reading the config under it
        self._config: dict[str, Any] | None = None
        self._opened = _Opened()
        self._close = weakref.finalize(self, self._opened.close)

    def serves(self, reference: str) -> bool:
        """Whether this reads ``reference``: a layout's, or a registry's whose credential is inline or none."""
        from aicr_runner.net.reference import InvalidReference, PackReference

        if reference.startswith(LAYOUT):
            return True
        try:
            host = PackReference.parse(reference).registry
        except InvalidReference:
            return False
        return self._credentials_file(host) is not None

    def digest(self, reference: str, *, source_side: bool) -> str | None:
        """The manifest digest ``reference`` resolves to; None when it is not there."""
        if reference.startswith(LAYOUT):
            found = self._layout_descriptor(reference, _layout_directory(reference), source_side)
            return None if found is None else str(found["digest"])
        return self._read(reference, source_side, lambda client: client.manifest_digest(reference))

    def manifest(self, reference: str, *, source_side: bool) -> dict[str, Any] | None:
        """The manifest ``reference`` resolves to; None when it is not there."""
        if reference.startswith(LAYOUT):
            directory = _layout_directory(reference)
            found = self._layout_descriptor(reference, directory, source_side)
            if found is None:
                return None
            return self._layout_manifest(reference, directory, str(found["digest"]), source_side)
        return self._read(reference, source_side, lambda client: client.get_manifest(reference)[0])

    def close(self) -> None:
        with self._lock:
            self._close()

    # -- registries --

    def _read(self, reference: str, source_side: bool, work: Callable[[RegistryClient], T]) -> T | None:
        """``work`` on the reference's registry client, within the deadline, stopped on SIGTERM."""
        from aicr_runner.net.deadline import bounded

        if self._interrupted():
            raise InterruptedRun(f"interrupted before the digest read of {reference}: {RESUME}")

        def run(cancellation: Cancellation) -> T:
            client = self._client(reference)  # a credential it cannot read: a PackAuthError, translated below
            forget = cancellation.on_cancel(client.abort)  # a blocked read returns at once
            try:
                return work(client)
            finally:
                forget()

        try:
            return bounded(
                run,
                budget_seconds=self._timeout,
                interrupted=self._interrupted,
                over_budget=lambda: CopyError(_unavailable(source_side), reference, f"no answer in {self._timeout:g}s"),
                what=f"the digest read of {reference}",
            )
        except InterruptedRun as exc:
            raise InterruptedRun(f"interrupted during the digest read of {reference}: {RESUME}") from exc
        except PackError as exc:
            if exc.http_status == 404:
                return None
            reason = MirrorExit.AUTH_REFUSED if isinstance(exc, PackAuthError) else _unavailable(source_side)
            raise CopyError(reason, reference, exc.message) from exc

    def _client(self, reference: str) -> RegistryClient:
        """The client of the reference's registry host: one per host, made on its first read."""
        from aicr_runner.net.http import client as http_client
        from aicr_runner.net.reference import PackReference
        from aicr_runner.pack.registry import MIRROR_ITEM, RegistryClient

        host = PackReference.parse(reference).registry
        opened = self._opened
        with self._lock:
            if host not in opened.clients:
                if opened.http is None:
                    # One pool for every host; oras' trust: the system's CA store or SSL_CERT_FILE.
                    opened.http = http_client(max_redirects=30, system_trust=True, resolve=self._resolve)
                reach = _Reach(reference, self._credentials_file(host) or "", host in self._plain_http)
                timeout = min(_SOCKET_SECONDS, self._timeout)
                opened.clients[host] = RegistryClient(
                    reach, client=opened.http, subject=MIRROR_ITEM, timeout_seconds=timeout
                )
            return opened.clients[host]

    def _credentials_file(self, host: str) -> str | None:
        """The docker config to read ``host``'s credential from; "" for none (anonymous, as oras
        goes without one); None when only oras can get it (a credential helper, an identity token)."""
        from aicr_runner.pack.credentials import entry_for

        config = self._docker_config()
        if config is None:
            return None
        auths, helpers = config.get("auths"), config.get("credHelpers")
        entry = entry_for(auths, host) if isinstance(auths, dict) else None
        if isinstance(entry, dict) and entry.get("identitytoken"):
            return None
        if isinstance(entry, dict) and (entry.get("auth") or (entry.get("username") and entry.get("password"))):
            return str(self._config_path)
        helper = entry_for(helpers, host) if isinstance(helpers, dict) else None
        return None if helper or config.get("credsStore") else ""

    def _docker_config(self) -> dict[str, Any] | None:
        """The docker config as JSON ({} when there is no file); None when it cannot be read."""
        with self._lock:
            if self._config is None:
                try:
                    loaded = json.loads(self._config_path.read_bytes())
                except FileNotFoundError:
                    loaded = {}
                except (OSError, ValueError):
                    return None  # oras says what is wrong with it
                self._config = loaded if isinstance(loaded, dict) else {}
            return self._config

    # -- OCI layouts --

    def _layout_descriptor(self, reference: str, directory: Path, source_side: bool) -> dict[str, Any] | None:
        """The descriptor ``index.json`` tags with the reference's tag (the last one, as oras reads it)."""
        tag = reference.rpartition(":")[2]
        try:
            index = json.loads((directory / "index.json").read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CopyError(_unavailable(source_side), reference, f"the OCI layout's index.json: {exc}") from exc
        manifests = index.get("manifests") if isinstance(index, dict) else None
        tagged = [
            entry
            for entry in (manifests if isinstance(manifests, list) else ())
            if isinstance(entry, dict) and (entry.get("annotations") or {}).get(_REF_NAME) == tag
        ]
        return tagged[-1] if tagged else None

    def _layout_manifest(
        self, reference: str, directory: Path, digest: str, source_side: bool
    ) -> dict[str, Any] | None:
        algorithm, _, encoded = digest.partition(":")
        try:
            manifest = json.loads((directory / "blobs" / algorithm / encoded).read_bytes())
        except (OSError, ValueError) as exc:
            raise CopyError(_unavailable(source_side), reference, f"the OCI layout's manifest {digest}: {exc}") from exc
        return manifest if isinstance(manifest, dict) else None


def _layout_directory(reference: str) -> Path:
    """The folder of an ``oci-layout:DIR:TAG`` reference."""
    return Path(reference.removeprefix(LAYOUT).rpartition(":")[0])


def _unavailable(source_side: bool) -> MirrorExit:
    return MirrorExit.SOURCE_UNAVAILABLE if source_side else MirrorExit.TARGET_UNAVAILABLE


def _docker_config(environ: Mapping[str, str]) -> Path:
    """Where oras reads the docker config without ``--registry-config``."""
    directory = environ.get("DOCKER_CONFIG")
    return Path(directory) / "config.json" if directory else Path.home() / ".docker" / "config.json"
