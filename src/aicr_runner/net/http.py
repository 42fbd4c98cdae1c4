"""The HTTP client of the release download and the pack pull: httpx, set up once.

Both follow redirects (httpx drops the ``Authorization`` header when one leads
to another host, port or scheme), read the proxy environment once, when the
client is made, and, when it names no proxy, load the CA bundle only on the
first ``https://`` request (``TlsWhenNeeded``): a mirror or registry on plain
HTTP never pays for it. (httpx reads the proxy environment only for a client
without a transport of its own, so one that names a proxy gets httpx's.) The
errors they share the wording of are found here too: a TLS failure anywhere in
an httpx error's chain.
"""

from __future__ import annotations

import socket
import ssl
from urllib.request import getproxies

import httpx

from aicr_runner.net.deadline import shut_down

__all__ = [
    "TlsWhenNeeded",
    "caused_by",
    "client",
    "is_certificate_verification_failure",
    "shut_down_response",
]


class TlsWhenNeeded(httpx.BaseTransport):
    """httpx's default transport, with the CA bundle loaded on the first
    ``https://`` request instead of up front (about 0.1 s). A redirect to https
    still gets full verification (unless ``verify`` is off: a lab registry)."""

    def __init__(self, verify: bool = True) -> None:
        self._verify = verify
        self._plain = httpx.HTTPTransport(verify=False)  # only ever used for http:// URLs
        self._tls: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "http":
            return self._plain.handle_request(request)
        if self._tls is None:
            self._tls = httpx.HTTPTransport(verify=self._verify)
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


def client(*, verify: bool = True, max_redirects: int = 20) -> httpx.Client:
    """A client that follows redirects: on ``TlsWhenNeeded``, or, when the
    environment names a proxy, on httpx's own transports (its proxies and
    ``no_proxy`` rules), with the same ``verify``."""
    transport = None if getproxies() else TlsWhenNeeded(verify)
    return httpx.Client(follow_redirects=True, max_redirects=max_redirects, verify=verify, transport=transport)


def shut_down_response(response: httpx.Response) -> None:
    """Make a read blocked on ``response``'s connection return now (from another thread).

    httpcore exposes the connection's socket (``deadline.shut_down`` ends the read
    at once). A request still waiting for its status line has no response yet.
    """
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        shut_down(sock)


def caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``kind`` is anywhere in ``exc``'s chain (httpx wraps what went wrong)."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return True
        pending.extend(link for link in (current.__cause__, current.__context__) if link is not None)
    return False


def is_certificate_verification_failure(exc: BaseException) -> bool:
    """httpx reports a bad certificate as ConnectError; the exception chain says why."""
    return caused_by(exc, ssl.SSLCertVerificationError)
