"""The HTTP client of the release download and the pack pull: httpx, set up once.

Both follow redirects (httpx drops the ``Authorization`` header when one leads
to another host, port or scheme), read the proxy environment once, when the
client is made, and, when it names no proxy, load the CA bundle only on the
first ``https://`` request (``TlsWhenNeeded``): a mirror or registry on plain
HTTP never pays for it. (httpx reads the proxy environment only for a client
without a transport of its own, so one that names a proxy gets httpx's.) The
errors they share the wording of are found here too: a TLS failure anywhere in
an httpx error's chain.

The mirror's registry reads ask two things more of it, as the Go oras CLI does them:
trust in the system's CA store (or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``: OpenSSL's
default paths, as Go's crypto/x509 reads them) instead of certifi's bundle, and
``--resolve`` rules (a registry reached at another address than its name's): the
request keeps its URL and ``Host`` header, is sent to the rule's address, and TLS
verifies the certificate for the name (httpcore's ``sni_hostname`` extension).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from urllib.request import getproxies

import httpx

from aicr_runner.net.deadline import shut_down

__all__ = [
    "Resolved",
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

    def __init__(self, verify: bool = True, *, system_trust: bool = False) -> None:
        self._verify = verify
        self._system_trust = system_trust
        self._plain = httpx.HTTPTransport(verify=False)  # only ever used for http:// URLs
        self._tls: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "http":
            return self._plain.handle_request(request)
        if self._tls is None:
            self._tls = httpx.HTTPTransport(verify=_verify(self._verify, self._system_trust))
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


def _verify(verify: bool, system_trust: bool) -> bool | ssl.SSLContext:
    """httpx's ``verify``: the system's store (``ssl.create_default_context``) when asked, else certifi's."""
    return ssl.create_default_context() if verify and system_trust else verify


class Resolved(httpx.BaseTransport):
    """Requests for one host sent to other addresses, per port (``{port: (address, port)}``):
    a ``--resolve`` rule. The request keeps its URL and ``Host`` header; TLS sends the name
    (SNI) and verifies the certificate for it. Each rule has a pool of its own, so a
    connection made for one name is never used for another. A port without a rule goes
    to a ``TlsWhenNeeded`` as it is."""

    def __init__(
        self, rules: Mapping[int, tuple[str, int]], verify: bool = True, *, system_trust: bool = False
    ) -> None:
        self._rules = dict(rules)
        self._pools = {port: TlsWhenNeeded(verify, system_trust=system_trust) for port in (*self._rules, 0)}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        rule = self._rules.get(port)
        if rule is None:
            return self._pools[0].handle_request(request)
        extensions = dict(request.extensions)
        if url.scheme == "https":
            extensions["sni_hostname"] = url.host  # the certificate is checked for the name, not the address
        to = httpx.Request(
            request.method,
            url.copy_with(host=rule[0], port=rule[1]),
            headers=request.headers,  # Host: the name, as sent to the name
            stream=request.stream,
            extensions=extensions,
        )
        return self._pools[port].handle_request(to)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


def client(
    *,
    verify: bool = True,
    max_redirects: int = 20,
    system_trust: bool = False,
    resolve: Mapping[str, Mapping[int, tuple[str, int]]] | None = None,
) -> httpx.Client:
    """A client that follows redirects: on ``TlsWhenNeeded``, or, when the
    environment names a proxy, on httpx's own transports (its proxies and
    ``no_proxy`` rules), with the same ``verify``. ``system_trust``: the
    system's CA store instead of certifi's. ``resolve``: host -> its rules
    (``Resolved``), which take that host's requests past any proxy."""
    proxied = bool(getproxies())
    transport = None if proxied else TlsWhenNeeded(verify, system_trust=system_trust)
    mounts: dict[str, httpx.BaseTransport | None] = {
        f"all://{host}": Resolved(rules, verify, system_trust=system_trust) for host, rules in (resolve or {}).items()
    }
    return httpx.Client(
        follow_redirects=True,
        max_redirects=max_redirects,
        verify=_verify(verify, system_trust) if proxied else verify,
        transport=transport,
        mounts=mounts or None,
    )


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
