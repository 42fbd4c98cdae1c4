"""Names the command line needs before anything heavy is imported.

``aicr-runner version`` and ``--help`` read these and nothing else: they must
not pay for loading the settings module, the Kubernetes client, oras, httpx or
requests. ``config`` re-exports them, so the settings stay their one source.
"""

from __future__ import annotations

__all__ = ["CRITERIA_DIMENSIONS", "CRITERIA_FLAG_ORDER", "ENV_PREFIX", "PINNED_AICR_VERSION"]

ENV_PREFIX = "AICR_RUNNER_"
#: The aicr release the runner downloads unless told otherwise (the chart's appVersion pin).
PINNED_AICR_VERSION = "v1.2.0"
#: The criteria dimensions, in the order aicr's catalog and messages list them.
CRITERIA_DIMENSIONS: tuple[str, ...] = ("service", "accelerator", "intent", "os", "platform")
#: The same dimensions in the order the runner passes them as flags (the bash
#: chart's order, docs/migration.md); a test holds it to ``CRITERIA_DIMENSIONS``.
CRITERIA_FLAG_ORDER: tuple[str, ...] = ("service", "accelerator", "os", "intent", "platform")
