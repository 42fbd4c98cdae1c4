"""The mirror command's failures, each with its own exit code (docs/air-gap.md).

The copy tools (oras, helm) report failures as text: each is translated here,
once, at the boundary, into one of these classes; nothing past this module reads
a tool's message to decide anything.
"""

from __future__ import annotations

import re
from enum import IntEnum

from aicr_runner.errors import RunnerError

__all__ = ["ChartUnavailableError", "CopyError", "MirrorExit", "classify_tool_failure"]


class MirrorExit(IntEnum):
    #: A source registry or chart repository could not be reached.
    SOURCE_UNAVAILABLE = 40
    #: A chart version, an image tag or an artifact is not at its source.
    NOT_FOUND = 41
    #: The target holds another digest than the source's for an item.
    DIGEST_MISMATCH = 42
    #: A registry refused the credentials (401/403), source or target.
    AUTH_REFUSED = 43
    #: An item is missing from the target at the final check.
    INCOMPLETE = 44
    #: The target registry could not be reached, or the copy failed otherwise.
    TARGET_UNAVAILABLE = 45


_AUTH = re.compile(r"\b(401|403)\b|unauthori[sz]ed|denied|forbidden|authentication required", re.I)
_NOT_FOUND = re.compile(r"\b404\b|not found|manifest unknown|name unknown|MANIFEST_UNKNOWN|NAME_UNKNOWN", re.I)
_DIGEST = re.compile(r"digest mismatch|mismatch(ed)? digest|content digest .* does not match|invalid digest", re.I)


def classify_tool_failure(stderr: str, *, source_side: bool) -> MirrorExit:
    """What an oras or helm failure means (its stderr, at the boundary)."""
    if _AUTH.search(stderr):
        return MirrorExit.AUTH_REFUSED
    if _DIGEST.search(stderr):
        return MirrorExit.DIGEST_MISMATCH
    if _NOT_FOUND.search(stderr):
        return MirrorExit.NOT_FOUND if source_side else MirrorExit.TARGET_UNAVAILABLE
    return MirrorExit.SOURCE_UNAVAILABLE if source_side else MirrorExit.TARGET_UNAVAILABLE


class CopyError(RunnerError):
    """One item could not be mirrored; ``reference`` names it."""

    def __init__(self, reason: MirrorExit, reference: str, detail: str) -> None:
        super().__init__(f"{_WHAT[reason]}: {reference}: {detail}", exit_code=int(reason))
        self.reason = reason
        self.reference = reference


_WHAT = {
    MirrorExit.SOURCE_UNAVAILABLE: "source unreachable",
    MirrorExit.NOT_FOUND: "not found at its source",
    MirrorExit.DIGEST_MISMATCH: "digest mismatch",
    MirrorExit.AUTH_REFUSED: "credentials refused",
    MirrorExit.INCOMPLETE: "missing from the target",
    MirrorExit.TARGET_UNAVAILABLE: "target unreachable or refused the copy",
}


class ChartUnavailableError(CopyError):
    """``helm pull`` of a component's chart failed: the source is unreachable or lacks the version."""

    def __init__(self, component: str, chart: str, version: str, source: str, cause: str) -> None:
        super().__init__(
            classify_tool_failure(cause, source_side=True),
            f"chart {chart} {version} of component {component} from {source}",
            cause,
        )
        self.component = component
        self.source = source
