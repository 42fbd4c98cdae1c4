"""The mirror command's failures, each with its own exit code (docs/air-gap.md)."""

from __future__ import annotations

from aicr_runner.errors import RunnerError

__all__ = ["MIRROR_EXIT_CODES", "ChartUnavailableError", "MirrorExit"]


class MirrorExit:
    #: A chart (or its version) could not be fetched from its source.
    SOURCE_UNAVAILABLE = 40


#: Every exit code of ``aicr-runner mirror`` beyond the runner's own, with what it means.
MIRROR_EXIT_CODES = {
    MirrorExit.SOURCE_UNAVAILABLE: "a chart or its version could not be fetched from its source",
}


class ChartUnavailableError(RunnerError):
    """``helm pull`` of a component's chart failed: the source is unreachable or lacks the version."""

    def __init__(self, component: str, chart: str, version: str, source: str, cause: str) -> None:
        super().__init__(
            f"chart {chart} {version} of component {component} could not be fetched from {source}: {cause}",
            exit_code=MirrorExit.SOURCE_UNAVAILABLE,
        )
        self.component = component
        self.source = source
