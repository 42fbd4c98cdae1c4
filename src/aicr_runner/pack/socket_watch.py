"""Every socket the registry client opens, so one call breaks every read on them.

httpx hands each request's ``trace`` extension (httpcore's documented hook) the
network stream of each connection it opens: ``SocketWatch.trace`` registers its
socket when TCP connects (a TLS handshake can stall too) and again once TLS is
set up. A kept-alive connection was registered when it was opened, so a request
that waits for its status line on one is reached as well: the release download
can only break a read once the response has arrived; the pack pull has several
requests in flight at once and must stop them all.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from aicr_runner.net.deadline import shut_down

__all__ = ["SocketWatch"]

#: httpcore's trace events whose return value is a connection's new network stream.
_NEW_STREAM_EVENTS = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete"})


class SocketWatch:
    """The sockets of one client, so ``abort`` can break any read on them.

    Each socket is registered as a duplicate descriptor. ``shutdown`` acts on the
    socket, not the descriptor, so shutting the duplicate down makes a read
    blocked on the original return at once, in whatever thread it is, whether it
    waits for a handshake, a status line or the next byte of a body (the plain
    socket of a TLS connection is detached when TLS wraps it: only a duplicate
    still reaches it). A duplicate lives exactly as long as its socket object (a
    weak-reference finalizer closes it), and only this watch ever closes one, so
    it is never shut down after its descriptor number was reused.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._duplicates: dict[int, socket.socket] = {}
        self._next_key = 0
        self._aborted = False

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's ``trace`` request extension: watch each new connection's socket."""
        if event not in _NEW_STREAM_EVENTS:
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):  # not TLS-in-TLS through a proxy
            self.watch(sock)

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
