"""Cutting text to a bound: Event fields, error wording, problem lines.

Standard library only and imports nothing of the package, so every layer can
use it.
"""

from __future__ import annotations

__all__ = ["ELLIPSIS", "cut"]

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
