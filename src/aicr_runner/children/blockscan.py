"""One native pass over each block of a child's output finds everything the relay looks for.

deploy.sh may print gigabytes. Each block read from it (whole lines, up to a pipe
read) is searched once, by one hyperscan database (a multi-pattern matcher in C:
gigabytes a second, however many patterns), for:

* every registered secret (``logs.protected_bytes``): a block holding none is
  passed on as it is, and ``logs.redact`` runs only on a block holding one;
* deploy.sh's candidate lines (``DeployMarkers.scan`` feeds only those): the
  lines holding one of ``ANYWHERE``, and the lines starting (after blanks) with
  one of ``LINE_STARTS`` or, for aicr 0.11, ``LEGACY_LINE_STARTS``;
* whether the block needs any JSON escaping (a byte outside printable ASCII, a
  quote or a backslash), and whether it holds a colour code.

Secrets and the escaping check are single matches (the first is enough); a
candidate reports each occurrence, and only those cost Python work. The database
is rebuilt when the registered secrets change (rare). The block is searched as
UTF-8 bytes: for a valid string, a string occurs in it exactly where its UTF-8
occurs in its UTF-8, and an ASCII block's byte offsets are its character offsets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aicr_runner import logs

if TYPE_CHECKING:
    from collections.abc import Sequence

    import hyperscan

__all__ = ["ANYWHERE", "LEGACY_LINE_STARTS", "LINE_STARTS", "BlockScan", "scan"]

#: Every line ``DeployMarkers.feed`` reacts to contains one of these anywhere, or
#: starts (after blanks) with one of ``LINE_STARTS`` (tests/unit/children/test_relay.py checks it).
ANYWHERE = ("─", "fail", "DRA kubelet")
LINE_STARTS = ("Error", "ERROR")
#: And for aicr 0.11's deploy.sh (its component lines), only when the running
#: aicr prints no per-component results.
LEGACY_LINE_STARTS = ("Installing ", "Applying manifests for ", "Deployment complete.")

#: Bytes JSON leaves as they are inside a string (printable ASCII but quote and
#: backslash); a newline ends a relayed line.
_JSON_SPECIAL = rb"[^\x20\x21\x23-\x5b\x5d-\x7e\n]"
_ESCAPE = rb"\x1b"


@dataclass(frozen=True)
class BlockScan:
    """What one pass found in a block (offsets are character offsets of line starts)."""

    #: A registered secret occurs in the block: it must be redacted.
    secret: bool
    #: Every line is already a valid JSON string body.
    json_plain: bool
    #: The block holds a colour code (which can split a candidate).
    colour: bool
    #: Lines holding a candidate anywhere or starting with a line start, in order.
    lines: tuple[int, ...]
    #: Lines starting with a legacy (0.11) line start, in order.
    legacy_lines: tuple[int, ...]


def _escaped(literal: bytes) -> bytes:
    return b"".join(b"\\x%02x" % byte for byte in literal)


class _Database:
    """The compiled patterns for one set of secrets; ids are ranges of ``kinds``."""

    def __init__(self, secrets: Sequence[bytes]) -> None:
        import hyperscan

        self.secrets = secrets
        self.anywhere = [literal.encode() for literal in ANYWHERE]
        self.starts = [literal.encode() for literal in LINE_STARTS]
        self.legacy = [literal.encode() for literal in LEGACY_LINE_STARTS]
        literals = [*self.anywhere, *self.starts, *self.legacy, *secrets]
        self.literals = literals
        self.first_start = len(self.anywhere)
        self.first_legacy = self.first_start + len(self.starts)
        self.first_secret = self.first_legacy + len(self.legacy)
        self.json_id = len(literals)
        self.escape_id = self.json_id + 1
        single = hyperscan.HS_FLAG_SINGLEMATCH
        expressions = [*map(_escaped, literals), _JSON_SPECIAL, _ESCAPE]
        flags = [0] * self.first_secret + [single] * (len(secrets) + 2)
        self.database: hyperscan.Database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self.database.compile(expressions=expressions, ids=list(range(len(expressions))), flags=flags)
        #: One scratch per database: scans are serialised.
        self.lock = threading.Lock()

    def matches(self, data: bytes) -> list[tuple[int, int]]:
        """(pattern id, end offset) of every match, in the order found."""
        found: list[tuple[int, int]] = []

        def on_match(pattern: int, _start: int, end: int, _flags: int, _context: object) -> None:
            found.append((pattern, end))

        with self.lock:
            self.database.scan(data, match_event_handler=on_match)
        return found


_database: _Database | None = None
_database_lock = threading.Lock()
#: The last block scanned and what was found: the relay asks again for the block
#: the child pump just scanned, and gets the same answer without a second pass.
_last: tuple[str, BlockScan] | None = None


def _current() -> _Database:
    global _database  # noqa: PLW0603 - one database per process, rebuilt when the secrets change
    secrets = logs.protected_bytes()
    database = _database
    if database is None or database.secrets is not secrets:
        with _database_lock:
            database = _database
            if database is None or database.secrets is not secrets:
                database = _database = _Database(secrets)
    return database


def scan(text: str, data: bytes | None = None) -> BlockScan:
    """One pass over ``text`` (whole lines); ``data``: its UTF-8, if the caller has it."""
    global _last  # noqa: PLW0603 - a one-entry cache of the latest block
    last = _last
    if last is not None and last[0] is text:
        return last[1]
    if data is None:
        data = text.encode()
    database = _current()
    secret, json_plain, colour = False, True, False
    line_ends: set[int] = set()
    legacy_ends: set[int] = set()
    for pattern, end in database.matches(data):
        if pattern >= database.json_id:
            json_plain = json_plain and pattern != database.json_id
            colour = colour or pattern == database.escape_id
        elif pattern >= database.first_secret:
            secret = True
        elif pattern < database.first_start:
            line_ends.add(data.rfind(b"\n", 0, end) + 1)
        else:
            start = end - len(database.literals[pattern])
            line = data.rfind(b"\n", 0, start) + 1
            if _blank(data[line:start]):
                (line_ends if pattern < database.first_legacy else legacy_ends).add(line)
    found = BlockScan(
        secret=secret,
        json_plain=json_plain,
        colour=colour,
        lines=_characters(text, data, sorted(line_ends)),
        legacy_lines=_characters(text, data, sorted(legacy_ends - line_ends)),
    )
    _last = (text, found)
    return found


def _blank(prefix: bytes) -> bool:
    """Only blanks (``str.isspace``, as ``DeployMarkers.feed`` strips) before a line start."""
    return not prefix or prefix.decode().isspace()


def _characters(text: str, data: bytes, offsets: list[int]) -> tuple[int, ...]:
    """Byte offsets of line starts as character offsets (the same for ASCII)."""
    if text.isascii() or not offsets:
        return tuple(offsets)
    converted: list[int] = []
    at_byte = at_char = 0
    for offset in offsets:
        at_char += len(data[at_byte:offset].decode())
        at_byte = offset
        converted.append(at_char)
    return tuple(converted)
