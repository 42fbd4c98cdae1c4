"""One installer at a time: the install Lease (``coordination.k8s.io/v1``).

Every run of one chart release uses the same Lease (its name comes from the
release, in the release namespace). A run takes it before the deploy step and
keeps it, renewed by a background thread, until the run ends; a run that finds
it held by a live holder waits inside its pod (no pod failure, so the Job's
backoffLimit is not used), bounded by ``wait_seconds`` (then exit 31).

Expiry follows client-go's leader election: a holder counts as gone when the
Lease has not changed for its ``leaseDurationSeconds`` as measured on this
pod's own monotonic clock, so clock skew between nodes cannot hand out a live
holder's Lease. A run that starts after its predecessor was killed therefore
waits up to one Lease duration.

The holder writes the Helm releases it is about to operate on into the
annotation ``RELEASES_ANNOTATION`` before deploy.sh starts. A later holder that
finds one of them ``pending-*`` knows it was left by a dead predecessor of this
same chart release (it holds the Lease, so nobody else of this release is
operating), which is the proof the deploy step needs before it recovers it.

A validation-only run (``aicr-runner validate``) takes the Lease too, without
waiting: held by a live holder, it ends at once. It marks the Lease
``HELD_FOR_ANNOTATION: validation``, and an install that finds such a holder
takes the Lease over at once instead of waiting. The validation sees it has lost
the Lease (``still_held``) and discards its verdict, so it never reports a
half-installed cluster, and an install never waits for a validation.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from aicr_runner import logs
from aicr_runner.errors import ApiConflictError, InterruptedRun, LeaseError, RunnerError
from aicr_runner.kube.api import KubeApi, LeaseRecord
from aicr_runner.net.deadline import thread_in_context
from aicr_runner.run.report import utcnow
from aicr_runner.settings.config import LeaseSettings

__all__ = ["HELD_FOR_ANNOTATION", "RELEASES_ANNOTATION", "InstallLease"]

log = logs.get_logger()

RELEASES_ANNOTATION = "aicr-runner.nvidia.com/releases"
#: Why the holder holds the Lease: ``install`` or ``validation`` (an install takes a validation's over).
HELD_FOR_ANNOTATION = "aicr-runner.nvidia.com/held-for"
_INSTALL, _VALIDATION = "install", "validation"
#: Conflicting writes a validation retries before it gives up taking the Lease.
_VALIDATION_TRIES = 3
#: "The pod log says so once a minute."
LOG_EVERY_SECONDS = 60.0


class InstallLease:
    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        settings: LeaseSettings,
        *,
        interrupted: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = 2.0,
        log_every_seconds: float = LOG_EVERY_SECONDS,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.settings = settings
        self.holder = settings.holder
        self._interrupted = interrupted
        self._clock = clock
        self._poll = poll_seconds
        self._log_every = log_every_seconds
        self._log = log.bind(lease=f"{namespace}/{settings.name}")
        self._record: LeaseRecord | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Releases the previous holders announced (the proof for recovery).
        self.announced_before: frozenset[str] = frozenset()
        self.lost = False

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.settings.name}"

    def _live_other(self, current: LeaseRecord | None) -> str | None:
        if current is None or not current.holder or current.holder == self.holder:
            return None
        renewed = current.renew_time or current.acquire_time
        duration = current.duration_seconds or self.settings.duration_seconds
        if renewed is not None and (utcnow() - renewed).total_seconds() >= duration:
            return None
        return current.holder

    def take_for_validation(self) -> str | None:
        """Take the Lease for a validation-only run, never waiting: returns the live
        holder that keeps it (the run ends), or None once it is this run's."""
        for _ in range(_VALIDATION_TRIES):
            current = self._api.get_lease(self.namespace, self.settings.name)
            holder = self._live_other(current)
            if holder is not None:
                return holder
            write = self._api.create_lease if current is None else self._api.replace_lease
            if self._try(functools.partial(write, self.namespace, self._mine(current, _VALIDATION))):
                return None
        raise LeaseError(
            f"could not take the install Lease {self.where}: {_VALIDATION_TRIES} writes in a row conflicted"
        )

    def still_held(self) -> bool:
        """Whether the Lease is still this run's (read now: an install may have taken it over)."""
        if self.lost or self._record is None:
            return False
        current = self._api.get_lease(self.namespace, self.settings.name)
        if current is None or current.holder != self.holder:
            self.lost = True  # never written again: release() leaves it to its new holder
            return False
        return True

    # -- taking it ---------------------------------------------------------------

    def acquire(self, on_wait: Callable[[str, float], None] | None = None) -> float:
        """Take the Lease; returns the seconds spent waiting for it.

        ``on_wait(holder, waited_seconds)`` is called when the wait starts and
        then once a minute (the status ConfigMap is written there).
        """
        started = self._clock()
        #: (resourceVersion, when it was first seen): the expiry clock.
        observed: tuple[str, float] | None = None
        last_said: float | None = None
        while True:
            current = self._api.get_lease(self.namespace, self.settings.name)
            now = self._clock()
            if current is None:
                if self._try(lambda: self._api.create_lease(self.namespace, self._mine(None, _INSTALL))):
                    return now - started
                continue
            if observed is None or observed[0] != current.resource_version:
                observed = (current.resource_version, now)
            duration = current.duration_seconds or self.settings.duration_seconds
            free = not current.holder or current.holder == self.holder
            if not free and current.annotations.get(HELD_FOR_ANNOTATION) == _VALIDATION:
                # A validation never makes an install wait: it loses the Lease and discards its verdict.
                self._log.info("taking the install Lease over from a validation", previous_holder=current.holder)
                free = True
            if free or now - observed[1] >= duration:
                if self._take(current, expired_after=None if free else now - observed[1]):
                    return now - started
                continue
            waited = now - started
            self._give_up_past_the_wait(current.holder, waited)
            if last_said is None or now - last_said >= self._log_every:
                last_said = now
                self._say_waiting(current.holder, waited, on_wait)
            self._sleep_checking(min(self._poll, max(duration / 4, 0.2)))

    def _take(self, current: LeaseRecord, *, expired_after: float | None) -> bool:
        """Replace ``current`` with this run's; ``expired_after``: how long a holder
        that is not this run was silent (None when the Lease was free)."""
        if expired_after is not None:
            self._log.warning(
                "install Lease expired: its holder stopped renewing it; taking it over",
                previous_holder=current.holder,
                silent_seconds=round(expired_after, 1),
            )
        taken = self._mine(current, _INSTALL)
        return self._try(lambda: self._api.replace_lease(self.namespace, taken))

    def _give_up_past_the_wait(self, holder: str, waited: float) -> None:
        if waited >= self.settings.wait_seconds:
            raise LeaseError(
                f"gave up waiting for the install Lease {self.where} after {waited:.0f}s "
                f"(lease.waitSeconds={self.settings.wait_seconds:g}): it is held by {holder}; "
                "another run of this release is installing. Re-run once it has finished, or raise lease.waitSeconds"
            )

    def _say_waiting(self, holder: str, waited: float, on_wait: Callable[[str, float], None] | None) -> None:
        self._log.info(
            "waiting for the install Lease",  # the Lease is bound: lease=<namespace>/<name>
            holder=holder,
            waited_s=round(waited),
            gives_up_after_s=self.settings.wait_seconds,
        )
        if on_wait is not None:
            on_wait(holder, waited)

    def _sleep_checking(self, seconds: float) -> None:
        deadline = self._clock() + seconds
        while True:
            if self._interrupted():
                raise InterruptedRun("shutdown requested while waiting for the install Lease; nothing was deployed")
            left = deadline - self._clock()
            if left <= 0:
                return
            time.sleep(min(left, 0.2))

    def _mine(self, current: LeaseRecord | None, held_for: str) -> LeaseRecord:
        now = utcnow()
        annotations = {**(current.annotations if current else {}), HELD_FOR_ANNOTATION: held_for}
        transitions = current.transitions if current else 0
        if current is not None and current.holder != self.holder:
            transitions += 1
        return LeaseRecord(
            name=self.settings.name,
            holder=self.holder,
            duration_seconds=self.settings.duration_seconds,
            acquire_time=now,
            renew_time=now,
            transitions=transitions,
            annotations=annotations,
            resource_version=current.resource_version if current else "",
        )

    def _try(self, write: Callable[[], LeaseRecord]) -> bool:
        try:
            record = write()
        except ApiConflictError:
            return False  # someone else was faster: read again
        with self._lock:
            self._record = record
        self.announced_before = frozenset(_announced(record))
        self._log.info("install Lease taken", holder=self.holder, held_for=record.annotations.get(HELD_FOR_ANNOTATION))
        return True

    # -- while holding it --------------------------------------------------------

    def announce(self, releases: Iterable[str]) -> None:
        """Record the releases this run is about to operate on ("ns/name")."""
        merged = sorted(set(self.announced_before) | set(releases))
        self._update(lambda r: replace(r, annotations={**r.annotations, RELEASES_ANNOTATION: json.dumps(merged)}))

    def start_renewing(self, on_lost: Callable[[str], None]) -> None:
        interval = max(self.settings.duration_seconds / 3, 0.5)

        def renew() -> None:
            last_ok = self._clock()
            while not self._stop.wait(interval):
                try:
                    self._update(lambda r: replace(r, renew_time=utcnow()))
                    last_ok = self._clock()
                except RunnerError as exc:  # LeaseError, or a conflict on the re-read
                    silent = self._clock() - last_ok
                    self._log.warning("install Lease renewal failed", reason=exc.message, silent_s=round(silent, 1))
                    if self.lost or silent >= self.settings.duration_seconds:
                        self.lost = True
                        on_lost(exc.message)
                        return

        # In the acquiring step's context: the renewal's events carry that step.
        self._thread = thread_in_context(renew, name="lease-renewal")
        self._thread.start()

    def _update(self, change: Callable[[LeaseRecord], LeaseRecord]) -> None:
        """Write a change to our Lease; LeaseError when it is no longer ours."""
        with self._lock:
            record = self._record
            if record is None:
                raise LeaseError(f"install Lease {self.where} is not held")
            with contextlib.suppress(ApiConflictError):
                self._record = self._api.replace_lease(self.namespace, change(record))
                return
            current = self._api.get_lease(self.namespace, self.settings.name)
            if current is None or current.holder != self.holder:
                self.lost = True
                raise LeaseError(
                    f"install Lease {self.where} was taken over by {current.holder if current else 'nobody'}"
                )
            self._record = self._api.replace_lease(self.namespace, change(current))

    def release(self) -> None:
        """Stop renewing and hand the Lease back (holder cleared; annotations kept)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._record is None or self.lost:
            return
        try:
            self._update(lambda r: replace(r, holder="", renew_time=utcnow()))
            self._log.info("install Lease released")
        except LeaseError as exc:
            self._log.warning("install Lease not released; it expires on its own", reason=exc.message)
        with self._lock:
            self._record = None


def _announced(record: LeaseRecord) -> list[str]:
    try:
        value = json.loads(record.annotations.get(RELEASES_ANNOTATION, "[]"))
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
