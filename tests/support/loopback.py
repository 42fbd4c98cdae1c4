"""The one HTTP server the tests run on loopback.

A ``ThreadingHTTPServer`` handler thread outlives ``shutdown()``: it keeps waiting on a
kept-alive connection until the client lets go. When that client is collected later
(a pooled connection with unread bytes is closed with a reset), socketserver prints the
handler's traceback to stderr, into whichever test runs then (a test asserting "no
Traceback" in its own output failed that way). This server keeps handler errors in
``errors`` instead of printing them, so they belong to the test that owns the server.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0, host: str = "127.0.0.1") -> None:
        super().__init__((host, port), handler)
        self.errors: list[str] = []
        self.errored = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors.append(f"{client_address}: {sys.exc_info()[1]!r}")
        self.errored.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> LoopbackServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[LoopbackServer]:
    """Serve ``handler`` on a free loopback port for the ``with`` block."""
    server = LoopbackServer(handler).start()
    try:
        yield server
    finally:
        server.stop()
