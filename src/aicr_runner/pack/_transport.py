"""The registry client's HTTP transport: one requests session whose sockets can
all be broken off at once, and blob GETs straight on its urllib3 pool.

``SocketWatch`` tracks every socket the session's pools open, so ``abort``
returns a blocked read at once. ``PooledGets`` sends a blob GET through the
same pool with the credential oras-py settled on, skipping requests'
per-request path; whatever it does not handle (a proxy, an answer other than
200, 408, 429 or 5xx) the caller sends through oras-py as before.
"""

from __future__ import annotations

import http.cookiejar
import os
import socket
import threading
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any
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

from aicr_runner.net.deadline import shut_down
from aicr_runner.net.retry import RETRYABLE_STATUS
from aicr_runner.pack._oras_import import oras

if TYPE_CHECKING:
    from requests.sessions import _Settings as RequestSettings


class KeepRequestAuth(requests.auth.AuthBase):
    """A no-op session auth: its presence stops requests from reading ~/.netrc."""

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        return request


class SocketWatch:
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


def watched_pool_classes(watch: SocketWatch) -> dict[str, type[urllib3.HTTPConnectionPool]]:
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


class WatchedAdapter(requests.adapters.HTTPAdapter):
    """oras-py passes no timeout (a silent registry must not hang the Job), and
    every socket is watched so a cancelled pull can break its reads."""

    def __init__(self, timeout: float, watch: SocketWatch) -> None:
        self._timeout = timeout
        self._watch = watch
        super().__init__()

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = watched_pool_classes(self._watch)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> urllib3.PoolManager:
        manager: urllib3.PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = watched_pool_classes(self._watch)
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


class RegistrySession(requests.Session):
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


class ChallengeAuth(oras.auth.TokenAuth):  # type: ignore[misc]
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
_Origin = tuple["WatchedAdapter", Any, Any, bool | str]


class PooledGets:
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

    def __init__(self, session: RegistrySession, *, verify: bool, timeout_seconds: float) -> None:
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
            raise as_requests_error(exc) from exc
        return response

    def _origin(self, url: str) -> _Origin | None:
        where = urllib3.util.parse_url(url)
        key = f"{where.scheme}://{where.netloc}"
        if key not in self._origins:  # the environment does not change during a pull
            settings = self._session.merge_environment_settings(url, {}, True, self._verify, None)
            adapter = self._session.get_adapter(url)
            if select_proxy(url, settings["proxies"]) or not isinstance(adapter, WatchedAdapter):
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


def as_requests_error(exc: urllib3.exceptions.HTTPError) -> requests.RequestException:
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
