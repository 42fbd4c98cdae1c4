"""A child's output cut into blocks of whole lines, with over-long lines in pieces.

The relay works per block, not per line (that keeps it close to ``tee``), so the
splitter finds over-long lines without looking at each line, and never cuts
inside a UTF-8 character or a registered secret: each piece is redacted on its
own, and a secret cut in two would slip past both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["LineSplitter"]


class LineSplitter:
    """Turns chunks into blocks of whole lines (each ending in a newline).

    Holds at most one unfinished line. A line longer than ``limit`` bytes is
    cut into pieces of at most ``limit`` bytes (a little more only when a
    protected byte string straddles the cut and starts the piece). Over-long
    lines are found without per-line work: one ``rfind`` per ``limit`` bytes
    of a chunk (the last newline in the next ``limit + 1`` bytes; every line
    before it is short enough).
    """

    def __init__(self, limit: int, protected: Callable[[], Sequence[bytes]]) -> None:
        self._limit = limit
        self._protected = protected
        self._partial = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._partial + chunk if self._partial else chunk
        pieces: list[bytes] = []
        passed = 0  # data before this is in pieces
        start = 0  # the line that may be over-long starts here
        while True:
            # The last newline within limit+1 bytes: every line up to it is short enough.
            newline = data.rfind(b"\n", start, start + self._limit + 1)
            if newline != -1:
                start = newline + 1
                continue
            cut = self._cut(data, start, final=False) if len(data) - start > self._limit else None
            if cut is None:  # an unfinished line, not (yet) too long to hold
                break
            pieces += (data[passed:cut], b"\n")
            passed = start = cut
        pieces.append(data[passed:start])
        self._partial = data[start:]
        return b"".join(pieces)

    def finish(self) -> bytes:
        data, self._partial = self._partial, b""
        pieces: list[bytes] = []
        start = 0
        while len(data) - start > self._limit:
            cut = self._cut(data, start, final=True)
            assert cut is not None  # noqa: S101 - final cuts always resolve
            pieces += (data[start:cut], b"\n")
            start = cut
        if start < len(data):
            pieces += (data[start:], b"\n")
        return b"".join(pieces)

    def _cut(self, data: bytes, start: int, *, final: bool) -> int | None:
        """Where the piece starting at ``start`` ends; None: wait for more bytes.

        The cut is the last position at most ``limit`` bytes in that is neither
        inside a UTF-8 character nor inside any occurrence of a protected byte
        string. Secrets may overlap (one a prefix of another, or a secret
        overlapping itself), so every occurrence near the limit is collected
        first and the cut only ever moves back: moving it for one secret
        cannot put it inside another one already passed. When every position
        is inside an occurrence starting the piece, the piece is the longest
        such occurrence (it is then masked whole).
        """
        limit_at = start + self._limit
        # No secret spans a newline (each line of a value is registered too).
        secrets = [secret for secret in self._protected() if len(secret) > 1 and b"\n" not in secret]
        newline = data.find(b"\n", limit_at)
        end = len(data) if newline == -1 else newline
        longest = max(map(len, secrets), default=1)
        if not final and newline == -1 and len(data) < limit_at + longest - 1:
            return None  # a secret may straddle the limit: wait for the bytes after it
        occurrences: list[tuple[int, int]] = []
        for secret in secrets:
            # Occurrences beginning before the limit; overlapping ones too.
            stop = min(end, limit_at + len(secret) - 1)
            at = data.find(secret, start, stop)
            while at != -1:
                occurrences.append((at, at + len(secret)))
                at = data.find(secret, at + 1, stop)
        cut = limit_at
        while cut > start:
            moved = _character_start(data, cut, start)
            for begin, finish in occurrences:
                if begin < moved < finish:
                    moved = begin
            if moved == cut:
                return cut
            cut = moved
        whole = [finish for begin, finish in occurrences if begin == start]
        if whole:
            return max(whole)
        # A limit shorter than one character: the piece is that character.
        return _character_end(data, limit_at)


def _character_start(data: bytes, at: int, floor: int) -> int:
    """``at``, or the start of the UTF-8 character ``at`` falls inside (not
    below ``floor``). Continuation bytes are 0b10xxxxxx; a run longer than a
    character can hold is not UTF-8, and any position in it will do."""
    back = at
    while back > floor and at - back < 3 and data[back] & 0xC0 == 0x80:
        back -= 1
    return back if data[back] & 0xC0 != 0x80 else at


def _character_end(data: bytes, at: int) -> int:
    forward = at
    while forward < len(data) and forward - at < 3 and data[forward] & 0xC0 == 0x80:
        forward += 1
    return forward
