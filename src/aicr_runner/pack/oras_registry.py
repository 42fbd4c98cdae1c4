"""``OrasRegistry``: the pack ``Registry`` on oras-py, for one registry host.

It uses oras-py's transport and token flow but reads credentials only from the
runner's credentials file (``pack.credentials``), and replaces oras-py's
built-in retry (5 attempts, sleeping 2+3**n s, auth failures included) with the
runner's budgeted one (``net.retry``), which never retries an auth failure.
Failures name the ref and the registry host: 401/403 -> ``PackAuthError``,
missing or unreachable -> ``PackNotFoundError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
import urllib3.exceptions

from aicr_runner import logs
from aicr_runner.errors import (
    PackAuthError,
    PackError,
    PackIntegrityError,
    PackNotFoundError,
)
from aicr_runner.net.reference import PackReference
from aicr_runner.net.retry import RETRYABLE_STATUS, BudgetedRetry, RetryNote, Transient, WaitPolicy, parse_retry_after
from aicr_runner.pack._oras_import import oras
from aicr_runner.pack._transport import (
    ChallengeAuth,
    KeepRequestAuth,
    PooledGets,
    RegistrySession,
    SocketWatch,
    WatchedAdapter,
)
from aicr_runner.pack.credentials import load_registry_credential
from aicr_runner.pack.oci import ACCEPTED_MANIFEST_TYPES, MAX_MANIFEST_BYTES, parse_ref
from aicr_runner.text import cut

if TYPE_CHECKING:
    from aicr_runner.settings.config import PackSettings

__all__ = [
    "OrasRegistry",
    "route_oras_logging",
]

#: The pack's retry: 1 s, then 2 s, ... (no jitter: a pull runs once per Job).
_BACKOFF_MAX_SECONDS = 30.0
#: Docker Hub's names for itself; its registry API answers on another host.
_DOCKER_HUB_API = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}
_CHUNK_BYTES = 1 << 20


log = logs.get_logger()


def route_oras_logging() -> None:
    """Send oras-py's logger through stdlib logging (and so through ``logs``)."""
    for name in ("oras", oras.logger.logger.logger.name):
        stdlib_logger = logging.getLogger(name)
        for handler in list(stdlib_logger.handlers):
            # oras.logger.setup_logger() installs a colouring console handler.
            if isinstance(handler, oras.logger.ColorizingStreamHandler):
                stdlib_logger.removeHandler(handler)
        stdlib_logger.propagate = True


#: oras-py's do_request without its @retry decorator (2+3**n s sleeps, 5 attempts).
_UNRETRIED_DO_REQUEST: Callable[..., requests.Response] = getattr(
    oras.provider.Registry.do_request, "__wrapped__", oras.provider.Registry.do_request
)


class _OrasProvider(oras.provider.Registry):  # type: ignore[misc]
    def __init__(
        self,
        host: str,
        *,
        plain_http: bool,
        verify_tls: bool,
        basic_credential: str | None,
        attempts: int,
        backoff_seconds: float,
        sleep: Callable[[float], object],
        timeout_seconds: float,
        watch: SocketWatch,
        aborted: Callable[[], bool],
    ) -> None:
        super().__init__(hostname=host, insecure=plain_http, tls_verify=verify_tls, auth_backend="token")
        self.session = RegistrySession()
        adapter = WatchedAdapter(timeout_seconds, watch)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.auth = KeepRequestAuth()
        auth = ChallengeAuth(basic_credential)
        auth.session = self.session
        auth.prefix = self.prefix
        auth._tls_verify = verify_tls
        self.auth = auth
        self._attempts = attempts
        self._backoff_seconds = backoff_seconds
        self._sleep = sleep
        self._aborted = aborted
        self._pooled = PooledGets(self.session, verify=verify_tls, timeout_seconds=timeout_seconds)

    def do_request(  # noqa: PLR0917 - the signature is oras-py's
        self,
        url: str,
        method: str = "GET",
        data: dict[str, Any] | bytes | None = None,
        headers: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        def send() -> requests.Response:
            return self._unretried(url, method, data, headers, json=json, stream=stream)

        return self._retried(url, send)

    def get_blob(self, url: str) -> requests.Response:
        """A blob GET, retried like ``do_request``: straight on the pool when it can
        be (``PooledGets``), else, and on any answer but 200, 429 or 5xx (a 401
        that wants a new token, say), through oras-py's request and challenge flow."""

        def send() -> requests.Response:
            auth_headers = dict(self.auth.preemptive_headers())
            if self.auth.token is not None:  # what oras-py's do_request adds
                auth_headers.update(self.auth.get_auth_header())
            pooled = self._pooled.get(url, auth_headers)
            return pooled if pooled is not None else self._unretried(url, "GET", None, {}, json=None, stream=True)

        return self._retried(url, send)

    def _unretried(
        self,
        url: str,
        method: str,
        data: dict[str, Any] | bytes | None,
        headers: dict[str, str] | None,
        *,
        json: dict[str, Any] | None,
        stream: bool,
    ) -> requests.Response:
        headers = {**self.auth.preemptive_headers(), **(headers or {})}
        return _UNRETRIED_DO_REQUEST(self, url, method, data, headers=headers, json=json, stream=stream)

    def _retried(self, url: str, send: Callable[[], requests.Response]) -> requests.Response:
        """``send`` under the shared retry. The last retryable answer is returned
        for the caller to word; the last connection error is raised as requests
        raised it."""

        def attempt() -> requests.Response:
            try:
                response = send()
            except requests.exceptions.SSLError:
                raise  # a certificate problem does not heal by waiting
            except (requests.ConnectionError, requests.Timeout) as exc:
                if self._aborted():  # an abort broke it on purpose: no retry
                    raise
                raise _BrokenOff(f"{type(exc).__name__}: {exc}", exc) from exc
            if response.status_code not in RETRYABLE_STATUS or self._aborted():
                return response
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise _RetryableAnswer(f"HTTP {response.status_code}", response, retry_after)

        retry = BudgetedRetry(
            WaitPolicy(initial=self._backoff_seconds, maximum=_BACKOFF_MAX_SECONDS),
            attempts=self._attempts,
            sleep=self._sleep,
            on_retry=lambda note: self._before_retry(url, note),
        )
        try:
            return retry.call(attempt)
        except _RetryableAnswer as exc:
            return exc.response
        except _BrokenOff as exc:
            raise exc.error from None  # as requests raised it

    def _before_retry(self, url: str, note: RetryNote) -> None:
        log.warning(
            "pack registry retry",
            attempt=note.attempt,
            max_attempts=self._attempts,
            url=url,
            reason=note.reason,
            wait=note.wait,
        )
        if isinstance(note.error, _RetryableAnswer):
            note.error.response.close()  # its connection goes back to the pool before the wait


class _RetryableAnswer(Transient):
    """An answer waiting may change (429, 5xx): the last one is the caller's to word."""

    def __init__(self, reason: str, response: requests.Response, retry_after: float | None) -> None:
        super().__init__(reason, retry_after)
        self.response = response


class _BrokenOff(Transient):
    """A connection error or timeout: the last one is raised as requests raised it."""

    def __init__(self, reason: str, error: requests.RequestException) -> None:
        super().__init__(reason)
        self.error = error


class OrasRegistry:
    """``Registry`` on oras-py for the one registry host of ``settings.ref``.

    One session (so one pool of kept-alive connections) serves the manifest
    and every blob. ``abort`` breaks every request in flight and makes later
    ones fail at once; ``close`` releases the connections.
    """

    def __init__(
        self,
        settings: PackSettings,
        *,
        attempts: int = 3,
        backoff_seconds: float = 1.0,
        sleep: Callable[[float], object] | None = None,
        timeout_seconds: float = 60.0,
    ) -> None:
        self._ref = parse_ref(settings.ref)
        self._credentials_file = Path(settings.credentials_file) if settings.credentials_file else None
        credential = (
            load_registry_credential(self._credentials_file, self._ref.registry) if self._credentials_file else None
        )
        route_oras_logging()
        self._attempts = attempts
        self._aborted = threading.Event()
        self._watch = SocketWatch()
        self._provider = _OrasProvider(
            self._ref.registry,
            plain_http=settings.plain_http,
            verify_tls=not settings.insecure_tls,
            basic_credential=credential,
            attempts=attempts,
            backoff_seconds=backoff_seconds,
            # A back-off between retries ends early on abort (the next attempt then fails at once).
            sleep=sleep or self._aborted.wait,
            timeout_seconds=timeout_seconds,
            watch=self._watch,
            aborted=self._aborted.is_set,
        )
        self._scheme = "http" if settings.plain_http else "https"
        self._api_host = _DOCKER_HUB_API.get(self._ref.registry.lower(), self._ref.registry)

    def abort(self) -> None:
        self._aborted.set()
        self._watch.abort()

    def close(self) -> None:
        self._provider.session.close()
        self._watch.close()

    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        parsed = self._same_registry(ref)
        url = f"{self._scheme}://{self._api_host}/v2/{parsed.repository}/manifests/{parsed.reference}"
        accept = {"Accept": ", ".join(ACCEPTED_MANIFEST_TYPES)}
        with self._get(
            url, ref, "manifest", lambda: self._provider.do_request(url, "GET", headers=accept, stream=True)
        ) as response:
            raw = self._read_capped(response, ref, "manifest", MAX_MANIFEST_BYTES)
        where = self._where(ref)
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise PackIntegrityError(f"{where}: the manifest is not JSON") from exc
        if not isinstance(manifest, dict):
            raise PackIntegrityError(f"{where}: the manifest is not a JSON object")
        return manifest, "sha256:" + hashlib.sha256(raw).hexdigest()

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        parsed = self._same_registry(ref)
        url = f"{self._scheme}://{self._api_host}/v2/{parsed.repository}/blobs/{digest}"
        with self._get(url, ref, f"blob {digest}", lambda: self._provider.get_blob(url)) as response:
            yield from self._body(response, ref, f"blob {digest}", size)

    # -- helpers --

    def _where(self, ref: str) -> str:
        return f"pack {ref} (registry {self._ref.registry})"

    def _same_registry(self, ref: str) -> PackReference:
        parsed = parse_ref(ref)
        if parsed.registry != self._ref.registry:
            raise ValueError(f"this OrasRegistry serves {self._ref.registry}, not {parsed.registry}")
        return parsed

    def _credential_note(self) -> str:
        if self._credentials_file is None:
            return "no credential was given (set AICR_RUNNER_PACK__CREDENTIALS_FILE for a private pack)"
        return f"the credential from {self._credentials_file} was rejected"

    def _stopped(self, ref: str, what: str) -> PackError:
        return PackError(f"{self._where(ref)}: the {what} request to registry {self._ref.registry} was stopped")

    def _get(self, url: str, ref: str, what: str, send: Callable[[], requests.Response]) -> requests.Response:
        where = self._where(ref)
        host = self._ref.registry
        if self._aborted.is_set():
            raise self._stopped(ref, what)
        try:
            response = send()
        except requests.exceptions.SSLError as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise PackNotFoundError(
                f"{where}: TLS failure talking to registry {host} ({_short(exc)}); not retried. A plain-HTTP "
                "registry needs AICR_RUNNER_PACK__PLAIN_HTTP=true; a private CA must be trusted by the image "
                "(AICR_RUNNER_PACK__INSECURE_TLS=true skips verification, for lab registries only)"
            ) from exc
        except requests.RequestException as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            if isinstance(exc, requests.ConnectionError):
                raise PackNotFoundError(
                    f"{where}: registry {host} is unreachable after {self._attempts} attempt(s) ({_short(exc)})"
                ) from exc
            if isinstance(exc, requests.Timeout):
                raise PackNotFoundError(
                    f"{where}: registry {host} timed out after {self._attempts} attempt(s) ({_short(exc)})"
                ) from exc
            raise PackError(f"{where}: request to registry {host} failed ({_short(exc)})") from exc
        status = response.status_code
        if status == 200:
            return response
        code = _registry_error_code(response)
        response.close()
        detail = f"HTTP {status}{f' {code}' if code else ''}"
        if status in (401, 403):
            raise PackAuthError(f"{where}: registry {host} refused the {what} ({detail}); {self._credential_note()}")
        if status == 404:
            raise PackNotFoundError(f"{where}: {what} not found on registry {host} ({detail})")
        raise PackError(f"{where}: registry {host} answered {detail} for the {what}")

    def _body(self, response: requests.Response, ref: str, what: str, limit: int) -> Iterator[bytes]:
        """The body in reads of at most one byte past what is left of ``limit``: a
        body that runs on is cut there by the caller, not a whole chunk later."""
        remaining = limit + 1
        try:
            while remaining > 0:
                chunk = response.raw.read(min(_CHUNK_BYTES, remaining), decode_content=True)
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if self._aborted.is_set():
                raise self._stopped(ref, what) from exc
            raise PackNotFoundError(
                f"{self._where(ref)}: the {what} download from registry {self._ref.registry} broke off ({_short(exc)})"
            ) from exc

    def _read_capped(self, response: requests.Response, ref: str, what: str, limit: int) -> bytes:
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > limit:
            raise PackIntegrityError(f"{self._where(ref)}: the {what} is {announced} bytes, over the limit of {limit}")
        buffer = bytearray()
        for chunk in self._body(response, ref, what, limit):
            buffer += chunk
            if len(buffer) > limit:
                raise PackIntegrityError(f"{self._where(ref)}: the {what} exceeds {limit} bytes")
        return bytes(buffer)


def _registry_error_code(response: requests.Response) -> str:
    """The distribution error code (MANIFEST_UNKNOWN, UNAUTHORIZED, ...) if the body has one."""
    try:
        body = next(response.iter_content(64 * 1024), b"")
        errors = json.loads(body).get("errors") or []
        return str(errors[0].get("code", "")) if errors else ""
    except (ValueError, AttributeError, TypeError, IndexError, requests.RequestException):
        return ""


_ROOT_CAUSE = re.compile(r"\[SSL: [A-Z_]+\][^(]*|\[Errno -?\d+\][^'\")]*|timed out|Read timed out")


def _short(exc: BaseException) -> str:
    """The useful part of a requests/urllib3 error (they nest "Max retries exceeded" wrappers)."""
    text = str(exc)
    match = _ROOT_CAUSE.search(text)
    if match:
        return match.group(0).strip()
    return cut(text, 300)
