"""The aicr release files of the mirror's list become one artifact item: downloaded,
checked against the checksums file (and any recorded sha256), pushed as titled
layers; every fault is a named copy failure. oras is a fake here (the real one:
tests/integration/test_release_artifact.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import respx

from aicr_runner.aicr.release_oci import ARCHIVE_MEDIA_TYPE, ARTIFACT_TYPE, CHECKSUMS_MEDIA_TYPE
from aicr_runner.errors import InterruptedRun
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.release_artifact import release_reference, with_release_artifact
from tests.support.hostile_server import ReleaseServer
from tests.unit.aicr.test_release import AMD64_TAR, AMD64_URL, ARM64_TAR, ARM64_URL, SUMS_URL, goreleaser_sums, settings

DIGEST = "sha256:" + "ab" * 32


class FakePusher:
    def __init__(self) -> None:
        self.pushed: list[tuple[str, dict[str, bytes], list[tuple[str, str]], str]] = []

    def push_layout(self, layout: str, files_dir: Path, files: Sequence[tuple[str, str]], artifact_type: str) -> str:
        contents = {name: (files_dir / name).read_bytes() for name, _ in files}
        self.pushed.append((layout, contents, list(files), artifact_type))
        return DIGEST


@pytest.fixture
def served() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        router.get(AMD64_URL).mock(return_value=httpx.Response(200, content=AMD64_TAR))
        router.get(ARM64_URL).mock(return_value=httpx.Response(200, content=ARM64_TAR))
        router.get(SUMS_URL).mock(return_value=httpx.Response(200, content=goreleaser_sums()))
        yield router


def files(amd64_digest: str = "") -> list[Item]:
    return [
        Item(Kind.FILE, AMD64_URL, ("aicr-runner fetch step",), amd64_digest),
        Item(Kind.FILE, ARM64_URL, ("aicr-runner fetch step",)),
        Item(Kind.FILE, SUMS_URL, ("aicr-runner fetch step",)),
    ]


IMAGE = Item(Kind.IMAGE, "ghcr.io/nvidia-aicr/aicr-runner:0.1.0", ("aicr-runner Job",))


def test_the_release_files_become_one_artifact_of_titled_layers(served: respx.MockRouter, tmp_path: Path) -> None:
    pusher = FakePusher()
    items, sources = with_release_artifact([*files(), IMAGE], settings(), "1.2.0", tmp_path, pusher)
    assert release_reference("1.2.0") == "nvidia/aicr/release:v1.2.0"
    assert [(i.kind, i.reference) for i in items] == [
        (Kind.IMAGE, IMAGE.reference),
        (Kind.ARTIFACT, "nvidia/aicr/release:v1.2.0"),
    ]
    artifact = items[1]
    assert artifact.digest == DIGEST
    assert artifact.size == len(AMD64_TAR) + len(ARM64_TAR) + len(goreleaser_sums())
    assert sources == {"nvidia/aicr/release:v1.2.0": f"oci-layout:{tmp_path / 'layout'}:v1.2.0"}
    (layout, contents, typed, artifact_type) = pusher.pushed[0]
    assert layout == sources[artifact.reference]
    assert artifact_type == ARTIFACT_TYPE
    assert typed == [
        ("aicr_1.2.0_linux_amd64.tar.gz", ARCHIVE_MEDIA_TYPE),
        ("aicr_1.2.0_linux_arm64.tar.gz", ARCHIVE_MEDIA_TYPE),
        ("aicr_checksums.txt", CHECKSUMS_MEDIA_TYPE),
    ]
    assert contents["aicr_1.2.0_linux_amd64.tar.gz"] == AMD64_TAR


def test_a_list_without_release_files_is_left_as_it_is(tmp_path: Path) -> None:
    pusher = FakePusher()
    assert with_release_artifact([IMAGE], settings(), "1.2.0", tmp_path, pusher) == ([IMAGE], {})
    assert pusher.pushed == []


def test_an_archive_that_is_not_its_checksums_line_is_never_pushed(served: respx.MockRouter, tmp_path: Path) -> None:
    served.get(SUMS_URL).mock(return_value=httpx.Response(200, content=goreleaser_sums(amd64=b"another")))
    pusher = FakePusher()
    with pytest.raises(CopyError) as caught:
        with_release_artifact(files(), settings(), "1.2.0", tmp_path, pusher)
    assert caught.value.reason is MirrorExit.DIGEST_MISMATCH
    assert caught.value.reference == AMD64_URL
    assert "aicr_checksums.txt lists" in caught.value.message
    assert pusher.pushed == []


def test_a_recorded_digest_is_enforced(served: respx.MockRouter, tmp_path: Path) -> None:
    with pytest.raises(CopyError, match="recorded sha256:0000") as caught:
        with_release_artifact(files("sha256:" + "0" * 64), settings(), "1.2.0", tmp_path, FakePusher())
    assert caught.value.exit_code == MirrorExit.DIGEST_MISMATCH
    good = f"sha256:{hashlib.sha256(AMD64_TAR).hexdigest()}"
    assert with_release_artifact(files(good), settings(), "1.2.0", tmp_path / "ok", FakePusher())[1]


def test_a_release_file_not_served_is_a_source_failure(served: respx.MockRouter, tmp_path: Path) -> None:
    served.get(ARM64_URL).mock(return_value=httpx.Response(404))
    with pytest.raises(CopyError, match="HTTP 404") as caught:
        with_release_artifact(files(), settings(), "1.2.0", tmp_path, FakePusher())
    assert caught.value.reason is MirrorExit.SOURCE_UNAVAILABLE


def test_a_list_without_the_checksums_file_is_refused(served: respx.MockRouter, tmp_path: Path) -> None:
    with pytest.raises(CopyError, match="no checksums file") as caught:
        with_release_artifact(files()[:2], settings(), "1.2.0", tmp_path, FakePusher())
    assert caught.value.reason is MirrorExit.NOT_FOUND


def test_a_shutdown_stops_a_download_the_server_stalls(tmp_path: Path) -> None:
    """SIGTERM during the release download (a server that sends a byte and falls
    silent): the download's socket is shut and the mirror stops at once, naming it."""
    (tmp_path / "srv").mkdir()
    with ReleaseServer(tmp_path / "srv") as server:
        stalled = Item(Kind.FILE, f"{server.url}/stall/{AMD64_URL.rsplit('/', 1)[1]}", ("aicr-runner fetch step",))
        with pytest.raises(InterruptedRun, match="the download of"):
            with_release_artifact(
                [stalled],
                settings(download_budget_seconds=600),
                "v0.11.1",
                tmp_path / "work",
                FakePusher(),
                interrupted=server.stall_started.is_set,  # the SIGTERM arrives once the server has gone silent
            )
        assert server.stalled_client_left.wait(10), "the stalled connection was left open"
