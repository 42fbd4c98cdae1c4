"""One call of a copy or render tool (oras, helm) that ends: by its deadline, and at
once when a shutdown is requested (SIGTERM, Ctrl-C): the tool is sent TERM, given a
few seconds, then KILL, and reaped either way; and how a failed one is quoted. Used by
``oras_copier``, ``render`` and ``aicr_list``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from subprocess import PIPE

from aicr_runner.errors import InterruptedRun

__all__ = ["RESUME", "exit_status", "last_line", "run_tool", "stop_if_interrupted"]

#: What an interrupted copy tells the operator (the digest reads in process say it too).
RESUME = "run the same command again to resume (what the target holds is not sent again)"

#: How often a running tool call looks at the shutdown flag and its deadline.
_POLL_SECONDS = 0.2


def last_line(text: str, limit: int) -> str:
    """A failed tool's last non-blank line of output (at most ``limit`` characters): what it said last."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "no output"


def exit_status(code: int) -> str:
    """``exit 1``, or the signal that ended the tool (whose output is then often empty)."""
    if code >= 0:
        return f"exit {code}"
    import signal

    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _stop(process: subprocess.Popen[str]) -> None:
    """TERM, a few seconds to end, then KILL; reaped either way."""
    process.terminate()
    try:
        process.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def stop_if_interrupted(argv: Sequence[str], interrupted: Callable[[], bool]) -> None:
    if interrupted():
        raise InterruptedRun(f"interrupted during {Path(argv[0]).name} {' '.join(argv[1:3])}: {RESUME}")


def run_tool(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    timeout: float,
    interrupted: Callable[[], bool],
    timed_out: Callable[[], Exception],
) -> subprocess.CompletedProcess[str]:
    """The tool's exit code and output. ``InterruptedRun`` once a shutdown is requested
    (nothing starts after it); ``timed_out()`` raised past ``timeout`` seconds; a missing
    tool is ``FileNotFoundError``, for the caller to word."""
    stop_if_interrupted(argv, interrupted)
    process = subprocess.Popen(list(argv), cwd=cwd, stdout=PIPE, stderr=PIPE, text=True)
    deadline = time.monotonic() + timeout
    with process:
        while True:
            try:
                out, err = process.communicate(timeout=_POLL_SECONDS)
                return subprocess.CompletedProcess(list(argv), process.returncode, out, err)
            except subprocess.TimeoutExpired:
                if interrupted() or time.monotonic() > deadline:
                    _stop(process)
                    stop_if_interrupted(argv, interrupted)
                    raise timed_out() from None
