"""Safe tar extraction: what is extracted, and every way an archive is refused."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.errors import ArchiveError, ExitCode, PackIntegrityError
from aicr_runner.net.archive import extract_members, safe_extract_all

Entry = Callable[[tarfile.TarFile], None]


def regular(name: str, data: bytes = b"x", mode: int = 0o644) -> Entry:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))

    return add


def special(name: str, kind: bytes, linkname: str = "") -> Entry:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = linkname
        info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        tar.addfile(info)

    return add


def directory(name: str) -> Entry:
    return special(name, tarfile.DIRTYPE)


def make_tar(path: Path, *entries: Entry, gz: bool = True) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for add in entries:
            add(tar)
    return path


# --- extract_members --------------------------------------------------------


def test_extract_members_takes_only_the_named_files(tmp_path: Path) -> None:
    tar = make_tar(
        tmp_path / "a.tar.gz",
        regular("aicr", b"binary"),
        regular("./aicr-attestation.sigstore.json", b"{}"),
        regular("README.md", b"docs"),
    )
    dest = tmp_path / "out"

    got = extract_members(tar, dest, {"aicr", "aicr-attestation.sigstore.json"}, max_member_bytes=100)

    assert got == {
        "aicr": dest / "aicr",
        "aicr-attestation.sigstore.json": dest / "aicr-attestation.sigstore.json",
    }
    assert (dest / "aicr").read_bytes() == b"binary"
    assert (dest / "aicr-attestation.sigstore.json").read_bytes() == b"{}"
    assert not (dest / "README.md").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["aicr", "aicr-attestation.sigstore.json"]


def test_extract_members_reads_plain_tar_too(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar", regular("aicr", b"bin"), gz=False)
    assert extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=10)["aicr"].read_bytes() == b"bin"


def test_extract_members_reports_missing_names_by_omission(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", regular("other"))
    assert extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=10) == {}


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (special("aicr", tarfile.SYMTYPE, "/etc/passwd"), "symlink"),
        (special("evil", tarfile.SYMTYPE, "/etc"), "symlink"),
        (special("aicr", tarfile.LNKTYPE, "other"), "hardlink"),
        (special("dev", tarfile.CHRTYPE), "device"),
        (special("blk", tarfile.BLKTYPE), "device"),
        (special("pipe", tarfile.FIFOTYPE), "fifo"),
        (regular("../aicr"), "'..'"),
        (regular("sub/../../aicr"), "'..'"),
        (regular("/usr/local/bin/aicr"), "absolute"),
        (regular("huge", b"y" * 101), "over the limit of 100"),
    ],
)
def test_extract_members_refuses_unsafe_members_anywhere_in_the_archive(tmp_path: Path, entry: Entry, why: str) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", b"ok"), entry)

    with pytest.raises(ArchiveError, match=why) as caught:
        extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=100)

    assert "a.tar.gz" in str(caught.value)
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    # all or nothing: the good "aicr" before the bad member was taken back out
    assert not (tmp_path / "o" / "aicr").exists()


def test_extract_members_refuses_an_oversized_wanted_member(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", b"z" * 11))
    with pytest.raises(ArchiveError, match=r"'aicr' is 11 bytes, over the limit of 10"):
        extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=10)
    assert not (tmp_path / "o" / "aicr").exists()


def test_extract_members_refuses_duplicate_names(tmp_path: Path) -> None:
    # tar semantics: the later entry wins on extraction, so a second "aicr" could
    # swap the binary after a reviewer looked at the first one.
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", b"good"), regular("./aicr", b"evil"))
    with pytest.raises(ArchiveError, match="more than once"):
        extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=10)


def test_extract_members_refuses_a_directory_where_a_file_is_wanted(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", directory("aicr"))
    with pytest.raises(ArchiveError, match="expected a regular file"):
        extract_members(tar, tmp_path / "o", {"aicr"}, max_member_bytes=10)


def test_extract_members_does_not_write_through_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    dest = tmp_path / "o"
    dest.mkdir()
    (dest / "aicr").symlink_to(victim)
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", b"new"))

    extract_members(tar, dest, {"aicr"}, max_member_bytes=10)

    assert victim.read_bytes() == b"untouched"
    assert not (dest / "aicr").is_symlink()
    assert (dest / "aicr").read_bytes() == b"new"


def test_extract_members_uses_the_callers_error_type(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", special("x", tarfile.SYMTYPE, "y"))
    with pytest.raises(PackIntegrityError):
        extract_members(tar, tmp_path / "o", {"x"}, max_member_bytes=10, error_type=PackIntegrityError)


@pytest.mark.parametrize("content", [b"", b"not a tar at all", b"\x1f\x8b\x08\x00garbage"])
def test_unreadable_archives_are_archive_errors(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(content)
    with pytest.raises(ArchiveError, match=r"bad\.tar\.gz"):
        extract_members(bad, tmp_path / "o", {"aicr"}, max_member_bytes=10)
    with pytest.raises(ArchiveError, match=r"bad\.tar\.gz"):
        safe_extract_all(bad, tmp_path / "p", max_total_bytes=10, max_members=10)


def test_truncated_archive_is_an_archive_error(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", bytes(range(256)) * 400))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tar.read_bytes()[:200])
    with pytest.raises(ArchiveError, match=r"cut\.tar\.gz"):
        extract_members(cut, tmp_path / "o", {"aicr"}, max_member_bytes=1 << 20)


def _damaged(tmp_path: Path, where: str) -> Path:
    """A gzip whose deflate data (``middle``) or trailer CRC (``crc``) was changed after it was made."""
    data = bytes(range(256)) * 4096  # 1 MiB: several of the decompressing thread's blocks
    good = make_tar(tmp_path / "good.tar.gz", regular("aicr", data), regular("LICENSE")).read_bytes()
    damaged = bytearray(good)
    at = len(good) // 2 if where == "middle" else len(good) - 8  # the trailer: CRC32, then ISIZE
    damaged[at] ^= 0xFF
    path = tmp_path / f"{where}.tar.gz"
    path.write_bytes(bytes(damaged))
    return path


@pytest.mark.parametrize("where", ["middle", "crc"])
def test_a_damaged_gzip_fails_closed_and_leaves_nothing(tmp_path: Path, where: str) -> None:
    damaged = _damaged(tmp_path, where)
    threads_before = threading.active_count()
    with pytest.raises(ArchiveError, match=rf"{where}\.tar\.gz is corrupt"):
        extract_members(damaged, tmp_path / "o", {"aicr", "LICENSE"}, max_member_bytes=1 << 21)
    assert list((tmp_path / "o").iterdir()) == []
    with pytest.raises(ArchiveError, match=rf"{where}\.tar\.gz is corrupt"):
        safe_extract_all(damaged, tmp_path / "p", max_total_bytes=1 << 21, max_members=10)
    assert not (tmp_path / "p").exists() or list((tmp_path / "p").iterdir()) == []
    assert threading.active_count() == threads_before  # the decompressing thread ended with the failure


def test_a_gzip_read_in_blocks_extracts_byte_for_byte(tmp_path: Path) -> None:
    data = bytes(range(256)) * 12289  # just over 3 MiB: more than one block, not a multiple of one
    tar = make_tar(tmp_path / "a.tar.gz", regular("aicr", data), regular("LICENSE", b"text"))
    hashes: dict[str, str] = {}
    found = extract_members(tar, tmp_path / "o", {"aicr", "LICENSE"}, max_member_bytes=1 << 22, hashes=hashes)
    assert found["aicr"].read_bytes() == data
    assert hashes["aicr"] == hashlib.sha256(data).hexdigest()
    assert found["LICENSE"].read_bytes() == b"text"


# --- safe_extract_all ---------------------------------------------------------


def without_extraction_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile as Python 3.11.0-3.11.3 has it (Debian 12's python3 is 3.11.2): no
    data_filter or FilterError, and extract/extractall refuse a filter argument."""
    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.delattr(tarfile, "FilterError")
    for name in ("extract", "extractall"):
        original = getattr(tarfile.TarFile, name)

        def refusing(self: tarfile.TarFile, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if "filter" in kwargs:
                raise TypeError("extract() got an unexpected keyword argument 'filter'")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(tarfile.TarFile, name, refusing)


@pytest.mark.parametrize("python", ["with PEP 706 filters", "before 3.11.4, without them"])
def test_safe_extract_all_unpacks_files_and_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python: str
) -> None:
    if python.startswith("before"):
        without_extraction_filters(monkeypatch)
    tar = make_tar(
        tmp_path / "p.tar.gz",
        directory("overlays"),
        regular("overlays/a.yaml", b"a: 1"),
        directory("overlays/sub"),
        regular("overlays/sub/b.yaml", b"b: 2", mode=0o4777),
    )
    dest = tmp_path / "pack"

    files = safe_extract_all(tar, dest, max_total_bytes=100, max_members=10)

    assert files == ["overlays/a.yaml", "overlays/sub/b.yaml"]
    assert (dest / "overlays/a.yaml").read_bytes() == b"a: 1"
    assert (dest / "overlays/sub/b.yaml").read_bytes() == b"b: 2"
    # The data filter strips setuid and group/other write bits.
    assert (dest / "overlays/sub/b.yaml").stat().st_mode & 0o7777 == 0o755


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (special("overlays/link.yaml", tarfile.SYMTYPE, "a.yaml"), "symlink"),
        (special("overlays/hard.yaml", tarfile.LNKTYPE, "overlays/a.yaml"), "hardlink"),
        (special("overlays/dev", tarfile.CHRTYPE), "device"),
        (special("overlays/fifo", tarfile.FIFOTYPE), "fifo"),
        (regular("../escape.yaml"), "'..'"),
        (regular("/etc/cron.d/x"), "absolute"),
        (regular("overlays/a.yaml", b"again"), "more than once"),
    ],
)
@pytest.mark.parametrize("python", ["with PEP 706 filters", "before 3.11.4, without them"])
def test_safe_extract_all_refuses_before_writing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: Entry, why: str, python: str
) -> None:
    if python.startswith("before"):
        without_extraction_filters(monkeypatch)
    tar = make_tar(tmp_path / "p.tar.gz", directory("overlays"), regular("overlays/a.yaml"), entry)
    dest = tmp_path / "pack"

    with pytest.raises(PackIntegrityError, match=why):
        safe_extract_all(tar, dest, max_total_bytes=100, max_members=10, error_type=PackIntegrityError)

    assert not dest.exists()
    assert not (tmp_path / "escape.yaml").exists()


def test_safe_extract_all_enforces_total_size_and_member_count(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "p.tar.gz", regular("a", b"1" * 60), regular("b", b"2" * 60))
    with pytest.raises(ArchiveError, match="unpacks to 120 bytes, over the limit of 100"):
        safe_extract_all(tar, tmp_path / "x", max_total_bytes=100, max_members=10)
    with pytest.raises(ArchiveError, match="has 2 members, over the limit of 1"):
        safe_extract_all(tar, tmp_path / "y", max_total_bytes=1000, max_members=1)
    assert safe_extract_all(tar, tmp_path / "z", max_total_bytes=120, max_members=2) == ["a", "b"]


def test_safe_extract_all_root_confines_members_to_one_directory(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "p.tar.gz", directory("overlays"), regular("overlays/a"), regular("registry.yaml"))
    with pytest.raises(ArchiveError, match="outside the archive's directory 'overlays'"):
        safe_extract_all(tar, tmp_path / "x", max_total_bytes=100, max_members=10, root="overlays")
    assert safe_extract_all(tar, tmp_path / "y", max_total_bytes=100, max_members=10) == [
        "overlays/a",
        "registry.yaml",
    ]


def test_safe_extract_all_never_overwrites_existing_content(tmp_path: Path) -> None:
    dest = tmp_path / "pack"
    dest.mkdir()
    (dest / "registry.yaml").write_text("from another layer")
    (dest / "overlays").mkdir()
    tar = make_tar(tmp_path / "p.tar.gz", directory("overlays"), regular("overlays/a"), regular("registry.yaml"))

    with pytest.raises(ArchiveError, match=r"'registry\.yaml' would overwrite"):
        safe_extract_all(tar, dest, max_total_bytes=100, max_members=10)

    assert (dest / "registry.yaml").read_text() == "from another layer"
    assert not (dest / "overlays" / "a").exists()


def test_safe_extract_all_refuses_to_follow_a_planted_symlink_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "pack"
    dest.mkdir()
    (dest / "overlays").symlink_to(outside)
    tar = make_tar(tmp_path / "p.tar.gz", directory("overlays"), regular("overlays/a"))

    with pytest.raises(ArchiveError, match="would overwrite"):
        safe_extract_all(tar, dest, max_total_bytes=100, max_members=10)

    assert list(outside.iterdir()) == []
