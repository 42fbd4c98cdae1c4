"""Cutting text to a bound and making it printable: Event fields, error wording,
problem lines, table cells.

Standard library only and imports nothing of the package, so every layer can
use it.
"""

from __future__ import annotations

__all__ = ["ELLIPSIS", "REPLACEMENT", "cut", "one_line", "printable"]

#: What marks a cut; it counts towards the limit.
ELLIPSIS = "..."


def cut(text: str, limit: int) -> str:
    """``text`` when it fits in ``limit`` characters; otherwise its start and
    ``ELLIPSIS``, exactly ``limit`` characters long. Never longer than ``limit``
    (a limit shorter than the ellipsis keeps only the text's start)."""
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[: max(limit, 0)]
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS


#: What an unprintable character becomes.
REPLACEMENT = "\ufffd"
#: Control (C0, DEL, C1), format (bidi overrides, zero-width), surrogate (invalid
#: Unicode), private-use and unassigned characters, and the line and paragraph
#: separators: none of them may reach a terminal or a one-line output.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with every character that could move the cursor, end a line,
    start an escape sequence (ESC, CSI, OSC) or is not valid Unicode replaced by
    ``REPLACEMENT``: a newline or an ANSI sequence from a cluster cannot forge a
    table line, clear the screen or retitle the terminal."""
    import unicodedata

    if text.isascii() and text.isprintable():
        return text
    return "".join(REPLACEMENT if unicodedata.category(c) in _UNPRINTABLE_CATEGORIES else c for c in text)


def one_line(text: str, limit: int) -> str:
    """``text`` printable and at most ``limit`` characters (``cut``)."""
    return cut(printable(text[: limit + 1]), limit)
