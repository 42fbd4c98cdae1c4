"""Download and verify the aicr release, fail closed.

The release archive and ``aicr_checksums.txt`` are streamed to disk and hashed
while they stream; the archive is never held in memory. The archive's own line
in the checksums file must exist exactly once and match, and the reviewed
per-arch pin (when set) must match too. Only ``aicr`` and its attestation sidecar
are extracted, and the binary is hashed as it is written (the run's one read of it:
the provenance check is handed that digest).

Transient failures (timeouts, connection resets, 408/429/5xx) are retried with
exponential back-off and jitter, honouring ``Retry-After``, within both an
attempt limit and a wall-time budget for the whole step. Nothing that cannot get
better by waiting is retried: TLS certificate verification failures, other 4xx
answers and checksum mismatches fail at once. Every httpx error is translated
into ``DownloadError`` or ``ChecksumError`` here.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from aicr_runner import logs
from aicr_runner.aicr.binary import ATTESTATION_NAME, AicrBinary
from aicr_runner.errors import ArchiveError, ChecksumError, DownloadError
from aicr_runner.net.archive import extract_members
from aicr_runner.net.deadline import Cancellation
from aicr_runner.net.digests import remember_digest
from aicr_runner.net.http import client as http_client
from aicr_runner.net.http import is_certificate_verification_failure, shut_down_response
from aicr_runner.net.retry import (
    RETRYABLE_STATUS,
    BudgetedRetry,
    OutOfBudget,
    RetryNote,
    Transient,
    WaitPolicy,
    parse_retry_after,
)
from aicr_runner.settings.config import AicrSettings

__all__ = [
    "ATTESTATION_NAME",
    "BINARY_NAME",
    "CHECKSUMS_NAME",
    "archive_name",
    "download_file",
    "expected_sha256",
    "fetch_aicr",
    "install_verified",
    "is_certificate_verification_failure",
    "release_urls",
]

BINARY_NAME = "aicr"
CHECKSUMS_NAME = "aicr_checksums.txt"

#: aicr is a single Go binary of roughly 100 MB; anything far larger is not it.
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
MAX_BINARY_BYTES = 512 * 1024 * 1024
MAX_CHECKSUMS_BYTES = 1024 * 1024

_TRANSIENT_ERRORS: tuple[type[httpx.HTTPError], ...] = (
    httpx.TimeoutException,
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
_WAIT_POLICY = WaitPolicy(initial=1.0, maximum=30.0, jitter=1.0)
#: Named in every budget message, so the operator knows which setting to raise.
_BUDGET_SETTING = " (AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS)"
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")

log = logs.get_logger()

Sleep = Callable[[float], object]
Clock = Callable[[], float]


def archive_name(settings: AicrSettings) -> str:
    """The release archive's file name for the selected version and arch."""
    return f"aicr_{settings.version.removeprefix('v')}_linux_{settings.arch.value}.tar.gz"


def release_urls(settings: AicrSettings) -> tuple[str, str]:
    """The archive URL and the checksums URL for the selected version and arch."""
    base = f"{settings.release_base_url}/{settings.version}"  # the version starts with "v" (the settings model)
    return f"{base}/{archive_name(settings)}", f"{base}/{CHECKSUMS_NAME}"


def fetch_aicr(
    settings: AicrSettings,
    dest_dir: Path,
    client: httpx.Client | None = None,
    *,
    sleep: Sleep | None = None,
    clock: Clock = time.monotonic,
    cancelled: Cancellation | None = None,
) -> AicrBinary:
    """Download, verify and unpack the aicr release into ``dest_dir``.

    ``cancelled`` (the caller's wall-clock budget or a shutdown, see
    ``deadline.bounded``) is polled at every network read, and breaks a read
    that waits on a silent server: the response's socket is shut down.
    """
    archive_url, checksums_url = release_urls(settings)
    dest_dir.mkdir(parents=True, exist_ok=True)
    cancelled = cancelled or Cancellation()
    # A back-off between attempts ends early on cancel; the next attempt then stops.
    downloader = _Downloader(settings, client, sleep=sleep or cancelled.wait, clock=clock, cancelled=cancelled)
    try:
        archive_path, actual, expected = _download_archive(downloader, dest_dir, archive_url, checksums_url)
    finally:
        downloader.close()

    return install_verified(
        settings, archive_path, actual=actual, expected=expected, source=archive_url, checksums_source=checksums_url
    )


def install_verified(
    settings: AicrSettings, archive_path: Path, *, actual: str, expected: str, source: str, checksums_source: str
) -> AicrBinary:
    """The downloaded archive (sha256 ``actual``) checked against its checksums line
    (``expected``) and the reviewed pin, then unpacked beside it: the same for a
    release from an HTTP folder and from a registry (``aicr.release_oci``)."""
    hashes: dict[str, str] = {}
    try:
        _verify(settings, actual, expected, source, checksums_source)
        found = _unpack(archive_path, archive_path.parent, source, hashes)
    finally:
        # Verified or not, the archive has served its purpose; a rejected one must
        # not stay where something could pick it up.
        archive_path.unlink(missing_ok=True)
    return _installed(settings, found, tarball_sha256=actual, source_url=source, binary_sha256=hashes[BINARY_NAME])


def download_file(
    settings: AicrSettings, url: str, dest: Path, *, max_bytes: int, cancelled: Cancellation | None = None
) -> str:
    """One release file over HTTP(S) with the fetch step's retries, timeout and budget
    (``mirror`` reads the release this way); the sha256 of what landed in ``dest``."""
    cancelled = cancelled or Cancellation()
    downloader = _Downloader(settings, None, sleep=cancelled.wait, clock=time.monotonic, cancelled=cancelled)
    try:
        return downloader.download(url, dest, max_bytes=max_bytes)
    finally:
        downloader.close()


def _installed(
    settings: AicrSettings, found: dict[str, Path], *, tarball_sha256: str, source_url: str, binary_sha256: str
) -> AicrBinary:
    """The unpacked, verified release as the run uses it (the binary made executable;
    ``binary_sha256`` taken as it was written)."""
    binary = found[BINARY_NAME]
    binary.chmod(0o755)
    remember_digest(binary, "sha256", binary_sha256)  # the provenance check's digest, already taken
    attestation = found.get(ATTESTATION_NAME)
    log.info(
        "aicr release verified",
        url=source_url,
        sha256=tarball_sha256,
        pinned=bool(settings.pin),
        attestation=attestation is not None,
    )
    return AicrBinary(
        path=binary,
        attestation_path=attestation,
        version=settings.version,
        tarball_sha256=tarball_sha256,
        source_url=source_url,
        binary_sha256=binary_sha256,
    )


def _download_archive(
    downloader: _Downloader, dest_dir: Path, archive_url: str, checksums_url: str
) -> tuple[Path, str, str]:
    """The checksums file, then the archive: the archive's path, its sha256, and
    the sha256 the checksums file lists for it."""
    archive_name = archive_url.rsplit("/", 1)[1]
    checksums_path = dest_dir / CHECKSUMS_NAME
    downloader.download(checksums_url, checksums_path, max_bytes=MAX_CHECKSUMS_BYTES)
    expected = expected_sha256(checksums_path.read_text(errors="replace"), archive_name, checksums_url)

    archive_path = dest_dir / archive_name
    actual = downloader.download(archive_url, archive_path, max_bytes=MAX_ARCHIVE_BYTES)
    return archive_path, actual, expected


def _unpack(archive_path: Path, dest_dir: Path, archive_url: str, hashes: dict[str, str]) -> dict[str, Path]:
    """The binary and its attestation from the archive's root; no binary, nothing kept."""
    allowed = {BINARY_NAME, ATTESTATION_NAME}
    found = extract_members(archive_path, dest_dir, allowed, max_member_bytes=MAX_BINARY_BYTES, hashes=hashes)
    if BINARY_NAME not in found:
        for stray in found.values():
            stray.unlink()
        raise ArchiveError(f"{archive_url}: the archive has no '{BINARY_NAME}' at its root")
    return found


def _verify(settings: AicrSettings, actual: str, expected: str, archive_url: str, checksums_url: str) -> None:
    if actual != expected:
        raise ChecksumError(f"{archive_url}: sha256 mismatch: expected {expected} (from {checksums_url}), got {actual}")
    pin = settings.pin
    if pin and actual != pin:
        raise ChecksumError(
            f"{archive_url}: sha256 {actual} does not match the reviewed {settings.arch.value} pin {pin} "
            f"(AICR_RUNNER_AICR__SHA256__{settings.arch.value.upper()}); "
            "the release changed or the pin is stale"
        )


def expected_sha256(checksums: str, archive_name: str, checksums_url: str) -> str:
    """The digest on the archive's one line of a goreleaser checksums file.

    The line is ``<64 hex><two spaces><filename>``. The filename must equal the
    archive's name exactly (``…tar.gz.sbom.json`` does not count), must appear
    exactly once, and its digest must be well-formed.
    """
    lines = [line for line in checksums.splitlines() if _names_file(line, archive_name)]
    if not lines:
        raise ChecksumError(f"{checksums_url} has no line for {archive_name}; refusing an unverifiable download")
    if len(lines) > 1:
        raise ChecksumError(f"{checksums_url} has {len(lines)} lines for {archive_name}; expected exactly one")
    digest, sep, name = lines[0].rstrip("\r").partition("  ")
    if sep != "  " or name != archive_name or not _SHA256_HEX.fullmatch(digest):
        raise ChecksumError(
            f"{checksums_url}: malformed line for {archive_name}: {lines[0]!r} "
            "(expected 64 hex characters, two spaces, the file name)"
        )
    return digest.lower()


def _names_file(line: str, name: str) -> bool:
    """Whether a checksums line is about ``name`` (whatever its digest looks like)."""
    fields = line.split()
    return len(fields) >= 2 and fields[-1].lstrip("*") == name


# --- the retrying downloader ----------------------------------------------------------


class _Downloader:
    def __init__(
        self,
        settings: AicrSettings,
        client: httpx.Client | None,
        *,
        sleep: Sleep,
        clock: Clock,
        cancelled: Cancellation,
    ) -> None:
        self._settings = settings
        self._cancelled = cancelled
        self._own_client = client is None
        self._client = client or http_client()
        self._sleep = sleep
        self._clock = clock
        self._deadline = clock() + settings.download_budget_seconds

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def _remaining(self) -> float:
        return self._deadline - self._clock()

    def download(self, url: str, dest: Path, *, max_bytes: int) -> str:
        """Stream ``url`` to ``dest`` with retries; return the sha256 of what landed."""
        attempts = self._settings.download_attempts
        budget = self._settings.download_budget_seconds
        retry = BudgetedRetry(
            _WAIT_POLICY,
            attempts=attempts,
            deadline=self._deadline,
            clock=self._clock,
            sleep=self._sleep,
            on_retry=lambda note: self._log_retry(url, note),
        )
        try:
            return retry.call(lambda: self._attempt(url, dest, max_bytes))
        except Transient as exc:
            raise DownloadError(
                f"download of {url} failed after {attempts} attempt(s) within the {budget:g}s budget"
                f"{_BUDGET_SETTING}: {exc.reason}"
            ) from exc
        except OutOfBudget as exc:
            # A wait that would reach the deadline leaves no time for another attempt.
            raise DownloadError(
                f"download of {url} gave up: {exc.asked} exceeds the {exc.remaining:.1f}s left of the "
                f"{budget:g}s budget{_BUDGET_SETTING} (last error: {exc.last.reason})"
            ) from exc

    def _log_retry(self, url: str, note: RetryNote) -> None:
        log.warning(
            "aicr download retry",
            attempt=note.attempt,
            max_attempts=self._settings.download_attempts,
            url=url,
            reason=note.reason,
            wait=round(note.wait, 3),
        )

    def _attempt(self, url: str, dest: Path, max_bytes: int) -> str:
        if self._cancelled():
            raise DownloadError(f"download of {url} was stopped before it started")
        remaining = self._remaining()
        if remaining <= 0:
            raise DownloadError(
                f"download of {url} gave up: the {self._settings.download_budget_seconds:g}s budget"
                f"{_BUDGET_SETTING} is used up"
            )
        timeout = min(self._settings.download_timeout_seconds, remaining)
        partial = dest.with_name(f".{dest.name}.partial")
        try:
            with self._client.stream("GET", url, timeout=timeout, follow_redirects=True) as response:
                forget = self._cancelled.on_cancel(lambda: shut_down_response(response))
                try:
                    self._check_status(url, response)
                    # A fresh file and hasher on every attempt: a retry starts at byte 0.
                    with partial.open("wb") as out:
                        digest = self._stream(url, response, out, max_bytes)
                finally:
                    forget()
        except httpx.HTTPError as exc:
            partial.unlink(missing_ok=True)
            if self._cancelled():  # the read was broken on purpose: not a fault to retry
                raise DownloadError(f"download of {url} was stopped") from exc
            raise self._translate(url, exc) from exc
        except (httpx.InvalidURL, UnicodeError) as exc:  # UnicodeError: a host IDNA cannot encode
            partial.unlink(missing_ok=True)
            raise DownloadError(f"download of {url} failed: invalid URL ({exc}); not retried") from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(dest)
        return digest

    def _check_status(self, url: str, response: httpx.Response) -> None:
        status = response.status_code
        if status == 200:
            return
        if status in RETRYABLE_STATUS:
            raise Transient(
                f"HTTP {status} from {response.url}",
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
            )
        raise DownloadError(f"download of {url} failed: HTTP {status} from {response.url}; not retried")

    def _stream(self, url: str, response: httpx.Response, out: IO[bytes], max_bytes: int) -> str:
        digest = hashlib.sha256()
        received = 0
        # No chunk size: each chunk is what one read returned, so a server that
        # drips bytes cannot keep this loop from seeing the budget or a cancel.
        for chunk in response.iter_bytes():
            if self._cancelled():
                raise DownloadError(f"download of {url} was stopped ({received} bytes received)")
            received += len(chunk)
            if received > max_bytes:
                raise DownloadError(f"download of {url} exceeds {max_bytes} bytes; refusing it")
            if self._remaining() <= 0:
                raise DownloadError(
                    f"download of {url} did not finish within the "
                    f"{self._settings.download_budget_seconds:g}s download budget{_BUDGET_SETTING} "
                    f"({received} bytes received)"
                )
            digest.update(chunk)
            out.write(chunk)
        return digest.hexdigest()

    @staticmethod
    def _translate(url: str, exc: httpx.HTTPError) -> Exception:
        if is_certificate_verification_failure(exc):
            return DownloadError(f"download of {url} failed: TLS certificate verification failure ({exc}); not retried")
        if isinstance(exc, _TRANSIENT_ERRORS):
            return Transient(f"{type(exc).__name__}: {exc or 'no detail'} ({url})")
        return DownloadError(f"download of {url} failed: {type(exc).__name__}: {exc}; not retried")
