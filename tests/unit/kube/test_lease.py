"""The install Lease: taking it, waiting for it, expiry, renewal, release."""

from __future__ import annotations

import json
import threading
import time

import pytest

from aicr_runner.errors import ExitCode, InterruptedRun, LeaseError
from aicr_runner.kube.api import LeaseRecord
from aicr_runner.kube.lease import HELD_FOR_ANNOTATION, RELEASES_ANNOTATION, InstallLease
from aicr_runner.settings.config import LeaseSettings
from tests.support.fakes import FakeKubeApi

NS = "aicr"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def settings(**kw: object) -> LeaseSettings:
    base: dict[str, object] = {"name": "nvidia-aicr-install", "pod_name": "pod-b", "job_name": "job-b"}
    return LeaseSettings.model_validate({**base, **kw})


def held_by(api: FakeKubeApi, holder: str, duration: int = 60, **annotations: str) -> None:
    api.leases[(NS, "nvidia-aicr-install")] = LeaseRecord(
        "nvidia-aicr-install", holder=holder, duration_seconds=duration, annotations=annotations, resource_version="7"
    )


def test_a_free_release_creates_the_lease_with_the_pod_and_job_as_holder() -> None:
    api = FakeKubeApi()
    lease = InstallLease(api, NS, settings())
    assert lease.acquire() < 1
    stored = api.leases[(NS, "nvidia-aicr-install")]
    assert stored.holder == "job-b/pod-b"
    assert stored.duration_seconds == 60
    assert stored.acquire_time is not None


def test_a_released_lease_is_taken_at_once_and_keeps_the_predecessors_announcement() -> None:
    api = FakeKubeApi()
    held_by(api, "", 60, **{RELEASES_ANNOTATION: json.dumps(["acme/acme-agent"])})
    lease = InstallLease(api, NS, settings())
    lease.acquire()
    assert lease.announced_before == {"acme/acme-agent"}
    lease.announce(["acme/acme-config"])
    stored = api.leases[(NS, "nvidia-aicr-install")]
    assert json.loads(stored.annotations[RELEASES_ANNOTATION]) == ["acme/acme-agent", "acme/acme-config"]
    assert stored.transitions == 1


def test_a_live_holder_makes_the_run_wait_and_say_whom_it_waits_for() -> None:
    api = FakeKubeApi()
    held_by(api, "job-a/pod-a")
    seen: list[str] = []

    def on_wait(holder: str, waited: float) -> None:
        seen.append(holder)
        # the holder finishes while we wait
        api.leases[(NS, "nvidia-aicr-install")] = LeaseRecord("nvidia-aicr-install", resource_version="8")

    lease = InstallLease(api, NS, settings(), poll_seconds=0.01)
    lease.acquire(on_wait)
    assert seen == ["job-a/pod-a"]
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "job-b/pod-b"


def test_a_holder_that_stops_renewing_loses_the_lease_after_its_duration() -> None:
    api = FakeKubeApi()
    held_by(api, "job-a/pod-a", duration=5)
    clock = Clock()
    waits: list[float] = []

    def on_wait(holder: str, waited: float) -> None:
        waits.append(waited)

    lease = InstallLease(api, NS, settings(), clock=clock, poll_seconds=0.01, log_every_seconds=1)

    def tick() -> None:
        for _ in range(40):
            time.sleep(0.005)
            clock.now += 0.5

    ticker = threading.Thread(target=tick)
    ticker.start()
    waited = lease.acquire(on_wait)
    ticker.join()
    assert 5 <= waited < 8
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "job-b/pod-b"
    assert waits, "the wait was never reported"


def test_a_lease_held_past_the_wait_budget_gives_up_with_exit_31() -> None:
    api = FakeKubeApi()
    held_by(api, "job-a/pod-a", duration=3600)
    lease = InstallLease(api, NS, settings(wait_seconds=0.2), poll_seconds=0.01)
    with pytest.raises(LeaseError) as caught:
        lease.acquire()
    assert caught.value.exit_code == ExitCode.LEASE_WAIT_EXPIRED
    assert int(ExitCode.LEASE_WAIT_EXPIRED) == 31
    assert "held by job-a/pod-a" in caught.value.message
    assert "lease.waitSeconds" in caught.value.message


def test_a_shutdown_while_waiting_interrupts_without_taking_the_lease() -> None:
    api = FakeKubeApi()
    held_by(api, "job-a/pod-a", duration=3600)
    lease = InstallLease(api, NS, settings(), interrupted=lambda: True, poll_seconds=0.01)
    with pytest.raises(InterruptedRun):
        lease.acquire()
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "job-a/pod-a"


def test_renewal_moves_renew_time_and_release_clears_the_holder() -> None:
    api = FakeKubeApi()
    lease = InstallLease(api, NS, settings(duration_seconds=5))
    lease.acquire()
    first = api.leases[(NS, "nvidia-aicr-install")].renew_time
    lease.settings = settings(duration_seconds=5)
    lease.start_renewing(lambda reason: None)
    time.sleep(2.0)  # one renewal at duration/3
    renewed = api.leases[(NS, "nvidia-aicr-install")].renew_time
    assert renewed is not None
    assert first is not None
    assert renewed > first
    lease.release()
    assert api.leases[(NS, "nvidia-aicr-install")].holder == ""


def test_a_lease_taken_over_by_another_run_is_reported_lost() -> None:
    api = FakeKubeApi()
    lease = InstallLease(api, NS, settings(duration_seconds=5))
    lease.acquire()
    held_by(api, "job-c/pod-c")
    lost: list[str] = []
    lease.start_renewing(lost.append)
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lost
    assert "taken over by job-c/pod-c" in lost[0]
    lease.release()
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "job-c/pod-c"  # never handed back by the loser


def test_a_validation_takes_a_lease_whose_holder_stopped_renewing_without_waiting_it_out() -> None:
    from datetime import timedelta

    from aicr_runner.run.report import utcnow

    api = FakeKubeApi()
    api.leases[(NS, "nvidia-aicr-install")] = LeaseRecord(
        "nvidia-aicr-install",
        holder="job-a/pod-a",
        duration_seconds=60,
        renew_time=utcnow() - timedelta(seconds=61),
        resource_version="8",
    )
    validation = InstallLease(api, NS, settings(pod_name="pod-v", job_name="revalidate"), poll_seconds=3600)
    assert validation.take_for_validation() is None, "a holder silent for its whole duration installs nothing"
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "revalidate/pod-v"


# -- a validation's hold ------------------------------------------------------------------------


def live(api: FakeKubeApi, holder: str, held_for: str) -> None:
    from aicr_runner.run.report import utcnow

    api.leases[(NS, "nvidia-aicr-install")] = LeaseRecord(
        "nvidia-aicr-install",
        holder=holder,
        duration_seconds=60,
        renew_time=utcnow(),
        annotations={HELD_FOR_ANNOTATION: held_for, RELEASES_ANNOTATION: json.dumps(["acme/acme-agent"])},
        resource_version="7",
    )


def test_a_validation_takes_a_free_lease_at_once_marked_as_a_validations() -> None:
    api = FakeKubeApi()
    held_by(api, "", 60, **{RELEASES_ANNOTATION: json.dumps(["acme/acme-agent"])})
    validation = InstallLease(api, NS, settings(pod_name="pod-v", job_name="revalidate"))
    assert validation.take_for_validation() is None
    stored = api.leases[(NS, "nvidia-aicr-install")]
    assert stored.holder == "revalidate/pod-v"
    assert stored.annotations[HELD_FOR_ANNOTATION] == "validation"
    # An install's announcement stays: the recovery proof of the next install.
    assert json.loads(stored.annotations[RELEASES_ANNOTATION]) == ["acme/acme-agent"]
    assert validation.still_held()
    validation.release()
    assert api.leases[(NS, "nvidia-aicr-install")].holder == ""


@pytest.mark.parametrize("held_for", ["install", "validation"])
def test_a_validation_never_waits_for_a_live_holder_and_writes_nothing(held_for: str) -> None:
    api = FakeKubeApi()
    live(api, "job-a/pod-a", held_for)
    validation = InstallLease(api, NS, settings(pod_name="pod-v", job_name="revalidate"), poll_seconds=3600)
    started = time.monotonic()
    assert validation.take_for_validation() == "job-a/pod-a"
    assert time.monotonic() - started < 5, "looked once, never slept a poll"
    assert api.lease_writes == []
    assert not validation.still_held()


def test_an_install_takes_a_validations_lease_over_at_once_and_the_validation_knows() -> None:
    api = FakeKubeApi()
    validation = InstallLease(api, NS, settings(pod_name="pod-v", job_name="revalidate"))
    assert validation.take_for_validation() is None
    lost: list[str] = []
    validation.start_renewing(lost.append)
    # The clock never moves: the install cannot be waiting out an expiry.
    install = InstallLease(api, NS, settings(), clock=Clock(), poll_seconds=3600)
    assert install.acquire() == 0
    stored = api.leases[(NS, "nvidia-aicr-install")]
    assert (stored.holder, stored.annotations[HELD_FOR_ANNOTATION]) == ("job-b/pod-b", "install")
    assert stored.transitions == 1
    assert install.still_held()
    assert not validation.still_held(), "the validation reads that it lost the Lease"
    validation.release()
    assert api.leases[(NS, "nvidia-aicr-install")].holder == "job-b/pod-b", "never handed back by the validation"
    install.release()


def test_an_install_waits_for_an_install_whatever_an_older_lease_said() -> None:
    api = FakeKubeApi()
    live(api, "job-a/pod-a", "install")
    install = InstallLease(api, NS, settings(wait_seconds=0.2), poll_seconds=0.01)
    with pytest.raises(LeaseError) as caught:
        install.acquire()
    assert "held by job-a/pod-a" in caught.value.message
