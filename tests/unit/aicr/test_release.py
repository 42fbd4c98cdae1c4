"""Download + verification of the aicr release: respx for the protocol cases, a
real loopback server for the transport path (resets, 503 + Retry-After, TLS)."""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import io
import json
import socket
import ssl
import stat
import struct
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from aicr_runner import logs as runner_logs
from aicr_runner.aicr import release
from aicr_runner.aicr.binary import AicrBinary, use_preinstalled
from aicr_runner.aicr.release import fetch_aicr
from aicr_runner.errors import ArchiveError, ChecksumError, DownloadError, ExitCode, ToolError
from aicr_runner.net.retry import parse_retry_after
from aicr_runner.settings.config import AicrSettings, Arch, LogFormat, Sha256Pins
from tests.support.hostile_server import self_signed_certificate
from tests.support.loopback import LoopbackServer

BASE = "https://releases.example.test/NVIDIA/aicr/releases/download"
AMD64_URL = f"{BASE}/v1.2.0/aicr_1.2.0_linux_amd64.tar.gz"
ARM64_URL = f"{BASE}/v1.2.0/aicr_1.2.0_linux_arm64.tar.gz"
SUMS_URL = f"{BASE}/v1.2.0/aicr_checksums.txt"
BINARY = b"#!/bin/sh\necho 'aicr version v1.2.0'\n"
ATTESTATION = b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def release_tar(
    *extra: tarfile.TarInfo | tuple[str, bytes], binary: bytes | None = BINARY, attestation: bool = True
) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        files: list[tuple[str, bytes]] = []
        if binary is not None:
            files.append(("aicr", binary))
        if attestation:
            files.append(("aicr-attestation.sigstore.json", ATTESTATION))
        for item in extra:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
            else:
                files.append(item)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


AMD64_TAR = release_tar()
ARM64_TAR = release_tar(binary=BINARY + b"# arm64\n")


def checksums(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def goreleaser_sums(amd64: bytes = AMD64_TAR, arm64: bytes = ARM64_TAR) -> bytes:
    return checksums(
        f"{sha256(b'sbom')}  aicr_1.2.0_linux_amd64.sbom.json",
        f"{sha256(amd64)}  aicr_1.2.0_linux_amd64.tar.gz",
        f"{sha256(arm64)}  aicr_1.2.0_linux_arm64.tar.gz",
        f"{sha256(b'darwin')}  aicr_1.2.0_darwin_arm64.tar.gz",
    )


def settings(**overrides: Any) -> AicrSettings:
    values: dict[str, Any] = {
        "version": "1.2.0",
        "arch": Arch.AMD64,
        "release_base_url": BASE,
        "download_attempts": 5,
        "download_timeout_seconds": 5.0,
        "download_budget_seconds": 600.0,
    }
    values.update(overrides)
    return AicrSettings(**values)


@dataclass
class FakeTime:
    """Injected sleep + clock: sleeping advances the clock, nothing really waits."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


def fetch(
    tmp_path: Path, fake_time: FakeTime, s: AicrSettings | None = None, client: httpx.Client | None = None
) -> AicrBinary:
    return fetch_aicr(s or settings(), tmp_path / "aicr", client, sleep=fake_time.sleep, clock=fake_time.clock)


class ResettingStream(httpx.SyncByteStream):
    """A body that breaks off after ``chunks`` chunks, like a reset connection."""

    def __init__(self, data: bytes, chunks: int, chunk_size: int = 64) -> None:
        self._data = data
        self._chunks = chunks
        self._chunk_size = chunk_size

    def __iter__(self) -> Iterator[bytes]:
        for index in range(self._chunks):
            yield self._data[index * self._chunk_size : (index + 1) * self._chunk_size]
        raise httpx.ReadError("[Errno 104] Connection reset by peer")


def tls_verification_error() -> httpx.ConnectError:
    error = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    error.__cause__ = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate")
    return error


# --- success paths -------------------------------------------------------------------


def test_success_extracts_a_verified_executable_binary(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    got = fetch(tmp_path, fake_time)

    dest = tmp_path / "aicr"
    assert got == AicrBinary(
        path=dest / "aicr",
        attestation_path=dest / "aicr-attestation.sigstore.json",
        version="v1.2.0",
        tarball_sha256=sha256(AMD64_TAR),
        source_url=AMD64_URL,
        binary_sha256=sha256(BINARY),
    )
    assert got.path.read_bytes() == BINARY
    assert stat.S_IMODE(got.path.stat().st_mode) == 0o755
    # the attestation sidecar stays beside the binary (aicr bundle --attest needs it)
    assert got.attestation_path is not None
    assert got.attestation_path.read_bytes() == ATTESTATION
    assert not (dest / "aicr_1.2.0_linux_amd64.tar.gz").exists()
    assert not list(dest.glob(".*partial"))
    assert fake_time.sleeps == []


def test_per_request_timeout_is_the_configured_one(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    fetch(tmp_path, fake_time, settings(download_timeout_seconds=7.5))

    timeout = route.calls.last.request.extensions["timeout"]
    assert timeout == {"connect": 7.5, "read": 7.5, "write": 7.5, "pool": 7.5}


def test_redirect_is_followed_even_by_a_client_that_does_not_by_default(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    cdn = "https://objects.cdn.example.test/release-asset/12345"
    mock.get(SUMS_URL).respond(302, headers={"Location": f"{cdn}-sums"})
    mock.get(f"{cdn}-sums").respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(302, headers={"Location": cdn})
    mock.get(cdn).respond(200, content=AMD64_TAR)

    with httpx.Client() as client:  # follow_redirects defaults to False
        got = fetch(tmp_path, fake_time, client=client)
        assert not client.is_closed  # a caller's client is the caller's to close

    assert got.tarball_sha256 == sha256(AMD64_TAR)
    assert got.source_url == AMD64_URL


def test_archive_without_attestation_is_accepted(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    tar = release_tar(attestation=False)
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums(amd64=tar))
    mock.get(AMD64_URL).respond(200, content=tar)

    got = fetch(tmp_path, fake_time)

    assert got.attestation_path is None
    assert got.path.read_bytes() == BINARY


# --- checksums and pins ----------------------------------------------------------------


def test_checksum_mismatch_names_url_and_both_digests(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    tampered = release_tar(binary=b"evil")
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=tampered)

    with pytest.raises(ChecksumError) as caught:
        fetch(tmp_path, fake_time)

    message = str(caught.value)
    assert AMD64_URL in message
    assert sha256(AMD64_TAR) in message
    assert sha256(tampered) in message
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not (tmp_path / "aicr" / "aicr").exists()
    assert not (tmp_path / "aicr" / "aicr_1.2.0_linux_amd64.tar.gz").exists()  # the unverified archive is gone
    assert fake_time.sleeps == []  # a mismatch is never retried


def test_an_archive_that_does_not_match_leaves_nothing_unpacked(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    """A mismatch leaves none of the archive's files behind, and does not touch a
    binary already in place (nothing is unpacked before the digest matches)."""
    dest = tmp_path / "aicr"
    dest.mkdir()
    (dest / "aicr").write_bytes(b"the binary of an earlier run")
    tampered = release_tar(binary=b"evil")
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=tampered)

    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        fetch(tmp_path, fake_time)

    assert sorted(p.name for p in dest.iterdir()) == ["aicr", "aicr_checksums.txt"]
    assert (dest / "aicr").read_bytes() == b"the binary of an earlier run"


def test_an_unsafe_archive_that_does_not_match_is_a_checksum_failure(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    """The digest is judged before the archive is opened: an archive that is both
    tampered and unsafe is a checksum mismatch, and nothing of it is written."""
    unsafe = release_tar(("../../etc/cron.d/aicr", b"* * * * * root sh"))
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=unsafe)

    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        fetch(tmp_path, fake_time)

    assert not (tmp_path.parent / "etc").exists()
    assert sorted(p.name for p in (tmp_path / "aicr").iterdir()) == ["aicr_checksums.txt"]


def test_a_retried_archive_leaves_only_the_release_behind(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    big = release_tar(("padding.bin", bytes(range(256)) * 4096))  # broken off halfway
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums(amd64=big))
    mock.get(AMD64_URL).side_effect = [
        httpx.Response(200, stream=ResettingStream(big, chunks=len(big) // 128, chunk_size=64)),
        httpx.Response(200, content=big),
    ]

    got = fetch(tmp_path, fake_time)

    assert got.tarball_sha256 == sha256(big)
    assert got.path.read_bytes() == BINARY
    assert sorted(p.name for p in (tmp_path / "aicr").iterdir()) == [
        "aicr",
        "aicr-attestation.sigstore.json",
        "aicr_checksums.txt",
    ]


def test_the_provenance_check_reuses_the_digest_taken_while_unpacking(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aicr_runner.net import digests

    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)
    got = fetch(tmp_path, fake_time)

    def no_second_read(path: Path, algorithm: str) -> str:
        raise AssertionError(f"{path} read again for its {algorithm}")

    monkeypatch.setattr(digests, "file_digest", no_second_read)
    assert digests.binary_digest(got.path) == sha256(BINARY)
    got.path.chmod(0o700)  # a changed file is hashed afresh
    with pytest.raises(AssertionError, match="read again"):
        digests.binary_digest(got.path)


def test_missing_line_fails_before_the_archive_is_downloaded(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(
        200,
        content=checksums(
            # near misses that must not count as the archive's line
            f"{sha256(AMD64_TAR)}  aicr_1.2.0_linux_amd64.tar.gz.sbom.json",
            f"{sha256(AMD64_TAR)}  old-aicr_1.2.0_linux_amd64.tar.gz",
            f"{sha256(ARM64_TAR)}  aicr_1.2.0_linux_arm64.tar.gz",
        ),
    )
    archive = mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    with pytest.raises(ChecksumError, match=r"no line for aicr_1\.2\.0_linux_amd64\.tar\.gz") as caught:
        fetch(tmp_path, fake_time)

    assert SUMS_URL in str(caught.value)
    assert archive.call_count == 0


def test_duplicate_lines_are_refused_even_when_identical(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    line = f"{sha256(AMD64_TAR)}  aicr_1.2.0_linux_amd64.tar.gz"
    mock.get(SUMS_URL).respond(200, content=checksums(line, line))
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    with pytest.raises(ChecksumError, match=r"2 lines for aicr_1\.2\.0_linux_amd64\.tar\.gz; expected exactly one"):
        fetch(tmp_path, fake_time)


@pytest.mark.parametrize(
    "line",
    [
        f"{sha256(AMD64_TAR)[:-1]}  aicr_1.2.0_linux_amd64.tar.gz",  # 63 hex characters
        f"{sha256(AMD64_TAR)[:-1]}g  aicr_1.2.0_linux_amd64.tar.gz",  # not hex
        f"{sha256(AMD64_TAR)} aicr_1.2.0_linux_amd64.tar.gz",  # one space
        f"{sha256(AMD64_TAR)}  *aicr_1.2.0_linux_amd64.tar.gz",  # binary-mode marker
        f"sha256:{sha256(AMD64_TAR)}  aicr_1.2.0_linux_amd64.tar.gz",
    ],
)
def test_malformed_line_is_refused(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, line: str) -> None:
    mock.get(SUMS_URL).respond(200, content=checksums(line))
    archive = mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    with pytest.raises(ChecksumError, match="malformed line"):
        fetch(tmp_path, fake_time)
    assert archive.call_count == 0


def test_uppercase_hex_and_crlf_lines_are_accepted(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    body = f"{sha256(AMD64_TAR).upper()}  aicr_1.2.0_linux_amd64.tar.gz\r\n".encode()
    mock.get(SUMS_URL).respond(200, content=body)
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    assert fetch(tmp_path, fake_time).tarball_sha256 == sha256(AMD64_TAR)


def test_strict_pin_mismatch_for_the_selected_arch(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    stale_pin = sha256(b"the previous release")
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    with pytest.raises(ChecksumError) as caught:
        fetch(tmp_path, fake_time, settings(sha256=Sha256Pins(amd64=stale_pin)))

    message = str(caught.value)
    assert stale_pin in message
    assert sha256(AMD64_TAR) in message
    assert "AICR_RUNNER_AICR__SHA256__AMD64" in message
    assert not (tmp_path / "aicr" / "aicr").exists()
    assert not (tmp_path / "aicr" / "aicr_1.2.0_linux_amd64.tar.gz").exists()


def test_matching_pin_passes(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, content=AMD64_TAR)

    got = fetch(tmp_path, fake_time, settings(sha256=Sha256Pins(amd64=sha256(AMD64_TAR))))

    assert got.tarball_sha256 == sha256(AMD64_TAR)


def test_arm64_run_uses_the_arm64_archive_and_never_the_amd64_pin(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    amd64 = mock.get(AMD64_URL).respond(200, content=AMD64_TAR)
    mock.get(ARM64_URL).respond(200, content=ARM64_TAR)

    # A wrong amd64 pin is irrelevant to an arm64 run.
    got = fetch(tmp_path / "a", fake_time, settings(arch=Arch.ARM64, sha256=Sha256Pins(amd64=sha256(b"not this one"))))
    assert got.source_url == ARM64_URL
    assert got.tarball_sha256 == sha256(ARM64_TAR)
    assert amd64.call_count == 0

    # ...and an amd64 pin that happens to equal the arm64 digest does not satisfy
    # a wrong arm64 pin: only the selected arch's pin is consulted.
    with pytest.raises(ChecksumError, match="reviewed arm64 pin"):
        fetch(
            tmp_path / "b",
            fake_time,
            settings(arch=Arch.ARM64, sha256=Sha256Pins(amd64=sha256(ARM64_TAR), arm64=sha256(b"stale"))),
        )


# --- retries -------------------------------------------------------------------------------


def test_mid_stream_reset_is_retried_and_rehashed_from_byte_zero(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL)
    route.side_effect = [
        httpx.Response(200, stream=ResettingStream(AMD64_TAR, chunks=3)),
        httpx.Response(200, content=AMD64_TAR),
    ]

    pod_log = io.StringIO()
    runner_logs.configure(LogFormat.JSON, stream=pod_log)
    try:
        got = fetch(tmp_path, fake_time)
    finally:
        runner_logs.configure(LogFormat.CONSOLE)
    logs = [json.loads(line) for line in pod_log.getvalue().splitlines()]

    assert route.call_count == 2
    assert got.tarball_sha256 == sha256(AMD64_TAR)  # a carried-over hasher would not match
    assert got.path.read_bytes() == BINARY
    assert len(fake_time.sleeps) == 1
    retries = [entry for entry in logs if entry["event"] == "aicr download retry"]
    assert len(retries) == 1
    assert retries[0]["attempt"] == 1
    assert retries[0]["url"] == AMD64_URL
    assert "ReadError" in retries[0]["reason"]
    assert retries[0]["wait"] == pytest.approx(fake_time.sleeps[0], abs=0.001)


def test_503_retry_after_seconds_and_http_date_are_honoured(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    in_30s = email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30), usegmt=True)
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL)
    route.side_effect = [
        httpx.Response(503, headers={"Retry-After": "7"}),
        httpx.Response(503, headers={"Retry-After": in_30s}),
        httpx.Response(200, content=AMD64_TAR),
    ]

    got = fetch(tmp_path, fake_time)

    assert got.tarball_sha256 == sha256(AMD64_TAR)
    assert route.call_count == 3
    assert fake_time.sleeps[0] == 7
    assert 28 <= fake_time.sleeps[1] <= 30


def test_429_without_retry_after_backs_off_exponentially(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL)
    route.side_effect = [httpx.Response(429), httpx.Response(429), httpx.Response(200, content=AMD64_TAR)]

    fetch(tmp_path, fake_time)

    assert route.call_count == 3
    first, second = fake_time.sleeps
    assert 1 <= first <= 2  # initial 1 s plus up to 1 s jitter
    assert 2 <= second <= 3


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
    ],
)
def test_transport_errors_are_retried(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, error: Exception
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL)
    route.side_effect = [error, httpx.Response(200, content=AMD64_TAR)]

    assert fetch(tmp_path, fake_time).tarball_sha256 == sha256(AMD64_TAR)
    assert route.call_count == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410])
def test_other_4xx_is_not_retried(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, status: int) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL).respond(status)

    with pytest.raises(DownloadError, match=f"HTTP {status}") as caught:
        fetch(tmp_path, fake_time)

    assert route.call_count == 1
    assert fake_time.sleeps == []
    assert AMD64_URL in str(caught.value)
    assert "not retried" in str(caught.value)
    assert caught.value.exit_code == ExitCode.DOWNLOAD_FAILED


class TlsFailingTransport(httpx.BaseTransport):
    """Raises what httpx raises for an untrusted certificate. (respx re-raises side
    effects with a new cause, which would hide the ssl error this test is about.)"""

    def __init__(self) -> None:
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        raise tls_verification_error()


def test_tls_verification_failure_is_not_retried(tmp_path: Path, fake_time: FakeTime) -> None:
    transport = TlsFailingTransport()

    with httpx.Client(transport=transport) as client, pytest.raises(DownloadError) as caught:
        fetch(tmp_path, fake_time, client=client)

    assert transport.calls == 1
    assert fake_time.sleeps == []
    assert "certificate verification failure" in str(caught.value)
    assert "not retried" in str(caught.value)
    assert SUMS_URL in str(caught.value)


def test_certificate_failure_is_found_anywhere_in_the_chain() -> None:
    verify_error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    wrapped = httpx.ConnectError("outer")
    wrapped.__context__ = RuntimeError("inner")
    wrapped.__context__.__cause__ = verify_error
    assert release.is_certificate_verification_failure(wrapped)
    assert not release.is_certificate_verification_failure(httpx.ConnectError("[Errno 111] refused"))
    looped = httpx.ConnectError("loop")
    looped.__cause__ = looped
    assert not release.is_certificate_verification_failure(looped)


def test_attempt_limit_bounds_the_retries(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL)
    route.side_effect = httpx.ReadTimeout("timed out")

    with pytest.raises(DownloadError, match="after 3 attempt") as caught:
        fetch(tmp_path, fake_time, settings(download_attempts=3))

    assert route.call_count == 3
    assert len(fake_time.sleeps) == 2
    assert "ReadTimeout" in str(caught.value)


def test_budget_exhausted_ends_retries_within_bounded_attempts(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL).respond(503)

    with pytest.raises(DownloadError, match="budget") as caught:
        fetch(tmp_path, fake_time, settings(download_attempts=20, download_budget_seconds=10))

    assert 2 <= route.call_count < 20
    assert sum(fake_time.sleeps) < 10  # never sleeps past the budget
    assert "HTTP 503" in str(caught.value)
    assert caught.value.exit_code == ExitCode.DOWNLOAD_FAILED


def test_retry_after_beyond_the_budget_gives_up_without_sleeping(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    route = mock.get(AMD64_URL).respond(503, headers={"Retry-After": "3600"})

    with pytest.raises(DownloadError, match=r"Retry-After 3600s exceeds the .* left of the 60s budget"):
        fetch(tmp_path, fake_time, settings(download_budget_seconds=60))

    assert route.call_count == 1
    assert fake_time.sleeps == []


def test_the_budget_also_bounds_a_slow_download(tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter) -> None:
    class SlowStream(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for _ in range(100):
                fake_time.now += 1  # each chunk takes a second
                yield b"x" * 10

    mock.get(SUMS_URL).respond(200, content=goreleaser_sums())
    mock.get(AMD64_URL).respond(200, stream=SlowStream())

    named = r"did not finish within the 30s download budget \(AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS\)"
    with pytest.raises(DownloadError, match=named):
        fetch(tmp_path, fake_time, settings(download_budget_seconds=30))


@pytest.mark.parametrize("base", ["https://releases.example.test:port/x", "https://releases..example.test/x"])
def test_invalid_url_is_a_download_error_not_retried(tmp_path: Path, fake_time: FakeTime, base: str) -> None:
    # The settings refuse such a URL when they load; the download refuses it too.
    unchecked = AicrSettings.model_construct(**{**vars(settings()), "release_base_url": base})
    with pytest.raises(DownloadError, match="invalid URL"):
        fetch(tmp_path, fake_time, unchecked)
    assert fake_time.sleeps == []


def test_oversized_download_is_refused(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release, "MAX_CHECKSUMS_BYTES", 100)
    mock.get(SUMS_URL).respond(200, content=b"x" * 101)

    with pytest.raises(DownloadError, match="exceeds 100 bytes"):
        fetch(tmp_path, fake_time)


# --- archive shape ------------------------------------------------------------------------


@pytest.fixture
def small_member_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release, "MAX_BINARY_BYTES", 1024)


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("tar", "why"),
    [
        (release_tar(_link("aicr-attestation.sigstore.json", "/etc/shadow"), attestation=False), "symlink"),
        (release_tar(_link("helper", "aicr", tarfile.LNKTYPE)), "hardlink"),
        (release_tar(("../../etc/cron.d/aicr", b"* * * * * root sh")), "'..'"),
        (release_tar(("bloat.bin", b"\0" * 2048)), "over the limit of 1024"),
        (release_tar(binary=None), "no 'aicr'"),
    ],
)
@pytest.mark.usefixtures("small_member_limit")
def test_unsafe_or_unexpected_archives_are_refused(
    tmp_path: Path, fake_time: FakeTime, mock: respx.MockRouter, tar: bytes, why: str
) -> None:
    mock.get(SUMS_URL).respond(200, content=goreleaser_sums(amd64=tar))
    mock.get(AMD64_URL).respond(200, content=tar)

    with pytest.raises(ArchiveError, match=why) as caught:
        fetch(tmp_path, fake_time)

    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not (tmp_path.parent / "etc").exists()
    # neither the rejected archive nor anything taken out of it is left behind
    assert sorted(p.name for p in (tmp_path / "aicr").iterdir()) == ["aicr_checksums.txt"]


# --- Retry-After parsing -------------------------------------------------------------------


def test_parse_retry_after() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("120", now=now) == 120
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:45 GMT", now=now) == 45
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now=now) == 0  # in the past
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after("-5", now=now) is None
    assert parse_retry_after(None) is None


# --- preinstalled binary --------------------------------------------------------------------


def test_preinstalled_binary_is_verified(tmp_path: Path) -> None:
    binary = tmp_path / "aicr"
    binary.write_bytes(BINARY)
    binary.chmod(0o755)
    (tmp_path / "aicr-attestation.sigstore.json").write_bytes(ATTESTATION)

    got = use_preinstalled(binary, sha256(BINARY).upper())

    assert got.path == binary
    assert got.attestation_path == tmp_path / "aicr-attestation.sigstore.json"
    assert got.binary_sha256 == sha256(BINARY)


def test_preinstalled_binary_without_hash_is_used_as_is(tmp_path: Path) -> None:
    binary = tmp_path / "aicr"
    binary.write_bytes(BINARY)
    binary.chmod(0o700)
    got = use_preinstalled(str(binary), "")
    assert got.attestation_path is None
    assert got.source_url == str(binary)


def test_preinstalled_binary_hash_mismatch_fails_closed(tmp_path: Path) -> None:
    binary = tmp_path / "aicr"
    binary.write_bytes(b"swapped")
    binary.chmod(0o755)
    with pytest.raises(ChecksumError) as caught:
        use_preinstalled(binary, sha256(BINARY))
    assert sha256(BINARY) in str(caught.value)
    assert sha256(b"swapped") in str(caught.value)


@pytest.mark.parametrize("setup", ["missing", "directory", "not-executable"])
def test_preinstalled_binary_must_exist_and_be_executable(tmp_path: Path, setup: str) -> None:
    binary = tmp_path / "aicr"
    if setup == "directory":
        binary.mkdir()
    elif setup == "not-executable":
        binary.write_bytes(BINARY)
        binary.chmod(0o644)
    with pytest.raises(ToolError, match=str(binary)) as caught:
        use_preinstalled(binary, "")
    assert caught.value.exit_code == ExitCode.TOOL_MISSING


# --- the real transport path ---------------------------------------------------------------

Behaviour = Callable[[BaseHTTPRequestHandler], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server: _ScriptedServer = self.server  # type: ignore[assignment]
        server.requests.append(self.path)
        script = server.script.get(self.path, [])
        behaviour = script.pop(0) if len(script) > 1 else script[0]
        behaviour(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ScriptedServer(LoopbackServer):
    def __init__(self, script: dict[str, list[Behaviour]]) -> None:
        super().__init__(_Handler)
        self.script = script
        self.requests: list[str] = []
        self.connections = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()


def send(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Behaviour:
    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behave


def reset_after(body: bytes, sent: int) -> Behaviour:
    """Announce the whole body, send part of it, then reset the connection (RST)."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:sent])
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.close_connection = True

    return behave


@pytest.fixture
def serve() -> Iterator[Callable[..., _ScriptedServer]]:
    servers: list[_ScriptedServer] = []

    def start(script: dict[str, list[Behaviour]], tls: ssl.SSLContext | None = None) -> _ScriptedServer:
        server = _ScriptedServer(script)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_real_transport_reset_then_503_retry_after_then_success(
    tmp_path: Path, fake_time: FakeTime, serve: Callable[..., _ScriptedServer]
) -> None:
    archive_path = "/v1.2.0/aicr_1.2.0_linux_amd64.tar.gz"
    server = serve(
        {
            "/v1.2.0/aicr_checksums.txt": [send(200, goreleaser_sums())],
            archive_path: [
                reset_after(AMD64_TAR, sent=len(AMD64_TAR) // 2),
                send(503, b"busy", {"Retry-After": "4"}),
                send(200, AMD64_TAR),
            ],
        }
    )
    base = f"http://127.0.0.1:{server.server_address[1]}"

    got = fetch(tmp_path, fake_time, settings(release_base_url=base))

    assert got.tarball_sha256 == sha256(AMD64_TAR)
    assert got.path.read_bytes() == BINARY
    assert server.requests.count(archive_path) == 3
    assert len(fake_time.sleeps) == 2
    assert 1 <= fake_time.sleeps[0] <= 2  # back-off after the reset
    assert fake_time.sleeps[1] == 4  # the server's Retry-After


def test_real_transport_404_is_not_retried(
    tmp_path: Path, fake_time: FakeTime, serve: Callable[..., _ScriptedServer]
) -> None:
    server = serve({"/v1.2.0/aicr_checksums.txt": [send(404, b"Not Found")]})
    base = f"http://127.0.0.1:{server.server_address[1]}"

    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(tmp_path, fake_time, settings(release_base_url=base))

    assert server.requests == ["/v1.2.0/aicr_checksums.txt"]


def test_real_tls_certificate_failure_is_not_retried(
    tmp_path: Path, fake_time: FakeTime, serve: Callable[..., _ScriptedServer]
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert, key = self_signed_certificate(tmp_path)
    context.load_cert_chain(cert, key)
    server = serve({"/v1.2.0/aicr_checksums.txt": [send(200, goreleaser_sums())]}, tls=context)
    base = f"https://127.0.0.1:{server.server_address[1]}"

    with pytest.raises(DownloadError, match="certificate verification failure") as caught:
        fetch(tmp_path, fake_time, settings(release_base_url=base))

    assert release.is_certificate_verification_failure(caught.value.__cause__ or caught.value)
    assert server.connections == 1
    assert server.requests == []
    assert fake_time.sleeps == []


def test_the_lazily_loaded_ca_bundle_still_refuses_an_untrusted_https_server(tmp_path: Path) -> None:
    """Plain-HTTP mirrors skip loading the CA bundle; https:// keeps full verification."""

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    cert, key = self_signed_certificate(tmp_path)
    server = LoopbackServer(Ok)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(DownloadError, match="TLS certificate verification failure"):
            fetch_aicr(settings(release_base_url=url, download_attempts=1), tmp_path / "out")
    finally:
        server.shutdown()
        server.server_close()


def test_the_proxy_environment_is_honoured(
    tmp_path: Path, fake_time: FakeTime, serve: Callable[..., _ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy named by the environment gets the request (the absolute URL); the
    mirror's own name is never resolved here."""
    proxy = serve({"http://release.invalid/v1.2.0/aicr_checksums.txt": [send(404, b"Not Found")]})
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", "")

    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(tmp_path, fake_time, settings(release_base_url="http://release.invalid"))

    assert proxy.requests == ["http://release.invalid/v1.2.0/aicr_checksums.txt"]


def test_the_download_imports_no_settings_root() -> None:
    """The release download's settings group comes without pydantic-settings (the settings root's library)."""
    import subprocess
    import sys

    probe = (
        "import sys; from aicr_runner.settings.config import AicrSettings; import aicr_runner.aicr.release; "
        "AicrSettings(version='v1.2.0'); "
        "print(sorted(m for m in ('httpx', 'pydantic_settings', 'requests') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['httpx']", result.stderr
