"""Cutting text to a bound and making it printable: Event fields, error wording,
problem lines, step and check messages, the termination message, table cells.

Standard library only and imports nothing of the package, so every layer can
use it. Each function does one thing; callers pick the bound of their output.
"""

from __future__ import annotations

import re

__all__ = ["ELLIPSIS", "REPLACEMENT", "cut", "cut_bytes", "one_line", "printable"]

#: What marks a cut; it counts towards the limit.
ELLIPSIS = "..."
#: What an unprintable character becomes.
REPLACEMENT = "\ufffd"

#: What a multi-line output keeps of what ``str.isprintable`` refuses.
_KEPT = frozenset("\n\t")
_LINE_BREAKS = re.compile("[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")


def cut(text: str, limit: int) -> str:
    """``text`` when it fits in ``limit`` characters; otherwise its start and
    ``ELLIPSIS``, exactly ``limit`` characters long. Never longer than ``limit``
    (a limit shorter than the ellipsis keeps only the text's start)."""
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[: max(limit, 0)]
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS


def printable(text: str) -> str:
    """``text`` with every character that is not printable, except newline and tab,
    replaced by ``REPLACEMENT``: control characters (C0, DEL, C1: a carriage
    return, the ESC that starts an ANSI or OSC sequence), format characters (bidi
    overrides, zero-width), surrogates (bytes that were not UTF-8; writing them as
    UTF-8 raises), private-use and unassigned characters, and separators other
    than the space (Python's ``str.isprintable``). An escape sequence from a
    cluster or a check cannot clear the screen or retitle the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in _KEPT else REPLACEMENT for c in text)


def one_line(text: str, limit: int) -> str:
    """``text`` printable on one line (line breaks and tabs become one space, so
    nothing can forge another line) and cut to ``limit`` characters."""
    return cut(printable(_LINE_BREAKS.sub(" ", text[: limit + 1])), limit)


def cut_bytes(text: str, limit: int) -> str:
    """``text`` cut so its UTF-8 encoding is at most ``limit`` bytes (never in the
    middle of a character), ending with ``ELLIPSIS`` when cut. ``text`` must be
    encodable (``printable`` first)."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    room = max(limit - len(ELLIPSIS), 0)
    kept = raw[:room].decode("utf-8", "ignore")
    return kept + ELLIPSIS if limit >= len(ELLIPSIS) else kept
