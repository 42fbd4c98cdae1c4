"""``mirror --to oci://registry/prefix``: every listed image, chart and artifact
copied into one registry, digests unchanged, then checked there by digest.

The copy is the Go ``oras`` CLI's (``oras cp``: an index is copied with every
manifest it lists, digests unchanged; blobs and manifests the target already has
are not sent again), and ``helm push`` for charts that live in HTTP chart
repositories (they become OCI charts; their content digest, the archive's
sha256, is the one checked). Nothing is copied by code of our own.

Where each item lands (``rewrite.mirror_path``): ``<target>/<upstream host>/<path>``,
tag kept: ``nvcr.io/nvidia/driver:580`` is ``<target>/nvcr.io/nvidia/driver:580``,
the shape containerd's ``hosts.toml`` mirrors (``override_path``) and the chart
source rewrite (``mirror.registry``) use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.rewrite import mirror_path

__all__ = ["Copied", "Copier", "CopyReport", "copy_all", "source_of", "target_of"]


@dataclass(frozen=True)
class Copied:
    item: Item
    target: str
    #: The digest checked in the target: the manifest's, or for a repository chart its archive's.
    digest: str
    sent: bool


@dataclass(frozen=True)
class CopyReport:
    copied: tuple[Copied, ...]
    #: Items a registry cannot hold here (the aicr release's files), with why.
    not_copied: tuple[tuple[Item, str], ...]

    @property
    def sent(self) -> int:
        return sum(1 for c in self.copied if c.sent)


class Copier(Protocol):
    def digest(self, reference: str, *, source_side: bool) -> str | None:
        """The manifest digest ``reference`` resolves to; None when it is not there."""

    def copy(self, source: str, target: str) -> str:
        """Copy with every manifest and blob; the digest the target now holds."""

    def chart_digest(self, reference: str) -> str | None:
        """The chart archive's digest in an OCI chart (its content layer); None when absent."""

    def push_chart(self, source: str, chart: str, version: str, target: str) -> tuple[str, bool]:
        """Pull a repository chart and push it as an OCI chart to ``target`` (``repo/chart:version``)
        unless the target already holds that archive; the archive's digest, and whether it was sent."""


def target_of(item: Item, target: str) -> str:
    """Where ``item`` is in the mirror (a reference without scheme)."""
    base = target.removeprefix("oci://").rstrip("/")
    if item.kind is Kind.CHART:
        location = item.chart_source.split("://", 1)[1].rstrip("/")
        return f"{base}/{mirror_path(location)}/{item.chart_name}:{item.version}"
    name, at, pinned = item.reference.partition("@")
    return f"{base}/{mirror_path(name)}{at}{pinned}"


#: Items copied at once: each is one oras or helm process at a time (oras copies up to
#: three blobs of an item in parallel itself).
WORKERS = 4


def copy_all(
    items: Sequence[Item],
    target: str,
    copier: Copier,
    *,
    progress: Callable[[str], None] = lambda _: None,
    allow_missing: frozenset[str] = frozenset(),
    workers: int = WORKERS,
) -> CopyReport:
    """Copy what is missing or different, then check every item in the target by digest.

    An item not at its source fails the copy (exit 41) unless its reference is in
    ``allow_missing`` (the user's explicit choice): then it is reported, not copied.
    The first failure, in list order, ends the copy."""
    from concurrent.futures import ThreadPoolExecutor

    not_copied = [(i, _FILE_NOTE) for i in items if i.kind is Kind.FILE]
    wanted = [i for i in items if i.kind is not Kind.FILE]

    def one(item: Item) -> Copied | tuple[Item, str]:
        try:
            return _copy_one(item, target_of(item, target), copier)
        except CopyError as exc:
            if exc.reason is not MirrorExit.NOT_FOUND or item.reference not in allow_missing:
                raise
            return (item, f"not at its source, allowed by --allow-missing: {exc.message}")

    copied: list[Copied] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for done in pool.map(one, wanted):
                if isinstance(done, Copied):
                    progress(f"{'copied' if done.sent else 'present'} {done.target} {done.digest}")
                    copied.append(done)
                else:
                    not_copied.append(done)
            list(pool.map(lambda done: _check(done, copier), copied))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # nothing new starts; what runs ends
            raise
    return CopyReport(tuple(copied), tuple(not_copied))


_FILE_NOTE = "an HTTP file: serve the aicr release folder inside (AICR__RELEASE_BASE_URL)"


def _copy_one(item: Item, target: str, copier: Copier) -> Copied:
    if item.kind is Kind.CHART and not item.chart_source.startswith("oci://"):
        if item.digest and copier.chart_digest(target) == item.digest:
            # The list pulled this archive and recorded its digest; the target holds it: no second pull.
            return Copied(item, target, item.digest, sent=False)
        archive, sent = copier.push_chart(item.chart_source, item.chart_name, item.version, target)
        if item.digest and item.digest != archive:
            raise CopyError(
                MirrorExit.DIGEST_MISMATCH, target, f"the chart archive is {archive}, recorded {item.digest}"
            )
        return Copied(item, target, archive, sent=sent)
    source = source_of(item)
    digest = copier.digest(source, source_side=True)
    if digest is None:
        raise CopyError(MirrorExit.NOT_FOUND, source, "no such manifest")
    if item.digest and item.digest != digest:  # recorded earlier (an archive's manifest): fail closed
        raise CopyError(MirrorExit.DIGEST_MISMATCH, source, f"the source has {digest}, recorded {item.digest}")
    if copier.digest(target, source_side=False) == digest:
        return Copied(item, target, digest, sent=False)
    landed = copier.copy(source, target)
    if landed != digest:
        raise CopyError(MirrorExit.DIGEST_MISMATCH, target, f"copied {landed}, the source has {digest}")
    return Copied(item, target, digest, sent=True)


def source_of(item: Item) -> str:
    if item.kind is Kind.CHART:
        return f"{item.chart_source.removeprefix('oci://').rstrip('/')}/{item.chart_name}:{item.version}"
    return item.reference


def _check(done: Copied, copier: Copier) -> None:
    """The final check: the target holds the item, by the digest the copy recorded."""
    repository_chart = done.item.kind is Kind.CHART and not done.item.chart_source.startswith("oci://")
    found = copier.chart_digest(done.target) if repository_chart else copier.digest(done.target, source_side=False)
    if found is None:
        raise CopyError(MirrorExit.INCOMPLETE, done.target, f"not in the target (expected {done.digest})")
    if found != done.digest:
        raise CopyError(MirrorExit.DIGEST_MISMATCH, done.target, f"the target has {found}, expected {done.digest}")
