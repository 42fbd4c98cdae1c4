"""``RegistryClient``: the pack ``Registry`` on the OCI distribution API, for one registry host.

Requests of the distribution spec, ``GET /v2/<name>/manifests/<reference>``
(``HEAD`` for a manifest's digest alone: the mirror's digest reads) and
``GET /v2/<name>/blobs/<digest>``, on the HTTP client the release download
uses (``net.http``), with the registry's challenges answered by
``pack.registry_auth`` and the credential read only from the runner's
credentials file (``pack.credentials``). Every request has a timeout, every
socket is watched (``pack.socket_watch``) so ``abort`` breaks any read at once,
and transient failures go through the runner's budgeted retry (``net.retry``),
which never retries an auth failure. Bodies are read as sent (no content
coding asked for or undone: what is hashed is what the registry stores), the
manifest up to ``MAX_MANIFEST_BYTES`` and a blob up to one byte past its
declared size. Failures name the ref and the registry host: 401/403 ->
``PackAuthError``, missing or unreachable -> ``PackNotFoundError``; a registry's
answer rides along as the error's ``http_status`` (0: none came).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.cookiejar
import json
import re
import ssl
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from aicr_runner import logs
from aicr_runner.errors import PackAuthError, PackError, PackIntegrityError, PackNotFoundError
from aicr_runner.net.http import caused_by
from aicr_runner.net.http import client as http_client
from aicr_runner.net.reference import DIGEST, PackReference
from aicr_runner.net.retry import RETRYABLE_STATUS, BudgetedRetry, RetryNote, Transient, WaitPolicy, parse_retry_after
from aicr_runner.pack.credentials import load_registry_credential
from aicr_runner.pack.oci import ACCEPTED_MANIFEST_TYPES, MAX_MANIFEST_BYTES, parse_ref
from aicr_runner.pack.registry_auth import AuthFlowError, RegistryAuth, TokenRefused
from aicr_runner.pack.socket_watch import SocketWatch
from aicr_runner.text import cut

__all__ = ["AICR_RELEASE", "MIRROR_ITEM", "PACK", "Reach", "RegistryClient", "Subject"]

#: The pack's retry: 1 s, then 2 s, ... (no jitter: a pull runs once per Job).
_BACKOFF_MAX_SECONDS = 30.0
#: Docker Hub's names for itself; its registry API answers on another host.
_DOCKER_HUB_API = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}
#: Redirects a request follows before giving up.
_MAX_REDIRECTS = 30
#: A token service's answer is read up to this.
_MAX_TOKEN_BYTES = 1024 * 1024
#: An error answer's body is read up to this, for its distribution error code.
_MAX_ERROR_BODY_BYTES = 64 * 1024
#: Failures that waiting may fix (a certificate problem is not one of them).
_TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

log = logs.get_logger()


@dataclass(frozen=True)
class Subject:
    """What the client fetches, as its messages and its retry event name it, and the
    settings its messages point at (a TLS failure; a refusal without a credential)."""

    name: str
    retry_event: str
    tls_hint: str = (
        "A plain-HTTP registry needs AICR_RUNNER_PACK__PLAIN_HTTP=true; a private CA must be trusted by the image "
        "(AICR_RUNNER_PACK__INSECURE_TLS=true skips verification, for lab registries only)"
    )
    no_credential: str = "no credential was given (set AICR_RUNNER_PACK__CREDENTIALS_FILE for a private pack)"


PACK = Subject("pack", "pack registry retry")
#: The aicr release as an OCI artifact (``aicr.releaseRef``), fetched with the pack's transport.
AICR_RELEASE = Subject("aicr release", "aicr release registry retry")
#: An image, chart or artifact of ``aicr-runner mirror --to``, its digest read at its source or in the target.
MIRROR_ITEM = Subject(
    "mirror item",
    "mirror registry retry",
    tls_hint="A plain-HTTP registry needs --plain-http HOST; a private CA goes in the system's CA store or "
    "SSL_CERT_FILE (as for oras)",
    no_credential="no credential for this registry was given (--registry-config, or the docker config oras reads)",
)


class Reach(Protocol):
    """What the client reads of its settings: ``PackSettings``, or the mirror's own per registry."""

    @property
    def ref(self) -> str:
        """A reference on the registry (the client serves every reference of its host)."""

    @property
    def credentials_file(self) -> str:
        """A docker config holding the registry's credential; empty: anonymous."""

    @property
    def plain_http(self) -> bool: ...

    @property
    def insecure_tls(self) -> bool: ...


class RegistryClient:
    """``Registry`` for the one registry host of ``settings.ref``.

    One client (so one pool of kept-alive connections) serves the manifest and
    every blob. ``abort`` breaks every request in flight and makes later ones
    fail at once; ``close`` releases the connections.
    """

    def __init__(
        self,
        settings: Reach,
        *,
        attempts: int = 3,
        backoff_seconds: float = 1.0,
        sleep: Callable[[float], object] | None = None,
        timeout_seconds: float = 60.0,
        client: httpx.Client | None = None,
        subject: Subject = PACK,
    ) -> None:
        self._ref = parse_ref(settings.ref)
        self._subject = subject
        self._credentials_file = Path(settings.credentials_file) if settings.credentials_file else None
        credential = (
            load_registry_credential(self._credentials_file, self._ref.registry) if self._credentials_file else None
        )
        self._attempts = attempts
        self._policy = WaitPolicy(initial=backoff_seconds, maximum=_BACKOFF_MAX_SECONDS)
        self._aborted = threading.Event()
        # A back-off between retries ends early on abort (the next attempt then fails at once).
        self._sleep = sleep or self._aborted.wait
        self._timeout = httpx.Timeout(timeout_seconds)
        self._watch = SocketWatch()
        scheme = "http" if settings.plain_http else "https"
        self._base = f"{scheme}://{_DOCKER_HUB_API.get(self._ref.registry.lower(), self._ref.registry)}"
        self._client = client or http_client(verify=not settings.insecure_tls, max_redirects=_MAX_REDIRECTS)
        # Closed with ``close``, or when this client is dropped unclosed (its sockets with it).
        self._close = weakref.finalize(self, _close, self._client if client is None else None, self._watch)
        # Some registries set cookies and then expect a browser: none is kept.
        self._client.cookies.jar.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self._auth = RegistryAuth(httpx.URL(self._base), credential, self._token_body)

    def abort(self) -> None:
        self._aborted.set()
        self._watch.abort()

    def close(self) -> None:
        self._close()

    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        parsed = self._same_registry(ref)
        url = f"{self._base}/v2/{parsed.repository}/manifests/{parsed.reference}"
        accept = {"Accept": ", ".join(ACCEPTED_MANIFEST_TYPES)}
        with contextlib.closing(self._get(url, ref, "manifest", accept)) as response:
            raw = self._read_capped(response, ref, "manifest", MAX_MANIFEST_BYTES)
        where = self._where(ref)
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise PackIntegrityError(f"{where}: the manifest is not JSON") from exc
        if not isinstance(manifest, dict):
            raise PackIntegrityError(f"{where}: the manifest is not a JSON object")
        return manifest, "sha256:" + hashlib.sha256(raw).hexdigest()

    def manifest_digest(self, ref: str) -> str:
        """The digest ``ref`` resolves to, by ``HEAD``: the registry's ``Docker-Content-Digest``.
        A registry that sends none, or (for a ref pinned by digest) another one, has the
        manifest fetched and its bytes hashed (``get_manifest``)."""
        parsed = self._same_registry(ref)
        url = f"{self._base}/v2/{parsed.repository}/manifests/{parsed.reference}"
        accept = {"Accept": ", ".join(ACCEPTED_MANIFEST_TYPES)}
        with contextlib.closing(self._get(url, ref, "manifest", accept, method="HEAD")) as response:
            said = response.headers.get("Docker-Content-Digest", "")
        if DIGEST.fullmatch(said) and parsed.digest in (None, said):
            return str(said)
        return self.get_manifest(ref)[1]

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        parsed = self._same_registry(ref)
        url = f"{self._base}/v2/{parsed.repository}/blobs/{digest}"
        with contextlib.closing(self._get(url, ref, f"blob {digest}", {})) as response:
            yield from self._body(response, ref, f"blob {digest}", size)

    # -- requests --

    def _send(self, request: httpx.Request) -> httpx.Response:
        """One request as sent: streamed, timed out, its sockets watched, challenges answered."""
        return self._client.send(request, auth=self._auth, stream=True)

    def _request(self, url: str, headers: dict[str, str], method: str = "GET") -> httpx.Request:
        return self._client.build_request(
            method,
            url,
            # What is hashed must be the bytes the registry stores: no content coding.
            headers={"Accept-Encoding": "identity", **headers},
            timeout=self._timeout,
            extensions={"trace": self._watch.trace},
        )

    def _token_body(self, request: httpx.Request) -> bytes:
        """The token service's answer (``RegistryAuth``'s fetch), bounded; ``TokenRefused`` unless 200."""
        with contextlib.closing(self._client.send(request, stream=True)) as response:
            if response.status_code != 200:
                raise TokenRefused(str(request.url.copy_with(query=None)), response.status_code)
            return _read_at_most(response, _MAX_TOKEN_BYTES)

    def _retried(self, url: str, headers: dict[str, str], method: str = "GET") -> httpx.Response:
        """The request under the shared retry. The last retryable answer is returned
        for the caller to word; the last connection error is raised as httpx raised it."""

        def attempt() -> httpx.Response:
            try:
                response = self._send(self._request(url, headers, method))
            except httpx.HTTPError as exc:
                if self._aborted.is_set() or caused_by(exc, ssl.SSLError) or not isinstance(exc, _TRANSIENT_ERRORS):
                    raise  # an abort broke it on purpose; a certificate does not heal by waiting
                raise _BrokenOff(f"{type(exc).__name__}: {exc}", exc) from exc
            except TokenRefused as exc:
                if exc.status not in RETRYABLE_STATUS or self._aborted.is_set():
                    raise
                raise _RetryableToken(exc) from exc
            if response.status_code not in RETRYABLE_STATUS or self._aborted.is_set():
                return response
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise _RetryableAnswer(f"HTTP {response.status_code}", response, retry_after)

        retry = BudgetedRetry(
            self._policy,
            attempts=self._attempts,
            sleep=self._sleep,
            on_retry=lambda note: self._before_retry(url, note),
        )
        try:
            return retry.call(attempt)
        except _RetryableAnswer as exc:
            return exc.response
        except _BrokenOff as exc:
            raise exc.error from None  # as httpx raised it
        except _RetryableToken as exc:
            raise exc.error from None

    def _before_retry(self, url: str, note: RetryNote) -> None:
        log.warning(
            self._subject.retry_event,
            attempt=note.attempt,
            max_attempts=self._attempts,
            url=url,
            reason=note.reason,
            wait=note.wait,
        )
        if isinstance(note.error, _RetryableAnswer):
            note.error.response.close()  # its connection goes back to the pool before the wait

    # -- answers --

    def _where(self, ref: str) -> str:
        return f"{self._subject.name} {ref} (registry {self._ref.registry})"

    def _same_registry(self, ref: str) -> PackReference:
        parsed = parse_ref(ref)
        if parsed.registry != self._ref.registry:
            raise ValueError(f"this RegistryClient serves {self._ref.registry}, not {parsed.registry}")
        return parsed

    def _credential_note(self) -> str:
        if self._credentials_file is None:
            return self._subject.no_credential
        return f"the credential from {self._credentials_file} was rejected"

    def _stopped(self, ref: str, what: str) -> PackError:
        return PackError(f"{self._where(ref)}: the {what} request to registry {self._ref.registry} was stopped")

    def _get(self, url: str, ref: str, what: str, headers: dict[str, str], method: str = "GET") -> httpx.Response:
        if self._aborted.is_set():
            raise self._stopped(ref, what)
        try:
            response = self._retried(url, headers, method)
        except (httpx.HTTPError, AuthFlowError) as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise self._failed(ref, what, exc) from exc
        status = response.status_code
        if status == 200:
            return response
        code = _registry_error_code(response)
        response.close()
        raise self._refused(ref, what, status, code)

    def _failed(self, ref: str, what: str, exc: httpx.HTTPError | AuthFlowError) -> PackError:
        where, host = self._where(ref), self._ref.registry
        if isinstance(exc, AuthFlowError):
            return self._challenge_failed(ref, what, exc)
        if caused_by(exc, ssl.SSLError):
            return PackNotFoundError(
                f"{where}: TLS failure talking to registry {host} ({_short(exc)}); not retried. "
                + self._subject.tls_hint
            )
        if isinstance(exc, httpx.TimeoutException):
            return PackNotFoundError(
                f"{where}: registry {host} timed out after {self._attempts} attempt(s) ({_short(exc)})"
            )
        if isinstance(exc, _TRANSIENT_ERRORS):
            return PackNotFoundError(
                f"{where}: registry {host} is unreachable after {self._attempts} attempt(s) ({_short(exc)})"
            )
        if isinstance(exc, httpx.TooManyRedirects):
            return PackError(f"{where}: request to registry {host} failed (Exceeded {_MAX_REDIRECTS} redirects)")
        return PackError(f"{where}: request to registry {host} failed ({_short(exc)})")

    def _challenge_failed(self, ref: str, what: str, exc: AuthFlowError) -> PackError:
        where = self._where(ref)
        if isinstance(exc, TokenRefused) and exc.status in (401, 403):
            return PackAuthError(
                f"{where}: {exc.reason} for the {what}; {self._credential_note()}", http_status=exc.status
            )
        return PackError(
            f"{where}: registry {self._ref.registry}'s challenge for the {what} cannot be answered: {exc.reason}"
        )

    def _refused(self, ref: str, what: str, status: int, code: str) -> PackError:
        where, host = self._where(ref), self._ref.registry
        detail = f"HTTP {status}{f' {code}' if code else ''}"
        if status in (401, 403):
            return PackAuthError(
                f"{where}: registry {host} refused the {what} ({detail}); {self._credential_note()}",
                http_status=status,
            )
        if status == 404:
            return PackNotFoundError(f"{where}: {what} not found on registry {host} ({detail})", http_status=status)
        return PackError(f"{where}: registry {host} answered {detail} for the {what}", http_status=status)

    def _body(self, response: httpx.Response, ref: str, what: str, limit: int) -> Iterator[bytes]:
        """The body as it arrives, cut one byte past ``limit``: a body that runs on
        is cut there by the caller, not a whole read later."""
        remaining = limit + 1
        try:
            for chunk in response.iter_raw():
                piece = chunk[:remaining]
                remaining -= len(piece)
                yield piece
                if remaining <= 0:
                    return
        except (httpx.HTTPError, OSError) as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise PackNotFoundError(
                f"{self._where(ref)}: the {what} download from registry {self._ref.registry} broke off ({_short(exc)})"
            ) from exc

    def _read_capped(self, response: httpx.Response, ref: str, what: str, limit: int) -> bytes:
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > limit:
            raise PackIntegrityError(f"{self._where(ref)}: the {what} is {announced} bytes, over the limit of {limit}")
        buffer = bytearray()
        for chunk in self._body(response, ref, what, limit):
            buffer += chunk
            if len(buffer) > limit:
                raise PackIntegrityError(f"{self._where(ref)}: the {what} exceeds {limit} bytes")
        return bytes(buffer)


class _RetryableAnswer(Transient):
    """An answer waiting may change (408, 429, 5xx): the last one is the caller's to word."""

    def __init__(self, reason: str, response: httpx.Response, retry_after: float | None) -> None:
        super().__init__(reason, retry_after)
        self.response = response


class _BrokenOff(Transient):
    """A connection error or timeout: the last one is raised as httpx raised it."""

    def __init__(self, reason: str, error: httpx.HTTPError) -> None:
        super().__init__(reason)
        self.error = error


class _RetryableToken(Transient):
    """The token service answered 408, 429 or 5xx: the last one is raised as it was."""

    def __init__(self, error: TokenRefused) -> None:
        super().__init__(error.reason)
        self.error = error


def _close(client: httpx.Client | None, watch: SocketWatch) -> None:
    if client is not None:
        client.close()
    watch.close()


def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    buffer = bytearray()
    for chunk in response.iter_raw():
        buffer += chunk
        if len(buffer) > limit:
            raise AuthFlowError(f"the answer from {response.url.copy_with(query=None)} exceeds {limit} bytes")
    return bytes(buffer)


def _registry_error_code(response: httpx.Response) -> str:
    """The distribution error code (MANIFEST_UNKNOWN, UNAUTHORIZED, ...) if the body has one."""
    try:
        body = _read_at_most(response, _MAX_ERROR_BODY_BYTES)
        errors = json.loads(body).get("errors") or []
        return str(errors[0].get("code", "")) if errors else ""
    except (ValueError, AttributeError, TypeError, IndexError, AuthFlowError, httpx.HTTPError, httpx.StreamError):
        return ""


_ROOT_CAUSE = re.compile(r"\[SSL: [A-Z_]+\][^(]*|\[Errno -?\d+\][^'\")]*|timed out|Read timed out")


def _short(exc: BaseException) -> str:
    """The useful part of an httpx error (the root cause it carries)."""
    text = str(exc) or type(exc).__name__
    match = _ROOT_CAUSE.search(text)
    if match:
        return match.group(0).strip()
    return cut(text, 300)
