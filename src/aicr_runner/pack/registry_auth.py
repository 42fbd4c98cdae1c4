"""The registry's challenges, answered as an httpx auth flow: Basic, and Bearer tokens.

A request the registry answers 401 or 403 with ``WWW-Authenticate: Basic`` is
sent again with the credential; with ``WWW-Authenticate: Bearer realm=...,
service=...,scope=...`` (the distribution spec's token authentication) a token
is asked of the realm (GET, with the credential as Basic when there is one, or
anonymously), and the request is sent again with it. What the registry settled
on is then sent up front with every later request of the client, so only the
first one is challenged. A request is sent again at most once: a second refusal
is the caller's to report (never a loop of retries on a bad credential).

The flow only ever adds the header to requests for the registry's own API: a
redirect (a blob's storage service) is httpx's to follow, and httpx drops the
header when it leads to another host, port or scheme. The credential goes to a
realm on plain HTTP only when the registry itself is on plain HTTP. A token is
registered for redaction as soon as it is read. The credential is the caller's
(``pack.credentials``): nothing here reads a configuration file.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Generator

import httpx

from aicr_runner.logs import register_secret

__all__ = ["AuthFlowError", "RegistryAuth", "TokenRefused"]

#: A challenge's body is read (by httpx, before the request is sent again) only up to this.
MAX_CHALLENGE_BODY_BYTES = 64 * 1024
_CHALLENGE_PARAMETER = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


class AuthFlowError(Exception):
    """The registry's challenge cannot be answered (a realm that is no URL, say): ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TokenRefused(AuthFlowError):
    """The realm answered ``status`` instead of a token (401 or 403: the credential was refused)."""

    def __init__(self, realm: str, status: int) -> None:
        super().__init__(f"the token service {realm} answered HTTP {status}")
        self.status = status


#: What fetches a token: the realm's request in, its body out (bounded) or ``TokenRefused``.
TokenFetch = Callable[[httpx.Request], bytes]


class RegistryAuth(httpx.Auth):
    """The challenge flow of one registry (``origin``: its scheme, host and port)."""

    def __init__(self, origin: httpx.URL, basic_credential: str | None, fetch_token: TokenFetch) -> None:
        self._origin = origin
        self._basic = basic_credential
        self._fetch_token = fetch_token
        self._lock = threading.Lock()
        #: The Authorization header the registry settled on, sent up front from then on.
        self._settled: str | None = None

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        if not _same_origin(request.url, self._origin):
            yield request
            return
        sent = self._settled
        if sent is not None:
            request.headers["Authorization"] = sent
        response = yield request
        if response.status_code not in (401, 403):
            return
        header = self._answer(request, response.headers.get("WWW-Authenticate", ""))
        if header is None or header == sent:
            return  # nothing new to try: the refusal is the caller's to report
        _check_readable(response)
        with self._lock:
            self._settled = header
        request.headers["Authorization"] = header
        yield request

    def _answer(self, request: httpx.Request, challenge: str) -> str | None:
        scheme, _, rest = challenge.strip().partition(" ")
        parameters = {name.lower(): quoted or bare for name, quoted, bare in _CHALLENGE_PARAMETER.findall(rest)}
        if scheme.lower() == "basic":
            return f"Basic {self._basic}" if self._basic else None
        if scheme.lower() == "bearer":
            return f"Bearer {self._token(request, parameters)}"
        return None

    def _token(self, request: httpx.Request, parameters: dict[str, str]) -> str:
        realm = parameters.get("realm", "")
        try:
            url = httpx.URL(realm)
        except httpx.InvalidURL as exc:
            raise AuthFlowError(f"the token realm {realm!r} is not a URL") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise AuthFlowError(f"the token realm {realm!r} is not an http(s) URL")
        query = {name: parameters[name] for name in ("service", "scope") if parameters.get(name)}
        headers = {"Accept-Encoding": "identity"}  # read as sent: bounded by its length
        if self._basic and (url.scheme == "https" or self._origin.scheme == "http"):
            headers["Authorization"] = f"Basic {self._basic}"
        token_request = httpx.Request(
            "GET", url.copy_merge_params(query), headers=headers, extensions=request.extensions
        )
        return _token_from(self._fetch_token(token_request), realm)


def _same_origin(url: httpx.URL, origin: httpx.URL) -> bool:
    return (url.scheme, url.host, url.port) == (origin.scheme, origin.host, origin.port)


def _check_readable(response: httpx.Response) -> None:
    """httpx reads a challenge's whole body before it sends the request again:
    only one announced small enough is read (an answer to HEAD has none)."""
    if response.request.method == "HEAD":
        return
    length = response.headers.get("Content-Length", "")
    if not (length.isdigit() and int(length) <= MAX_CHALLENGE_BODY_BYTES):
        response.close()
        raise AuthFlowError(
            f"the HTTP {response.status_code} challenge's body is not announced as at most "
            f"{MAX_CHALLENGE_BODY_BYTES} bytes (Content-Length {length or 'missing'})"
        )


def _token_from(body: bytes, realm: str) -> str:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise AuthFlowError(f"the token service {realm} answered something other than JSON") from exc
    token = document.get("token") or document.get("access_token") if isinstance(document, dict) else None
    if not isinstance(token, str) or not token or any(c in token for c in "\r\n"):
        raise AuthFlowError(f"the token service {realm} answered without a token")
    register_secret(token)
    return token
