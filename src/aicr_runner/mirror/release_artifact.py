"""The aicr release as one OCI artifact in the mirror, so a site serves one registry only.

``mirror --to`` and ``--to-archive`` download the release files of the list (the
linux archive of each listed architecture, ``aicr_checksums.txt``) over HTTP(S)
with the fetch step's downloader, check each archive against its one line of the
checksums file and any sha256 the list recorded, and ``oras push`` them into an
OCI image layout as one artifact: a layer per file titled with its name
(``aicr.release_oci`` reads it by those titles). Its creation annotation is
fixed, so the same files give the same manifest digest: a second run finds the
artifact in the target and sends nothing. The artifact then goes through the copy
like every item (``copy.copy_all``: copied from the layout, checked by digest),
its item's reference ``nvidia/aicr/release:<tag>``, so it lands at
``<target>/nvidia/aicr/release:<tag>``: the Job's ``aicr.releaseRef``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from aicr_runner.aicr.release import (
    CHECKSUMS_NAME,
    MAX_ARCHIVE_BYTES,
    MAX_CHECKSUMS_BYTES,
    download_file,
    expected_sha256,
)
from aicr_runner.aicr.release_oci import ARCHIVE_MEDIA_TYPE, ARTIFACT_TYPE, CHECKSUMS_MEDIA_TYPE
from aicr_runner.errors import ChecksumError, DownloadError
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import LAYOUT
from aicr_runner.net import deadline
from aicr_runner.net.digests import sha256_file
from aicr_runner.settings.config import AicrSettings

__all__ = ["RELEASE_REPOSITORY", "LayoutPusher", "release_reference", "with_release_artifact"]

#: Where the release lands under the mirror's target (``<target>/nvidia/aicr/release:<tag>``).
RELEASE_REPOSITORY = "nvidia/aicr/release"


class LayoutPusher(Protocol):
    def push_layout(self, layout: str, files_dir: Path, files: Sequence[tuple[str, str]], artifact_type: str) -> str:
        """``oras push`` ``files`` (name, media type; in ``files_dir``) to ``layout``
        (``oci-layout:DIR:TAG``) as one artifact; the manifest's digest."""


def release_reference(version: str) -> str:
    """The release artifact's item reference (its path under the mirror's target)."""
    return f"{RELEASE_REPOSITORY}:v{version.removeprefix('v')}"


def with_release_artifact(
    items: Sequence[Item],
    settings: AicrSettings,
    version: str,
    workdir: Path,
    pusher: LayoutPusher,
    *,
    interrupted: Callable[[], bool] = lambda: False,
) -> tuple[list[Item], dict[str, str]]:
    """The list with its release files replaced by one artifact item, and that item's
    source (reference -> its OCI layout) for the copier. No files: the list as it is.
    Each download ends within the fetch step's download budget, and at once (its
    socket shut) when ``interrupted()`` turns true: ``InterruptedRun``."""
    files = [item for item in items if item.kind is Kind.FILE]
    if not files:
        return list(items), {}
    reference = release_reference(version)
    folder = workdir / "files"
    folder.mkdir(parents=True, exist_ok=True)
    fetched = {_fetched(item, settings, folder, interrupted): item for item in files}
    names = list(fetched)
    _check_archives(fetched, folder)
    layout = f"{LAYOUT}{workdir / 'layout'}:{reference.rsplit(':', 1)[1]}"
    typed = [(name, CHECKSUMS_MEDIA_TYPE if name == CHECKSUMS_NAME else ARCHIVE_MEDIA_TYPE) for name in names]
    digest = pusher.push_layout(layout, folder, typed, ARTIFACT_TYPE)
    artifact = Item(
        Kind.ARTIFACT,
        reference,
        ("aicr-runner fetch step (aicr.releaseRef)",),
        digest,
        sum((folder / name).stat().st_size for name in names),
        note=f"the aicr release files as one artifact: {', '.join(names)}",
    )
    return [*(item for item in items if item.kind is not Kind.FILE), artifact], {reference: layout}


def _fetched(item: Item, settings: AicrSettings, folder: Path, interrupted: Callable[[], bool]) -> str:
    """The file of ``item`` (a URL) downloaded into ``folder``, checked against the
    sha256 the list recorded for it (if any); its name."""
    name = item.reference.rsplit("/", 1)[1]
    limit = MAX_CHECKSUMS_BYTES if name == CHECKSUMS_NAME else MAX_ARCHIVE_BYTES
    budget = settings.download_budget_seconds
    try:
        sha256 = deadline.bounded(
            lambda cancelled: download_file(
                settings, item.reference, folder / name, max_bytes=limit, cancelled=cancelled
            ),
            budget_seconds=budget,
            interrupted=interrupted,
            over_budget=lambda: DownloadError(f"not downloaded within the {budget:g}s download budget"),
            what=f"the download of {name}",
        )
    except DownloadError as exc:
        raise CopyError(MirrorExit.SOURCE_UNAVAILABLE, item.reference, exc.message) from exc
    if item.digest and item.digest != f"sha256:{sha256}":
        raise CopyError(
            MirrorExit.DIGEST_MISMATCH, item.reference, f"downloaded sha256:{sha256}, recorded {item.digest}"
        )
    return name


def _check_archives(fetched: Mapping[str, Item], folder: Path) -> None:
    """Each archive against its line of the checksums file, as the fetch step checks it."""
    if CHECKSUMS_NAME not in fetched:
        raise CopyError(MirrorExit.NOT_FOUND, CHECKSUMS_NAME, "the list names no checksums file of the release")
    checksums = (folder / CHECKSUMS_NAME).read_text(errors="replace")
    for name, item in fetched.items():
        if name == CHECKSUMS_NAME:
            continue
        try:
            expected = expected_sha256(checksums, name, CHECKSUMS_NAME)
        except ChecksumError as exc:
            raise CopyError(MirrorExit.DIGEST_MISMATCH, item.reference, exc.message) from exc
        actual = sha256_file(folder / name)
        if actual != expected:
            raise CopyError(
                MirrorExit.DIGEST_MISMATCH, item.reference, f"sha256 {actual}, {CHECKSUMS_NAME} lists {expected}"
            )
