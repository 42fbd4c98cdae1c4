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


def printable(text: str) -> str:
    """``text`` with every character that is not printable replaced by
    ``REPLACEMENT``: control characters (C0, DEL, C1: a newline, a carriage
    return, the ESC that starts an ANSI or OSC sequence), format characters (bidi
    overrides, zero-width), surrogates (invalid Unicode), private-use and
    unassigned characters, and separators other than the space (Python's
    ``str.isprintable``). A newline or an escape sequence from a cluster cannot
    forge a table line, clear the screen or retitle the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else REPLACEMENT for c in text)


def one_line(text: str, limit: int) -> str:
    """``text`` printable and at most ``limit`` characters (``cut``)."""
    return cut(printable(text[: limit + 1]), limit)
