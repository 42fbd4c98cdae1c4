"""Checks of the mirror settings (``mirror.registry``, ``mirror.chartRepository``)."""

from __future__ import annotations

import re

from aicr_runner.settings.addresses import host, port, refuse_credentials, url
from aicr_runner.settings.checks import Invalid, bounded_text

__all__ = ["mirror_chart_repository", "mirror_registry"]

_PATH = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_HINT = "give the registry's credentials to helm and the nodes' runtime, not in the setting"


def mirror_registry(value: object) -> str:
    """``host[:port][/path]``, no scheme, no tag: where the mirrored charts and images live."""
    refuse_credentials(value, "registry", _HINT, elsewhere="an '@' in the path")
    text = bounded_text(value).rstrip("/")
    if not text:
        return text
    if "://" in text:
        raise Invalid("must be a registry without a scheme, like mirror.example.com:5000/aicr (charts are oci://)")
    authority, _, path = text.partition("/")
    name, colon, number = authority.partition(":") if not authority.startswith("[") else (authority, "", "")
    host(name)
    if colon:
        port(number)
    if path and not _PATH.fullmatch(path):
        raise Invalid(f"the path {path!r} must be lowercase repository path components (a-z, 0-9, '.', '_', '-')")
    return text


def mirror_chart_repository(value: object) -> str:
    """An ``http(s)://`` chart repository, or empty."""
    if isinstance(value, str) and not value:
        return value
    return url(("http", "https"), _HINT)(value)
