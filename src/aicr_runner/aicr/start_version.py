"""What the run's start line says about aicr's version, asked before the fetch step.

A preinstalled binary whose provenance is not to be verified and which is not
pinned to a sha256 is asked (``aicr --version``); otherwise it may not run before
the fetch step verified it, and, like a release (only a tag until it is downloaded), the fetch step reports
what it is. The question is a process of its own: ``ask`` starts it and
``StartVersion.answer`` waits for it, so a caller can load the run's modules while
the binary answers (a plan does: its start-up is what a user waits for).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from aicr_runner.children.process import child_env

if TYPE_CHECKING:
    from aicr_runner.settings.config import RunnerSettings

__all__ = ["StartVersion", "ask"]

#: A local binary printing its version; past this it is reported unknown (the fetch step checks it).
_ANSWER_SECONDS = 10
#: How often the wait for the answer looks at the shutdown flag.
_POLL_SECONDS = 0.1


class StartVersion:
    """What the start line can truthfully say, and what ``--version`` printed when
    it was asked (the fetch step then does not ask again)."""

    def __init__(self, said: str, *, binary: str = "", question: subprocess.Popen[str] | None = None) -> None:
        self._said = said
        self._binary = binary
        self._question = question

    def answer(self, interrupted: Callable[[], bool] = lambda: False) -> tuple[str, tuple[str, ...] | None]:
        """Waits for the question, at most ``_ANSWER_SECONDS`` and not past a shutdown
        request (``interrupted``): then the binary is killed and reaped, and the version
        is left to the fetch step (which a shutdown stops before it starts)."""
        if self._question is None:
            return self._said, None
        deadline = time.monotonic() + _ANSWER_SECONDS
        while True:
            try:
                printed_text, _ = self._question.communicate(timeout=_POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if interrupted() or time.monotonic() >= deadline:
                    self._question.kill()
                    self._question.communicate()
                    return self._said, None
        if self._question.returncode != 0:
            return f"unknown (preinstalled {self._binary} --version exited {self._question.returncode})", None
        # Imported here, while the question runs it is not needed: ``ask`` starts it sooner.
        from aicr_runner.aicr import capabilities

        version = capabilities.AicrVersion.parse(printed_text)
        printed = tuple(printed_text.splitlines())
        if version is None:
            # Never taken for the pin: the fetch step asks its --help what it can do.
            said = " ".join(printed).strip()[:120]
            return f"unknown version ({said!r}), capabilities detected from flags by the fetch step", printed
        return version.text, printed


def ask(settings: RunnerSettings, env: Mapping[str, str]) -> StartVersion:
    """Put the question to a preinstalled binary (when it may run before the fetch step)."""
    binary = settings.aicr.binary
    if not binary:
        return StartVersion(f"{settings.aicr.version} (release tag, checked after download)")
    if settings.aicr.provenance.mode.value != "off":
        # Nothing runs aicr before its provenance is verified, not even --version.
        return StartVersion(f"preinstalled {binary} (version reported once its provenance is verified)")
    if settings.aicr.binary_sha256:
        # Nor before the fetch step compared it with its pinned sha256.
        return StartVersion(f"preinstalled {binary} (version reported once its sha256 is checked)")
    unknown = f"unknown (preinstalled {binary}; the fetch step checks it)"
    try:
        question = subprocess.Popen(
            [binary, "--version"], env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except (OSError, subprocess.SubprocessError):
        return StartVersion(unknown)
    return StartVersion(unknown, binary=binary, question=question)
