"""The tests' loopback HTTP server keeps its handler errors to itself."""

from __future__ import annotations

import re
import socket
import struct
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support.loopback import serving

TESTS = Path(__file__).resolve().parents[1]


class _KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_client_that_resets_a_kept_alive_connection_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    with serving(_KeepAlive) as server:
        with socket.create_connection(("127.0.0.1", server.server_address[1])) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            client.sendall(b"GET / HT")  # a request cut short, then a reset
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert server.errored.wait(timeout=30), "the reset reached no handler"
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "ConnectionResetError" in server.errors[0]


def test_no_test_starts_a_threading_http_server_of_its_own() -> None:
    offenders = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path.name != "loopback.py" and re.search(r"ThreadingHTTPServer\(\(", path.read_text())
    ]
    assert offenders == []
