"""OCI references for data packs: ``host[:port]/repo[:tag][@sha256:...]``.

Shared by the settings (a malformed ref is refused at load time, before anything
is downloaded) and the pack pull.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aicr_runner.masking import has_userinfo

__all__ = ["DIGEST", "InvalidReference", "PackReference"]

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::(?P<port>[0-9]+))?")


class InvalidReference(ValueError):
    """The reason a reference is malformed; the caller names the setting."""


@dataclass(frozen=True)
class PackReference:
    """``host[:port]/repo[:tag][@sha256:...]``; the host is always explicit."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> PackReference:
        if has_userinfo(ref):
            # First: a password holding '/' would otherwise be read as a host, tag or repository and quoted.
            raise InvalidReference(
                "an '@' that does not start a digest at the end (@sha256:<64 lowercase hex characters>): a digest "
                "written wrong, or a user or password (refused: it would show in logs and reports)"
            )
        host, slash, rest = ref.partition("/")
        if "://" in ref:
            raise InvalidReference("must be an OCI reference without a scheme, like registry.example.com/org/pack:1.0")
        host_match = _HOST.fullmatch(host) if slash else None
        if host_match is None:
            raise InvalidReference("must start with a registry host such as ghcr.io or 127.0.0.1:5000")
        port = host_match.group("port")
        if port is not None and not 1 <= int(port) <= 65535:
            raise InvalidReference(f"port {port} of {host!r} is not a TCP port (1-65535)")
        rest, at, digest = rest.partition("@")
        if at and not DIGEST.fullmatch(digest):
            raise InvalidReference("a digest must be sha256:<64 lowercase hex characters>")
        repository, colon, tag = rest.rpartition(":") if ":" in rest else (rest, "", "")
        if colon and not _TAG.fullmatch(tag):
            raise InvalidReference(f"{tag!r} is not a valid tag")
        if not _REPOSITORY.fullmatch(repository):
            raise InvalidReference(f"{repository!r} is not a valid repository name (lowercase path components)")
        return cls(host, repository, tag or None, digest or None)

    @property
    def reference(self) -> str:
        """What the manifest URL names: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"
