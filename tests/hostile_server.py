"""A loopback server that serves aicr releases and OCI answers slowly on purpose.

``ReleaseServer`` serves real release archives and ``aicr_checksums.txt`` from a
directory (``/<tag>/<file>``), or, per path prefix, misbehaves the ways a real
server can: drip a body one byte at a time, redirect slowly in a chain, or
accept the connection and never answer (a stalled TLS handshake when the client
speaks https). Every request path is recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["DRIP_INTERVAL", "ReleaseServer", "StalledListener", "release_archive", "serve_release"]

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


class ReleaseServer:
    """``/drip/...`` drips, ``/redirect/<n>/...`` redirects slowly, anything else is a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        #: Drip every answer (a registry that stalls a pack pull).
        self.drip_everything = False
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.requests.append(self.path)
                if self.path.startswith("/drip/") or server.drip_everything:
                    self._drip()
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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> ReleaseServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

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
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = self._sock.accept()
                self._held.append(conn)

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
