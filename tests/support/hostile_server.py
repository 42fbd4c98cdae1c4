"""Loopback servers that serve aicr releases and OCI packs slowly on purpose.

``ReleaseServer`` serves real release archives and ``aicr_checksums.txt`` from a
directory (``/<tag>/<file>``), or, per path prefix, misbehaves the ways a real
server can: drip a body one byte at a time, redirect slowly in a chain, or
accept the connection and never answer (a stalled TLS handshake when the client
speaks https). Every request path is recorded.

``HostileRegistry`` serves a real multi-layer pack: the manifest promptly, then
every blob the way a broken registry does (``drip``, ``stall`` after one
byte, ``hang`` without a status line). It counts the connections its client
still holds open, so a test can see the client let go of every socket.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import re
import select
import socket
import ssl
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Self

from tests.support.loopback import LoopbackServer

__all__ = [
    "DRIP_INTERVAL",
    "BlackHole",
    "HostileKubeApi",
    "HostileRegistry",
    "ReleaseServer",
    "StalledListener",
    "release_archive",
    "self_signed_certificate",
    "serve_release",
    "tls_context",
]

#: One byte every this many seconds: each read succeeds well within any timeout.
DRIP_INTERVAL = 0.2


def release_archive(binary: bytes) -> bytes:
    """A release archive as goreleaser lays it out: ``aicr`` at the root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("aicr")
        info.size = len(binary)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(binary))
    return buffer.getvalue()


class _LoopbackHttp:
    """A ThreadingHTTPServer on 127.0.0.1, served from a daemon thread inside ``with``;
    ``_stop`` tells handlers that hold a connection to let go on the way out."""

    _stop: threading.Event

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = LoopbackServer(handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def _port(self) -> int:
        return int(self._httpd.server_address[1])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()


class ReleaseServer(_LoopbackHttp):
    """``/drip/...`` drips, ``/stall/...`` sends one byte and falls silent,
    ``/redirect/<n>/...`` redirects slowly, anything else is a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        #: Set when ``/stall/`` has sent its byte, and when its client closed the connection.
        self.stall_started = threading.Event()
        self.stalled_client_left = threading.Event()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.requests.append(self.path)
                if self.path.startswith("/drip/"):
                    self._drip()
                elif self.path.startswith("/stall/"):
                    self._stall()
                elif self.path.startswith("/redirect/"):
                    self._redirect()
                else:
                    self._file()

            def _file(self) -> None:
                path = server.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _drip(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(10**9))
                self.end_headers()
                with contextlib.suppress(OSError):
                    while not server._stop.is_set():
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(DRIP_INTERVAL)

            def _stall(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(10**9))
                self.end_headers()
                self.wfile.write(b"x")
                self.wfile.flush()
                server.stall_started.set()
                self.close_connection = True
                while not server._stop.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    with contextlib.suppress(OSError):
                        if readable and not self.connection.recv(4096):
                            server.stalled_client_left.set()
                            return

            def _redirect(self) -> None:
                hop = int(self.path.split("/")[2])
                time.sleep(0.5)
                rest = "/".join(self.path.split("/")[3:])
                self.send_response(302)
                self.send_header("Location", f"/redirect/{hop + 1}/{rest}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._serve(Handler)
        self.url = f"http://127.0.0.1:{self._port}"

    def publish(self, tag: str, archives: dict[str, bytes]) -> dict[str, str]:
        """Write archives and their checksums file under ``/<tag>/``; return name -> sha256."""
        folder = self.root / tag
        folder.mkdir(parents=True, exist_ok=True)
        sums = {}
        for name, data in archives.items():
            (folder / name).write_bytes(data)
            sums[name] = hashlib.sha256(data).hexdigest()
        (folder / "aicr_checksums.txt").write_text("".join(f"{digest}  {name}\n" for name, digest in sums.items()))
        return sums


class StalledListener:
    """Accepts TCP connections and never says a word: a TLS handshake that stalls."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = self._sock.accept()
                self._held.append(conn)
                self._connected.set()

    def wait_for_connection(self, timeout: float) -> bool:
        """True once a client has connected."""
        return self._connected.wait(timeout)

    def __enter__(self) -> StalledListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for conn in self._held:
            conn.close()
        self._sock.close()


@contextlib.contextmanager
def serve_release(root: Path) -> Iterator[ReleaseServer]:
    with ReleaseServer(root) as server:
        yield server


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(key_path, 0o600)
    return cert_path, key_path


def tls_context(directory: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
    cert, key = self_signed_certificate(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


# --- a registry that misbehaves on every blob ------------------------------------------------

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_TITLE = "org.opencontainers.image.title"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _pack_layers() -> list[tuple[str, str, bytes, dict[str, str]]]:
    """(title, media type, bytes, extra annotations) of a 3-layer pack shaped like the Go oras CLI's."""
    overlays = io.BytesIO()
    with tarfile.open(fileobj=overlays, mode="w:gz") as tar:
        folder = tarfile.TarInfo("overlays")
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        tar.addfile(folder)
        body = b"kind: RecipeMetadata\nmetadata: {name: gpu}\n"
        info = tarfile.TarInfo("overlays/gpu.yaml")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    plain = "application/vnd.oci.image.layer.v1.tar"
    return [
        ("registry.yaml", plain, b"apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\ncomponents: []\n", {}),
        ("values.yaml", plain, b"# site values\ngpu-operator: {enabled: true}\n", {}),
        (
            "overlays",
            "application/vnd.oci.image.layer.v1.tar+gzip",
            overlays.getvalue(),
            {"io.deis.oras.content.unpack": "true"},
        ),
    ]


class HostileRegistry(_LoopbackHttp):
    """An OCI registry on loopback whose blobs ``drip``, ``stall`` or ``hang``.

    ``drip``: the right headers, then one byte every ``DRIP_INTERVAL``;
    ``stall``: the headers and one byte, then silence with the connection open;
    ``hang``: the request is read and never answered. ``mode = "serve"`` serves
    blobs properly. The manifest is always served at once.
    """

    REPOSITORY = "acme/aicr-pack"
    TAG = "1.0.0"

    def __init__(self, mode: str, *, connection_close: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.mode = mode
        #: Answer blobs with ``Connection: close`` (HTTP/1.0 proxies do).
        self.connection_close = connection_close
        self.requests: list[str] = []
        #: When the first request arrived (``time.monotonic``): the pull's start.
        self.first_request_at: float | None = None
        self.blobs: dict[str, bytes] = {}
        descriptors = []
        for title, media_type, data, extra in _pack_layers():
            digest = _sha256(data)
            self.blobs[digest] = data
            descriptors.append(
                {"mediaType": media_type, "digest": digest, "size": len(data), "annotations": {_TITLE: title, **extra}}
            )
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": "application/vnd.unknown.artifact.v1",
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": _sha256(b"{}"), "size": 2},
                "layers": descriptors,
            }
        ).encode()
        self._lock = threading.Lock()
        self._open = 0
        self._blob_requests = 0
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                registry._count(open_delta=1)

            def finish(self) -> None:
                with contextlib.suppress(OSError):
                    super().finish()
                registry._count(open_delta=-1)

            def do_GET(self) -> None:
                with registry._lock:
                    registry.requests.append(self.path)
                    if registry.first_request_at is None:
                        registry.first_request_at = time.monotonic()
                match = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/(.+)", self.path)
                if match is None or match.group(1) != registry.REPOSITORY:
                    self._answer(404, b'{"errors": [{"code": "NAME_UNKNOWN"}]}')
                elif match.group(2) == "manifests":
                    self._answer(200, registry.manifest, OCI_MANIFEST)
                elif match.group(3) not in registry.blobs:
                    self._answer(404, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}')
                else:
                    registry._count(blob_delta=1)
                    self._blob(registry.blobs[match.group(3)])

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _blob(self, data: bytes) -> None:
                if registry.mode == "serve":
                    self._answer(200, data, "application/octet-stream")
                    return
                if registry.mode == "hang":
                    self._until_the_client_leaves()
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                if registry.connection_close:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data[:1])
                self.wfile.flush()
                self.close_connection = True
                if registry.mode == "stall":
                    self._until_the_client_leaves()
                    return
                with contextlib.suppress(OSError):
                    for offset in range(1, len(data)):
                        if registry._stop.wait(DRIP_INTERVAL):
                            return
                        self.wfile.write(data[offset : offset + 1])
                        self.wfile.flush()

            def _until_the_client_leaves(self) -> None:
                """Say nothing; return when the client closes (or the server stops)."""
                while not registry._stop.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable:
                        try:
                            if not self.connection.recv(4096):
                                return
                        except OSError:
                            return

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._serve(Handler)
        if tls is not None:  # https: the handshake runs as each connection is accepted
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.host = f"127.0.0.1:{self._port}"
        self.ref = f"{self.host}/{self.REPOSITORY}:{self.TAG}"

    @property
    def layer_count(self) -> int:
        return len(self.blobs)

    def _count(self, *, open_delta: int = 0, blob_delta: int = 0) -> None:
        with self._changed:
            self._open += open_delta
            self._blob_requests += blob_delta
            self._changed.notify_all()

    def wait_for_blob_requests(self, count: int, timeout: float) -> bool:
        """True once ``count`` blob requests have arrived."""
        with self._changed:
            return self._changed.wait_for(lambda: self._blob_requests >= count, timeout)

    def wait_until_released(self, timeout: float) -> bool:
        """True once the client holds no connection open any more."""
        with self._changed:
            return self._changed.wait_for(lambda: self._open == 0, timeout)


# --- a Kubernetes API server that misbehaves on every request ----------------------------------


class HostileKubeApi(_LoopbackHttp):
    """A loopback stand-in for a Kubernetes API server that never gives a usable answer.

    ``hang``: each request is read and never answered (the connection held open);
    ``drip``: a 200 status and headers at once, then the JSON body one byte every
    ``DRIP_INTERVAL`` (every socket read succeeds, the body never ends);
    ``500``: every request answered ``500 Internal Server Error`` at once;
    ``hang-once``: the first request hangs, every later one is answered 200 ``{}``
    (an API server that was stuck and came back).
    ``requested`` is set at the first request; ``requests`` counts them.
    """

    def __init__(self, mode: str) -> None:
        if mode not in ("hang", "drip", "500", "hang-once"):
            raise ValueError(mode)
        self.mode = mode
        self.requested = threading.Event()
        self.requests = 0
        self._stop = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                api.requests += 1
                api.requested.set()
                if api.mode == "500" or (api.mode == "hang-once" and api.requests > 1):
                    status = 500 if api.mode == "500" else 200
                    body = b'{"kind":"Status","code":500,"message":"internal error"}' if status == 500 else b"{}"
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.close_connection = True
                if api.mode == "drip":
                    self._drip()
                else:
                    self._silent()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def _drip(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(10**9))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(b'{"kind": "List", "items": [')
                    while not api._stop.wait(DRIP_INTERVAL):
                        self.wfile.write(b" ")
                        self.wfile.flush()

            def _silent(self) -> None:
                while not api._stop.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    with contextlib.suppress(OSError):
                        if readable and not self.connection.recv(4096):
                            return

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._serve(Handler)
        self.url = f"http://127.0.0.1:{self._port}"


class BlackHole:
    """A loopback port whose listen backlog is full and never drained: a new
    connection's handshake never completes (as a firewall that drops packets)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(0)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._fillers: list[socket.socket] = []

    def __enter__(self) -> BlackHole:
        # Fill the backlog with connections nobody accepts; later SYNs are dropped.
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError, OSError):
                filler.connect(("127.0.0.1", self.port))
            self._fillers.append(filler)
        return self

    def __exit__(self, *exc: object) -> None:
        for filler in self._fillers:
            filler.close()
        self._sock.close()
