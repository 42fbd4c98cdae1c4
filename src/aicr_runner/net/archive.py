"""Safe extraction of tar and tar.gz archives that come from the network.

Two shapes of use:

* ``extract_members`` takes a few named files out of a release archive (the aicr
  binary and its attestation). Every member is inspected, not only the named ones,
  because an archive that carries a link, a device or a ``..`` path was not built
  by the release pipeline and is refused as a whole.
* ``safe_extract_all`` unpacks a data pack directory in one pass over the
  stream (a gzip layer is decompressed once), member by member. aicr rejects symlinks in
  packs, so links of both kinds are refused outright instead of being rewritten;
  tarfile's ``data`` filter (PEP 706) runs as a second line of defence.

Every refusal raises ``errors.ArchiveError`` (or the error type the caller passes,
e.g. ``PackIntegrityError`` for packs) naming the archive, the member and why.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Iterator, MutableMapping, Set
from pathlib import Path, PurePosixPath
from typing import IO, cast

from aicr_runner.errors import ArchiveError, RunnerError

__all__ = ["extract_members", "safe_extract_all"]

_COPY_CHUNK_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symlink to {member.linkname!r}"
    if member.islnk():
        return f"a hardlink to {member.linkname!r}"
    kinds = (
        (member.ischr() or member.isblk(), "a device node"),
        (member.isfifo(), "a fifo"),
        (member.isdir(), "a directory"),
        (member.isreg(), "a regular file"),
    )
    return next((kind for matches, kind in kinds if matches), f"an entry of tar type {member.type!r}")


def _normalised_name(member: tarfile.TarInfo) -> str | None:
    """The member's relative path without ``.`` parts, or None when it is unsafe."""
    name = member.name
    if not name or "\x00" in name or name.startswith("/"):
        return None
    parts = [part for part in PurePosixPath(name).parts if part not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


class _Checker:
    """Shared per-member checks; raises the caller's error type with context."""

    def __init__(self, label: str, error_type: type[RunnerError]) -> None:
        self._label = label
        self._error_type = error_type
        self._seen: set[str] = set()

    def fail(self, member_name: str, why: str) -> RunnerError:
        return self._error_type(f"{self._label}: member {member_name!r} {why}")

    def require_regular_file(self, member: tarfile.TarInfo) -> None:
        if not member.isreg():
            raise self.fail(member.name, f"is {_member_kind(member)}, expected a regular file")

    def check(self, member: tarfile.TarInfo, *, max_member_bytes: int | None) -> str:
        """Return the normalised name of a safe file or directory member."""
        name = _normalised_name(member)
        if name is None:
            raise self.fail(member.name, "has an absolute path, a '..' component or an empty name")
        if not (member.isreg() or member.isdir()):
            raise self.fail(member.name, f"is {_member_kind(member)}; only regular files and directories are allowed")
        if member.isreg():
            if max_member_bytes is not None and member.size > max_member_bytes:
                raise self.fail(member.name, f"is {member.size} bytes, over the limit of {max_member_bytes}")
            # A second entry with the same name silently replaces the first when
            # extracted; a release or pack never needs that.
            if name in self._seen:
                raise self.fail(member.name, "appears more than once")
            self._seen.add(name)
        return name


@contextlib.contextmanager
def _open(tar_path: Path, label: str, error_type: type[RunnerError]) -> Iterator[tarfile.TarFile]:
    """The archive as a tar stream, read once from front to back.

    A gzip layer is decompressed by zlib-ng in a thread of its own: about twice
    zlib's speed, beside the tar parsing, the hashing and the writes (``tar -xzf``
    runs gzip beside tar the same way). Any other compression goes through
    tarfile's own. zlib-ng's own error for corrupt data is raised as tarfile's."""
    from zlib_ng import gzip_ng_threaded, zlib_ng

    corrupt = cast(type[Exception], zlib_ng.error)  # its stub types the class as an instance
    with contextlib.ExitStack() as opened:
        try:
            with tar_path.open("rb") as probe:
                gzipped = probe.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
            if gzipped:
                threaded = gzip_ng_threaded.open(tar_path, "rb", threads=1)  # type: ignore[no-untyped-call]
                stream = opened.enter_context(cast(IO[bytes], threaded))  # its open() carries no annotations
                tar = opened.enter_context(tarfile.open(fileobj=stream, mode="r|", bufsize=_COPY_CHUNK_BYTES))
            else:
                tar = opened.enter_context(tarfile.open(tar_path, mode="r|*", bufsize=_COPY_CHUNK_BYTES))
        except (tarfile.TarError, OSError, EOFError, corrupt) as exc:
            raise error_type(f"{label} cannot be read as tar or tar.gz: {exc}") from exc
        try:
            yield tar
        except corrupt as exc:
            raise tarfile.ReadError(f"invalid compressed data: {exc}") from exc


def extract_members(
    tar_path: Path,
    dest: Path,
    allowed: Set[str],
    max_member_bytes: int,
    *,
    error_type: type[RunnerError] = ArchiveError,
    hashes: MutableMapping[str, str] | None = None,
) -> dict[str, Path]:
    """Extract the regular-file members named in ``allowed`` into ``dest``.

    Names are matched after dropping a leading ``./``. Members not in ``allowed``
    are skipped but still checked: any link, device, fifo, unsafe path, duplicate
    or oversized member fails the whole archive. Returns name -> extracted path for
    the members found; the caller decides which of them are required. Extracted
    files get mode 0644 (the caller sets the executable bit where it belongs).
    ``hashes``, when given, receives each extracted file's sha256, computed as it
    is written (no second read of the file).
    """
    dest.mkdir(parents=True, exist_ok=True)
    label = f"archive {tar_path.name}"
    checker = _Checker(label, error_type)
    extracted: dict[str, Path] = {}
    try:
        with _open(tar_path, label, error_type) as tar:
            for member in tar:
                name = checker.check(member, max_member_bytes=max_member_bytes)
                if name not in allowed:
                    continue
                checker.require_regular_file(member)
                extracted[name], digest = _write_member(tar, member, dest / name, checker, hashed=hashes is not None)
                if hashes is not None and digest is not None:
                    hashes[name] = digest
    except BaseException as exc:
        # All or nothing: a binary from an archive that turned out bad must not stay.
        for path in extracted.values():
            path.unlink(missing_ok=True)
        if isinstance(exc, tarfile.TarError | EOFError | OSError):
            raise error_type(f"{label} is corrupt or truncated: {exc}") from exc
        raise
    return extracted


def _write_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, checker: _Checker, *, hashed: bool = False
) -> tuple[Path, str | None]:
    """The member written to ``target``, and (``hashed``) the sha256 of what was written."""
    import hashlib  # OpenSSL's bindings: only a run that extracts loads them

    source = tar.extractfile(member)
    if source is None:
        raise checker.fail(member.name, "has no readable content")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    # O_EXCL|O_NOFOLLOW: never write through a link someone planted in dest.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    digest = hashlib.sha256() if hashed else None
    try:
        with source, os.fdopen(fd, "wb") as out:
            while chunk := source.read(_COPY_CHUNK_BYTES):
                if digest is not None:
                    digest.update(chunk)
                out.write(chunk)
    except BaseException:
        partial.unlink(missing_ok=True)  # a member cut short by the archive's damage leaves nothing
        raise
    partial.replace(target)
    return target, digest.hexdigest() if digest is not None else None


def safe_extract_all(
    tar_path: Path,
    dest: Path,
    max_total_bytes: int,
    max_members: int,
    *,
    root: str | None = None,
    error_type: type[RunnerError] = ArchiveError,
    label: str | None = None,
) -> list[str]:
    """Extract a whole archive of regular files and directories into ``dest``.

    One pass over the (possibly gzip-compressed) stream: each member is checked
    before it is written, and a refusal anywhere removes everything this call
    wrote, so a refused archive leaves ``dest`` as it was. ``root``, when given,
    is the one top-level directory every member must live in (the Go oras CLI
    packs a pushed directory that way and checks the same on pull). Returns the
    normalised names of the extracted files. ``label`` is what refusals call the
    archive (default ``archive <file name>``), e.g. the pack layer it came from.
    """
    label = label or f"archive {tar_path.name}"
    extraction = _Extraction(label, dest, max_total_bytes, max_members, root, error_type)
    try:
        with _open(tar_path, label, error_type) as tar:
            extraction.begin()
            for member in tar:
                extraction.add(tar, member)
    except BaseException as exc:
        extraction.undo()
        filter_error = getattr(tarfile, "FilterError", None)  # Python 3.11.4+ (PEP 706)
        if filter_error is not None and isinstance(exc, filter_error):
            raise error_type(f"{label}: {exc}") from exc
        if isinstance(exc, tarfile.TarError | EOFError | OSError):
            raise error_type(f"{label} is corrupt, truncated or could not be extracted: {exc}") from exc
        raise
    return extraction.files


class _Extraction:
    """``safe_extract_all``'s state: limits so far, and what it created."""

    def __init__(  # noqa: PLR0917 - safe_extract_all's arguments, passed on
        self,
        label: str,
        dest: Path,
        max_total_bytes: int,
        max_members: int,
        root: str | None,
        error_type: type[RunnerError],
    ) -> None:
        self._label = label
        self._dest = dest
        self._max_total_bytes = max_total_bytes
        self._max_members = max_members
        self._root = root
        self._error_type = error_type
        self._checker = _Checker(label, error_type)
        self.files: list[str] = []
        #: What this call created, in order; removed in reverse on a refusal.
        self._created: list[Path] = []
        self._total = 0
        self._members = 0

    def begin(self) -> None:
        if not self._dest.exists():
            self._dest.mkdir(parents=True)
            self._created.append(self._dest)

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Check one member, then write it."""
        name = self._check(member)
        target = self._dest / name
        self._created += _missing_parents(self._dest, target)
        if not target.exists():
            self._created.append(target)
        if hasattr(tarfile, "data_filter"):
            # The checks already refused anything the data filter would rewrite; the
            # filter stays as a guard against what they might miss.
            tar.extract(member, self._dest, filter="data")
        elif member.isdir():
            # Python before 3.11.4 (Debian 12's python3 is 3.11.2) has no extraction
            # filters (PEP 706): the checked member is written the way
            # extract_members writes files, with the data filter's modes (no
            # setuid/setgid/sticky, no group or other write, owner read/write).
            target.mkdir(parents=True, exist_ok=True)
        else:
            _write_member(tar, member, target, self._checker)[0].chmod((member.mode & 0o755) | 0o600)

    def _check(self, member: tarfile.TarInfo) -> str:
        self._members += 1
        if self._members > self._max_members:
            raise self._error_type(f"{self._label} has {self._members} members, over the limit of {self._max_members}")
        name = self._checker.check(member, max_member_bytes=None)
        if self._root is not None and name.split("/", 1)[0] != self._root:
            raise self._checker.fail(member.name, f"is outside the archive's directory {self._root!r}")
        target = self._dest / name
        if target.is_symlink() or (target.exists() and not (member.isdir() and target.is_dir())):
            raise self._checker.fail(member.name, "would overwrite a path that already exists in the destination")
        if member.isreg():
            self._total += member.size
            if self._total > self._max_total_bytes:
                raise self._error_type(
                    f"{self._label} unpacks to {self._total} bytes, over the limit of {self._max_total_bytes}"
                )
            self.files.append(name)
        return name

    def undo(self) -> None:
        for path in reversed(self._created):
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()


def _missing_parents(dest: Path, target: Path) -> list[Path]:
    """The directories between ``dest`` and ``target`` that do not exist yet, outermost first."""
    missing = [parent for parent in target.relative_to(dest).parents if not (dest / parent).exists()]
    return [dest / parent for parent in reversed(missing)]
