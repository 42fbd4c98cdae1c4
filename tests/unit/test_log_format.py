"""Events look exactly as structlog rendered them, without importing structlog.

The runner renders its own events (structlog's import, asyncio with it, was a
large share of a quick plan's time); structlog, a test dependency only, is the
reference they are compared with.
"""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from aicr_runner import logs
from aicr_runner.settings.config import LogFormat

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
EVENTS: list[tuple[str, str, dict[str, Any]]] = [
    ("info", "step started", {"step": "fetch"}),
    ("info", "aicr-runner starting", {"mode": "plan", "criteria": "service=eks, accelerator=h100", "pack": ""}),
    (
        "warning",
        "run status not written",
        {"reason": "a b", "n": 3, "f": 0.5, "none": None, "items": [1, "a"], "eq": "a=b", "quote": "it's"},
    ),
    ("error", "fetch failed: exit 27", {"exit_code": 27, "status": "/tmp/x"}),
    ("error", "", {"k": "v"}),
    ("info", "unicode é ─ ✓", {"nested": {"a": 1}, "flag": True, "tab": "a\tb"}),
]


def structlog_as_configured_before(fmt: LogFormat, stream: io.StringIO) -> None:
    """The runner's structlog configuration before it rendered events itself."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt is LogFormat.JSON
        else structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_events_render_as_structlog_rendered_them(fmt: LogFormat) -> None:
    ours, theirs = io.StringIO(), io.StringIO()
    logs.configure(fmt, stream=ours)
    for level, event, values in EVENTS:
        getattr(logs.get_logger().bind(step="deploy"), level)(event, **values)
    logs.get_logger().debug("below the threshold")
    structlog_as_configured_before(fmt, theirs)
    for level, event, values in EVENTS:
        getattr(structlog.get_logger().bind(step="deploy"), level)(event, **values)
    structlog.get_logger().debug("below the threshold")
    assert STAMP.sub("T", ours.getvalue()) == STAMP.sub("T", theirs.getvalue())


def test_stdlib_loggers_render_like_events() -> None:
    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    logging.getLogger("urllib3.connectionpool").warning("Retrying after %s", "reset")
    logging.getLogger("oras").info("below the WARNING threshold")
    assert STAMP.sub("T", out.getvalue()) == '{"event": "Retrying after reset", "level": "warning", "timestamp": "T"}\n'


def test_a_plan_imports_no_logging_library_or_retry_stack(tmp_path: Path) -> None:
    """A plan with a preinstalled aicr and no pack: neither structlog nor
    tenacity, the HTTP stack, the Kubernetes client or the deploy relay's matcher.
    (asyncio and the standard library's logging come with pydantic-settings,
    which every run reads its settings with.)"""
    from tests.fake_aicr import install_fake_aicr

    fake = install_fake_aicr(tmp_path / "bin")
    probe = (
        "import sys\n"
        "from aicr_runner.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = ['structlog', 'tenacity', 'httpx', 'requests', 'oras', 'kubernetes', 'ctypes', 'hyperscan']\n"
        "print(code, [name for name in heavy if name in sys.modules], file=sys.stderr)\n"
    )
    argv = ["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan"), "--accelerator", "h100"]
    env = {"PATH": "/usr/bin:/bin", "AICR_RUNNER_AICR__PROVENANCE__MODE": "off", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.stderr.strip().splitlines()[-1] == "0 []", result.stderr[-3000:]
