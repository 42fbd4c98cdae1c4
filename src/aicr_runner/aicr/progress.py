"""deploy.sh's per-component lines, and the table of components they build.

``component_line`` is a pure function of one line (colour codes already
removed): it knows the lines of both deploy.sh generations (reference
contract, section 8). aicr 1.x prints a start line with ``[i/n]`` and one
result line per component. aicr 0.11 prints only a start line
(``Installing <name> (<ns>)...``, or ``Applying manifests for <name>...`` for a
manifest-only component) and, on failure, an ``ERROR: <name> helm install
failed after N attempts`` line (``WARNING: <name> install failed, continuing``
under ``--best-effort``); success is never printed, so a component counts as
installed when the next one starts or the script ends without failing it.

``ComponentTable`` applies those lines, with the time each was seen, and is
read from another thread (the status writer): every access holds its lock.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from aicr_runner import logs
from aicr_runner.net.deadline import thread_in_context

__all__ = ["ComponentLine", "ComponentTable", "LineKind", "ProgressPublisher", "component_line"]

log = logs.get_logger()


class LineKind(StrEnum):
    STARTED = "started"
    RETRYING = "retrying"
    INSTALLED = "installed"
    FAILED = "failed"
    #: 0.11's last line, ``Deployment complete.``: the last component did not fail.
    FINISHED = "finished"


@dataclass(frozen=True)
class ComponentLine:
    kind: LineKind
    name: str = ""
    namespace: str = ""
    #: ``[index/total]`` of a 1.x start line; 0 when the line does not say.
    index: int = 0
    total: int = 0
    attempts: int = 0
    #: The line is 0.11's (no per-component success line follows).
    legacy: bool = False


_NAME = r"(?P<name>[^\s:]+)"
#: (pattern, kind, legacy); named groups: name, and ns, index, total, attempts where the line has them.
#: Compiled on first use (``_compiled``): a run without a deploy never compiles them.
_PATTERNS: tuple[tuple[str, LineKind, bool], ...] = (
    (r"┌─ \[(?P<index>\d+)/(?P<total>\d+)\] " + _NAME + r"(?:\s+→\s+(?P<ns>\S+))?", LineKind.STARTED,
     False),
    (r"└─ ✓ " + _NAME + r" installed$", LineKind.INSTALLED, False),
    (r"└─ ✗ " + _NAME + r" FAILED(?: \(after (?P<attempts>\d+) attempts?\))?", LineKind.FAILED, False),
    (r"^↺ " + _NAME + r": attempt (?P<attempts>\d+)/\d+ failed", LineKind.RETRYING, False),
    (r"^⚠ " + _NAME + r" install failed, continuing \(--best-effort\)", LineKind.FAILED, False),
    (r"^WARNING: " + _NAME + r" install failed, continuing \(--best-effort\)", LineKind.FAILED, True),
    (r"^Installing " + _NAME + r" \((?P<ns>[^)]*)\)\.\.\.$", LineKind.STARTED, True),
    (r"^Applying manifests for " + _NAME + r"\.\.\.$", LineKind.STARTED, True),
    (
        r"^ERROR: " + _NAME + r" (?:helm install|(?:pre-install |post-install )?manifests) "
        r"failed after (?P<attempts>\d+) attempts?$",
        LineKind.FAILED,
        True,
    ),
    (
        r"^RETRY: " + _NAME + r" (?:helm install|(?:pre-install |post-install )?manifests) failed "
        r"\(attempt (?P<attempts>\d+)/\d+\)",
        LineKind.RETRYING,
        True,
    ),
)  # fmt: skip


@functools.cache
def _compiled() -> tuple[tuple[re.Pattern[str], LineKind, bool], ...]:
    return tuple((re.compile(pattern), kind, legacy) for pattern, kind, legacy in _PATTERNS)


def component_line(text: str) -> ComponentLine | None:
    """What one deploy.sh line (colour codes removed, stripped) says about a
    component; None for any other line."""
    if text == "Deployment complete.":
        return ComponentLine(LineKind.FINISHED, legacy=True)
    for pattern, kind, legacy in _compiled():
        if match := pattern.search(text):
            groups = match.groupdict()
            return ComponentLine(
                kind,
                name=groups["name"],
                namespace=groups.get("ns") or "",
                index=int(groups.get("index") or 0),
                total=int(groups.get("total") or 0),
                attempts=int(groups.get("attempts") or 0),
                legacy=legacy,
            )
    return None


@dataclass
class ComponentRecord:
    name: str
    namespace: str = ""
    status: str = "running"  # running | installed | failed | interrupted
    #: When the line was seen (not part of equality: two readers of one output agree).
    started_at: datetime | None = field(default=None, compare=False)
    ended_at: datetime | None = field(default=None, compare=False)
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        seconds = (self.ended_at - self.started_at).total_seconds() if self.started_at and self.ended_at else None
        return {
            "name": self.name,
            "namespace": self.namespace,
            "status": self.status,
            "attempts": self.attempts,
            "durationSeconds": None if seconds is None else round(seconds, 1),
        }


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ComponentTable:
    """The components deploy.sh reported, in its order. ``total`` is deploy.sh's
    ``[i/n]`` (1.x) or, for 0.11, what the caller knows from the bundle.
    ``infer_success``: deploy.sh prints no success line (0.11)."""

    total: int = 0
    infer_success: bool = False
    clock: Callable[[], datetime] = field(default=_now, compare=False, repr=False)
    records: dict[str, ComponentRecord] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def apply(self, line: ComponentLine) -> bool:
        """Take one component line; True when a component ended with it."""
        with self._lock:
            now = self.clock()
            if line.legacy:
                self.infer_success = True
            if line.kind is LineKind.FINISHED:
                return self._end_running("installed", now)
            if line.kind is LineKind.STARTED:
                ended = self._end_running("installed", now) if self.infer_success else False
                self.total = max(self.total, line.total)
                self.records.setdefault(line.name, ComponentRecord(line.name, line.namespace, started_at=now))
                return ended
            record = self.records.setdefault(line.name, ComponentRecord(line.name, started_at=now))
            if line.kind is LineKind.RETRYING:
                record.attempts = max(record.attempts, line.attempts + 1)
                return False
            record.attempts = max(record.attempts, line.attempts)
            ended = record.status == "running"
            if ended or line.kind is LineKind.FAILED:
                record.status = "installed" if line.kind is LineKind.INSTALLED else "failed"
                record.ended_at = record.ended_at or now
            return ended

    def _end_running(self, status: str, now: datetime) -> bool:
        ended = False
        for record in self.records.values():
            if record.status == "running":
                record.status, record.ended_at, ended = status, now, True
        return ended

    def finish(self, *, exit_code: int, interrupted: bool = False) -> None:
        """deploy.sh ended: a component still running ends with it (0.11's last
        one installed on exit 0; the one it was on failed, or was interrupted)."""
        with self._lock:
            status = "interrupted" if interrupted else "installed" if exit_code == 0 else "failed"
            self._end_running(status, self.clock())

    def started(self) -> list[str]:
        """Every component deploy.sh started, in its order."""
        with self._lock:
            return list(self.records)

    def names(self, status: str) -> list[str]:
        with self._lock:
            return [r.name for r in self.records.values() if r.status == status]

    def snapshot(self) -> dict[str, Any]:
        """What the status report shows: counts, the current component, each one's outcome."""
        with self._lock:
            rows = [record.to_dict() for record in self.records.values()]
        installed = sum(1 for row in rows if row["status"] == "installed")
        failed = sum(1 for row in rows if row["status"] == "failed")
        current = next((row["name"] for row in reversed(rows) if row["status"] == "running"), "")
        return {
            "total": max(self.total, len(rows)),
            "done": installed + failed,
            "installed": installed,
            "failed": failed,
            "current": current,
            "components": rows,
        }


class ProgressPublisher:
    """Publishes a step's progress off the relay thread.

    The relay only calls ``changed`` (a flag and a notify under a lock: it never
    waits for the API). A thread of its own writes: when a component ended (but
    at most once per ``min_gap`` seconds, so components ending in quick
    succession share a write), otherwise at most every ``interval`` seconds;
    changes that arrive while a write is in flight are coalesced into the next one. ``close`` stops
    it before the step's own end is written, so no progress write can land
    after it (a write already in flight is serialised by the status writer).
    """

    def __init__(
        self,
        publish: Callable[[], None],
        *,
        interval: float = 5.0,
        min_gap: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self._interval = interval
        self._min_gap = min_gap
        self._clock = clock
        self._wake = threading.Condition()
        self._dirty = self._urgent = self._closed = False
        self._last = float("-inf")
        self.writes = 0
        # In the starter's context: its events carry the step that started it (bound by the step runner).
        self._thread = thread_in_context(self._run, name="progress-publisher")

    def __enter__(self) -> ProgressPublisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def changed(self, ended: bool) -> None:
        with self._wake:
            self._dirty = True
            self._urgent = self._urgent or ended
            self._wake.notify()

    def close(self, wait_seconds: float = 5.0) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(wait_seconds)

    def _due(self) -> float | None:
        """0 when a write is due, the seconds until it is, or None (nothing changed)."""
        if not self._dirty:
            return None
        gap = self._min_gap if self._urgent else self._interval
        return max(0.0, self._last + gap - self._clock())

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (wait := self._due()) != 0.0:
                    self._wake.wait(wait)
                if self._closed:
                    return
                self._dirty = self._urgent = False
            try:
                self._publish()
            except Exception as exc:  # noqa: BLE001 - progress is advisory: the step's end is written anyway
                log.warning("progress not published", reason=f"{type(exc).__name__}: {exc}")
            self.writes += 1
            self._last = self._clock()
