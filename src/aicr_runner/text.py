"""Cutting text to a bound and making it printable: Event fields, error wording,
problem lines, step and check messages, the termination message.

Standard library only and imports nothing of the package, so every layer can
use it. Each function does one thing; callers pick the bound of their output.
"""

from __future__ import annotations

import re

__all__ = ["ELLIPSIS", "REPLACEMENT", "cut", "cut_bytes", "one_line", "printable"]

#: What marks a cut; it counts towards the limit.
ELLIPSIS = "..."
#: What stands for a control character or a lone surrogate (text that was not UTF-8).
REPLACEMENT = "\ufffd"

#: C0 and C1 controls and DEL (ESC starts terminal escape sequences: clear screen,
#: retitle, forged lines), and lone surrogates (Python keeps bytes that were not
#: UTF-8 as them; writing them as UTF-8 raises).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAKS = re.compile("[\t\n\r\x0b\x0c\x85\u2028\u2029]+")


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
    """``text`` with every control character except newline and tab, and every lone
    surrogate, replaced by ``REPLACEMENT``: safe to print on a terminal and to
    encode as UTF-8."""
    return _UNPRINTABLE.sub(REPLACEMENT, text)


def one_line(text: str, limit: int) -> str:
    """``text`` printable on one line (line breaks and tabs become one space) and
    cut to ``limit`` characters."""
    return cut(printable(_LINE_BREAKS.sub(" ", text)), limit)


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
