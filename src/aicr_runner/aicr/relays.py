"""The pod-log relays for the children a step runs: what each output line becomes.

``logs.relay`` writes blocks of child output to the pod log; these decide which
lines go there as text and which become structured events. An aicr call prints
little, so each of its lines is looked at; deploy.sh may print gigabytes, so its
blocks are passed on whole and only its markers are picked out.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from aicr_runner import logs
from aicr_runner.children import blockscan

if TYPE_CHECKING:
    from aicr_runner.aicr.classify import DeployMarkers

__all__ = ["aicr_relay", "deploy_relay"]

log = logs.get_logger()

#: aicr records at these levels are logged as events of that level, not relayed as text.
_AICR_LEVELS = {"ERROR": "error", "WARN": "warning", "WARNING": "warning"}
#: Plain lines aicr prints when it fails before its logger exists (a flag it
#: does not define): urfave/cli's usage error and Go's default log record.
_PLAIN_ERRORS = re.compile(r"^(?:Incorrect Usage: |\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR )")


def aicr_relay(
    step: str, tail: deque[str] | None = None, on_line: Callable[[str], None] | None = None
) -> Callable[[str], None]:
    """The pod-log relay for an aicr call: its output is small, so each line
    is looked at (JSON records re-rendered, errors and warnings logged as
    such, the tail kept); plain lines go straight to the pod log."""
    bound = log.bind(step=step)  # as its relayed lines, called within a step or not

    def on_block(text: str) -> None:
        plain: list[str] = []
        for line in text[:-1].split("\n"):
            if tail is not None:
                tail.append(line)
            if on_line is not None:
                on_line(line)
            shown = logs.format_relayed_line(line)
            level = _AICR_LEVELS.get(shown.split(" ", 1)[0]) or ("error" if _PLAIN_ERRORS.match(shown) else None)
            if level is None:
                plain.append(shown)
                continue
            if plain:
                logs.relay("\n".join(plain), step=step, source="aicr")
                plain.clear()
            getattr(bound, level)(shown, source="aicr")
        if plain:
            logs.relay("\n".join(plain), step=step, source="aicr")

    return on_block


def deploy_relay(step: str, markers: DeployMarkers) -> Callable[[str], None]:
    """The pod-log relay for deploy.sh, which may print gigabytes: blocks go
    straight to the pod log; only the lines that mean something (progress
    and failure markers, errors) become structured events, and ``markers``
    keeps what they said."""
    bound = log.bind(step=step)  # as its relayed lines, called within a step or not

    def on_block(text: str) -> None:
        written = 0
        meaningful = markers.scan(text)
        # The pass markers.scan made (cached): whether any part of the block needs JSON escaping.
        json_plain = blockscan.scan(text).json_plain
        for start, end, level in meaningful:
            logs.relay(text[written:start], step=step, source="deploy.sh", json_plain=json_plain)
            getattr(bound, level)(text[start:end], source="deploy.sh")
            written = end + 1
        logs.relay(text[written:], step=step, source="deploy.sh", json_plain=json_plain)

    return on_block
