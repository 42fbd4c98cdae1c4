"""Credentials in a URL or registry reference, masked wherever a value is shown.

``https://user:password@host/path`` and ``user:password@registry/repo:tag`` are
refused as settings, and the line that refuses one must not print what it
refuses. A password can hold any character (``/ ? # @ : %``, spaces, quotes),
so nothing in it can mark where it ends: a parser that stops at the first
``/`` or ``#`` shows the rest. What can be trusted is the ``@`` a host follows,
and a host holds no ``@``. So everything from the start (after a known scheme)
to the last ``@`` of the value is replaced by one fixed marker, whatever lies in
between. The one ``@`` that is never a userinfo end is an OCI digest at the very
end (``repo@sha256:<hex>``): no host is written ``sha256:<64 hex>``.

A value with an ``@`` in its path (``https://host/a@b``) is masked further than
its userinfo: a message shows less of it, never a credential.

Standard library only: the settings, the values-file check and the command line
use it before anything else is imported.
"""

from __future__ import annotations

import re

__all__ = ["MARKER", "has_userinfo", "mask_userinfo", "userinfo_span"]

#: What a masked userinfo becomes (``https://***@host/path``).
MARKER = "***"
#: Schemes kept in front of the marker. A fixed list: a scheme taken from the
#: value would be text the value chose (a reference's user name ``ab`` followed
#: by a password ``//x`` reads like ``ab://x``).
_SCHEMES = ("https://", "http://", "oci://")
_DIGEST_TAIL = re.compile(r"@(?:sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128})\Z")


def userinfo_span(text: str) -> tuple[int, int] | None:
    """Where the userinfo of ``text`` lies (start, end: the ``@`` it ends at), or None."""
    lowered = text[:8].lower()
    start = next((len(s) for s in _SCHEMES if lowered.startswith(s)), 0)
    digest = _DIGEST_TAIL.search(text)
    end = text.rfind("@", start, digest.start() if digest else len(text))
    return (start, end) if end >= 0 else None


def has_userinfo(text: str) -> bool:
    """Whether ``text`` holds an ``@`` that may end a user or password (see the module)."""
    return userinfo_span(text) is not None


def mask_userinfo(text: str) -> str:
    """``text`` with everything between its scheme (or its start) and its last
    ``@`` replaced by ``***``: ``https://***@host/path``, ``***@registry/repo``."""
    span = userinfo_span(text)
    return text if span is None else text[: span[0]] + MARKER + text[span[1] :]
