"""``--to-archive FILE`` and ``--from-archive FILE``: the list carried across the gap.

The archive is one tar file: an OCI image layout (``oci/``: every image, OCI chart
and artifact, each under a tag of its own, copied by oras with its digest), the
charts of HTTP chart repositories as their archives (``charts/``), and
``aicr-mirror.json`` naming each item, where it is in the archive and its digest.
It is written to ``FILE.partial`` and renamed when complete: an interrupted run
leaves no file that looks whole. ``--from-archive`` reads only the archive (the
same copy and final check as ``--to``, with the archive as every item's source).
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aicr_runner.errors import ArchiveError
from aicr_runner.mirror.copy import source_of
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import LAYOUT, OrasCopier, sha256_of
from aicr_runner.net.archive import safe_extract_all

__all__ = ["MANIFEST", "ArchiveContents", "read_archive", "write_archive"]

MANIFEST = "aicr-mirror.json"
_FORMAT = 1
#: Files and directories an archive may hold: an OCI layout's blobs (a few per
#: image) and chart archives; a recipe's whole list is a few hundred.
_MAX_MEMBERS = 200_000


@dataclass(frozen=True)
class ArchiveContents:
    items: tuple[Item, ...]
    #: Source reference -> ``oci-layout:<dir>:<tag>``; (repository, chart, version) -> chart file.
    sources: dict[str, str]
    charts: dict[tuple[str, str, str], Path]


def write_archive(
    items: Sequence[Item],
    archive: Path,
    copier: OrasCopier,
    progress: Callable[[str], None] = lambda _: None,
    allow_missing: frozenset[str] = frozenset(),
) -> int:
    """Every item but the aicr release's files into ``archive``; how many went in. An item
    absent at its source fails it (exit 41) unless named in ``allow_missing``: then it is left out."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aicr-mirror-archive-", dir=archive.parent) as tmp:
        root = Path(tmp)
        entries = []
        for n, item in enumerate(items):
            if item.kind is Kind.FILE:
                continue
            try:
                entries.append(_store(n, item, root, copier))
            except CopyError as exc:
                if exc.reason is not MirrorExit.NOT_FOUND or item.reference not in allow_missing:
                    raise
                progress(f"not archived {item.reference}: allowed by --allow-missing: {exc.message}")
        for entry in entries:
            progress(f"archived {entry['item']['reference']} {entry['digest']}")
        (root / MANIFEST).write_text(json.dumps({"format": _FORMAT, "entries": entries}, indent=2) + "\n")
        partial = archive.with_name(archive.name + ".partial")
        try:
            with tarfile.open(partial, "w") as tar:
                for path in sorted(root.iterdir()):
                    tar.add(path, arcname=path.name)
            partial.replace(archive)
        finally:
            partial.unlink(missing_ok=True)  # interrupted or failed: nothing that looks like an archive
    return len(entries)


def _store(n: int, item: Item, root: Path, copier: OrasCopier) -> dict[str, Any]:
    entry: dict[str, Any] = {"item": _item_json(item)}
    if item.kind is Kind.CHART and not item.chart_source.startswith("oci://"):
        chart = copier.pull_chart(item.chart_source, item.chart_name, item.version, root / "charts" / f"{n:04d}")
        entry |= {"chartFile": chart.relative_to(root).as_posix(), "digest": sha256_of(chart)}
        return entry
    source, tag = source_of(item), f"item{n:04d}"
    digest = copier.digest(source, source_side=True)
    if digest is None:
        raise CopyError(MirrorExit.NOT_FOUND, source, "no such manifest")
    landed = copier.copy(source, f"{LAYOUT}{root / 'oci'}:{tag}")
    if landed != digest:
        raise CopyError(MirrorExit.DIGEST_MISMATCH, source, f"archived {landed}, the source has {digest}")
    return entry | {"layoutTag": tag, "digest": digest}


def _item_json(item: Item) -> dict[str, Any]:
    return item.as_json() | {"extra": dict(item.extra)}


def read_archive(archive: Path, into: Path) -> ArchiveContents:
    """Unpack ``archive`` into ``into`` (a directory of its own) and read what it holds."""
    try:
        # Regular files and directories only, each checked before it is written (no
        # absolute paths, links or devices), on any Python the image may carry:
        # Debian 12's 3.11.2 predates tarfile's extraction filters. The archive is
        # an uncompressed tar, so what it unpacks to is never larger than itself.
        safe_extract_all(archive, into, max_total_bytes=archive.stat().st_size, max_members=_MAX_MEMBERS)
        manifest = json.loads((into / MANIFEST).read_text())
    except ArchiveError as exc:
        raise CopyError(
            MirrorExit.NOT_FOUND, str(archive), f"not an aicr-runner mirror archive ({exc.message})"
        ) from exc
    except (OSError, ValueError) as exc:
        raise CopyError(MirrorExit.NOT_FOUND, str(archive), f"not an aicr-runner mirror archive ({exc})") from exc
    if manifest.get("format") != _FORMAT:
        raise CopyError(MirrorExit.NOT_FOUND, str(archive), f"archive format {manifest.get('format')!r}, expected 1")
    items, sources, charts = [], {}, {}
    for entry in manifest["entries"]:
        # The digest the archive recorded: the copy out of it must find the same (fail closed).
        item = Item.from_json({**entry["item"], "digest": entry["digest"]})
        items.append(item)
        if "layoutTag" in entry:
            sources[source_of(item)] = f"{LAYOUT}{into / 'oci'}:{entry['layoutTag']}"
        else:
            chart = into / entry["chartFile"]
            if not chart.is_file() or sha256_of(chart) != entry["digest"]:
                # Before anything is copied: a changed chart never reaches the target.
                raise CopyError(MirrorExit.DIGEST_MISMATCH, entry["chartFile"], f"not the recorded {entry['digest']}")
            charts[(item.chart_source, item.chart_name, item.version)] = chart
    return ArchiveContents(tuple(items), sources, charts)
