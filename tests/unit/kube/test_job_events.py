"""Events on the runner's own Job: what is recorded, the bound, and that failures never matter."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aicr_runner import logs
from aicr_runner.aicr.progress import ProgressPublisher
from aicr_runner.kube.events import (
    FAILED_COMPONENTS_ANNOTATION,
    MAX_EVENTS,
    MAX_PROGRESS_EVENTS,
    OUTCOME_ANNOTATION,
    PROGRESS_INTERVAL_SECONDS,
    JobEvents,
)
from aicr_runner.run.machine import TRANSITIONS, Machine, State, StepResult, final_exit
from aicr_runner.run.report import RunPhase, RunReport, StepRecord, StepStatus
from tests.support.fakes import FakeKubeApi

JOB = ("aicr", "nvidia-aicr-3f2a9c0d1e")
NOW = datetime(2026, 12, 3, 18, 0, 0, 123456, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.seconds = 1000.0

    def __call__(self) -> float:
        return self.seconds


def recorder(api: FakeKubeApi, clock: Clock | None = None) -> JobEvents:
    return JobEvents(api, namespace=JOB[0], job=JOB[1], pod=f"{JOB[1]}-x7k2p", now=lambda: NOW, clock=clock or Clock())


def ended(state: str, status: StepStatus, message: str) -> StepRecord:
    return StepRecord(state, status, started_at=NOW, ended_at=NOW, message=message)


def progress(done: int, total: int, failed: tuple[str, ...] = (), current: str = "") -> dict[str, object]:
    rows = [{"name": name, "status": "failed"} for name in failed]
    return {"done": done, "total": total, "installed": done - len(failed), "failed": len(failed), "current": current,
            "components": rows}  # fmt: skip


def test_a_step_that_ended_is_an_event_regarding_the_job_with_its_uid() -> None:
    api = FakeKubeApi(job_uids={JOB: "job-uid-1"})
    recorder(api).step_ended(ended("deploy", StepStatus.SUCCEEDED, "AICR install complete: 13/13 installed"))
    [(namespace, body)] = api.job_events
    assert namespace == "aicr"
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{JOB[1]}.{int(NOW.timestamp() * 1e9):x}", "namespace": "aicr"},
        "eventTime": "2026-12-03T18:00:00.123456Z",
        "reportingController": "aicr-runner",
        "reportingInstance": f"{JOB[1]}-x7k2p",
        "action": "Deploy",
        "reason": "DeploySucceeded",
        "type": "Normal",
        "note": "AICR install complete: 13/13 installed",
        "regarding": {"apiVersion": "batch/v1", "kind": "Job", "name": JOB[1], "namespace": "aicr", "uid": "job-uid-1"},
    }


@pytest.mark.parametrize(
    ("status", "kind", "reason"),
    [
        (StepStatus.WARNED, "Normal", "CaptureRecipeWarned"),
        (StepStatus.FAILED, "Warning", "CaptureRecipeFailed"),
        (StepStatus.INTERRUPTED, "Warning", "CaptureRecipeInterrupted"),
    ],
)
def test_a_failed_step_is_a_warning(status: StepStatus, kind: str, reason: str) -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    recorder(api).step_ended(ended("capture-recipe", status, "why"))
    assert [(b["type"], b["reason"]) for _, b in api.job_events] == [(kind, reason)]


def test_skipped_and_running_steps_record_nothing() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    events = recorder(api)
    events.step_ended(ended("publish", StepStatus.SKIPPED, "publish.enabled=false"))
    events.step_ended(StepRecord("deploy", StepStatus.RUNNING))
    assert api.job_events == []


def test_deploy_progress_is_recorded_at_most_once_a_minute() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    clock = Clock()
    events = recorder(api, clock)
    events.deploy_progress(progress(0, 13, current="cert-manager"))  # nothing ended yet
    events.deploy_progress(progress(1, 13, current="nfd"))
    clock.seconds += PROGRESS_INTERVAL_SECONDS - 1
    events.deploy_progress(progress(5, 13))
    clock.seconds += 1
    events.deploy_progress(progress(9, 13, failed=("nfd",), current="gpu-operator"))
    assert [b["note"] for _, b in api.job_events] == [
        "1/13 components installed; installing nfd",
        "8/13 components installed, 1 failed (nfd); installing gpu-operator",
    ]
    assert {b["reason"] for _, b in api.job_events} == {"DeployProgress"}


def test_a_run_of_50_components_and_every_step_stays_within_the_bound() -> None:
    """One component ends every second for 50 minutes, 13 steps end, the run ends."""
    api = FakeKubeApi(job_uids={JOB: "u"})
    clock = Clock()
    events = recorder(api, clock)
    for done in range(1, 3001):
        clock.seconds += 1
        events.deploy_progress(progress(done // 60, 50))
    for state in ("fetch", "pack", "recipe", "capture-recipe", "check-recipe", "bundle", "verify", "lease", "deploy"):
        events.step_ended(ended(state, StepStatus.SUCCEEDED, "ok"))
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    report.phase = RunPhase.SUCCEEDED
    events.run_ended(report, "Succeeded (exit 0): AICR Job complete")
    reasons = [b["reason"] for _, b in api.job_events]
    assert reasons.count("DeployProgress") == MAX_PROGRESS_EVENTS  # one a minute, then no more
    assert [r for r in reasons if r.endswith("Succeeded")][-2:] == ["DeploySucceeded", "RunSucceeded"]
    assert len(reasons) == MAX_PROGRESS_EVENTS + 9 + 1 <= MAX_EVENTS + 1
    assert reasons[-1] == "RunSucceeded"  # the outcome is recorded even past the cap


@pytest.mark.parametrize(
    ("phase", "kind", "reason"),
    [
        (RunPhase.SUCCEEDED, "Normal", "RunSucceeded"),
        (RunPhase.SUCCEEDED_WITH_FAILURES, "Warning", "RunSucceededWithFailures"),
        (RunPhase.SUCCEEDED_INCONCLUSIVE, "Warning", "RunSucceededInconclusive"),
        (RunPhase.FAILED, "Warning", "RunFailed"),
        (RunPhase.INTERRUPTED, "Warning", "RunInterrupted"),
    ],
)
def test_the_outcome_is_an_event_and_annotations_on_the_job(phase: RunPhase, kind: str, reason: str) -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    report.phase = phase
    report.failed_components = ["nfd", "aws-efa"] if phase is RunPhase.SUCCEEDED_WITH_FAILURES else []
    recorder(api).run_ended(report, f"{phase.value} (exit 0): done")
    [(_, body)] = api.job_events
    assert (body["type"], body["reason"], body["note"]) == (kind, reason, f"{phase.value} (exit 0): done")
    assert api.job_annotations[JOB] == {
        OUTCOME_ANNOTATION: phase.value,
        FAILED_COMPONENTS_ANNOTATION: "nfd,aws-efa" if report.failed_components else "",
    }


def test_notes_are_redacted_and_bounded() -> None:
    logs.register_secret("hunter2-secret-token")
    api = FakeKubeApi(job_uids={JOB: "u"})
    recorder(api).step_ended(ended("pack", StepStatus.FAILED, "token hunter2-secret-token refused " + "x" * 2000))
    note = api.job_events[0][1]["note"]
    assert "hunter2-secret-token" not in note
    assert len(note) == 1024
    assert note.endswith("...")


def test_a_refused_write_is_logged_and_after_two_failures_nothing_more_is_tried(
    log_events: list[dict[str, Any]],
) -> None:
    api = FakeKubeApi(job_uids={JOB: "u"}, job_event_error="HTTP 403 Forbidden")
    events = recorder(api)
    for state in ("fetch", "pack", "recipe"):
        events.step_ended(ended(state, StepStatus.SUCCEEDED, "ok"))
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    events.run_ended(report, "done")  # never raises
    job = f"{JOB[0]}/{JOB[1]}"
    assert [(e["event"], e["log_level"], e["doing"], e["job"], e.get("then")) for e in log_events] == [
        ("Job not updated", "warning", "recording an Event", job, None),
        ("Job not updated", "warning", "recording an Event", job, "no more Events this run"),
    ]
    assert all("HTTP 403 Forbidden" in e["reason"] for e in log_events)
    assert api.job_events == []
    assert api.job_annotations == {}


def test_a_job_that_cannot_be_read_records_nothing() -> None:
    api = FakeKubeApi()  # no such Job
    events = recorder(api)
    events.step_ended(ended("fetch", StepStatus.SUCCEEDED, "ok"))
    assert api.job_events == []


# -- the component gate and the phase -------------------------------------------------


def finished_report(failed: list[str]) -> RunReport:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    for record in report.steps:
        record.status = StepStatus.SUCCEEDED
    report.failed_components = failed
    return report


def test_failed_components_make_a_green_run_say_so_or_fail_it_with_the_gate() -> None:
    report = finished_report(["nfd"])
    code, message = final_exit(report, validate_gate=True, publish_gate=False)
    assert code == 0
    assert message.startswith("AICR Job complete, but components failed: nfd (--best-effort;")
    assert final_exit(report, validate_gate=True, publish_gate=False, component_gate=True) == (
        1,
        "Components FAILED (nfd) and deploy.failOnComponentFailure is set",
    )
    assert final_exit(finished_report([]), validate_gate=True, publish_gate=False, component_gate=True)[0] == 0


@pytest.mark.parametrize(
    ("failed", "gate", "code", "phase"),
    [
        (["nfd"], False, 0, RunPhase.SUCCEEDED_WITH_FAILURES),
        (["nfd"], True, 1, RunPhase.FAILED),
        ([], True, 0, RunPhase.SUCCEEDED),
    ],
)
def test_the_phase_of_a_run_whose_deploy_had_failed_components(
    failed: list[str], gate: bool, code: int, phase: RunPhase
) -> None:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})

    def deploy() -> StepResult:
        report.failed_components = failed
        return StepResult.warned("components failed") if failed else StepResult.ok()

    steps = {state: (deploy if state is State.DEPLOY else StepResult.ok) for state in TRANSITIONS}
    machine = Machine(steps, report, on_change=lambda r: None, interrupted=lambda: False)
    machine.run()
    assert machine.finish(validate_gate=True, publish_gate=False, component_gate=gate) == code
    assert report.phase is phase
    # Validation and the captures ran before the gate: nothing lost.
    assert report.step("validate").status is StepStatus.SUCCEEDED


# -- the progress publisher -------------------------------------------------------------


def test_the_publisher_writes_at_each_component_end_and_coalesces_what_comes_while_it_writes() -> None:
    writing = threading.Event()
    release = threading.Event()
    writes: list[int] = []

    def publish() -> None:
        writes.append(len(writes))
        writing.set()
        assert release.wait(10)

    with ProgressPublisher(publish, interval=3600, min_gap=0) as publisher:
        publisher.changed(False)  # a start: not due for an hour
        publisher.changed(True)  # a component ended: due now
        assert writing.wait(10)
        for _ in range(100):  # ends while the first write is in flight: one more write
            publisher.changed(True)
        writing.clear()
        release.set()
        assert writing.wait(10)
    assert len(writes) == 2
    assert publisher.writes == 2


def test_the_publisher_spaces_writes_by_the_gap_after_an_end_and_the_interval_otherwise() -> None:
    done = threading.Event()
    clock = Clock()
    calls: list[float] = []

    def publish() -> None:
        calls.append(clock())
        done.set()

    with ProgressPublisher(publish, interval=5, min_gap=1, clock=clock) as publisher:
        publisher.changed(True)
        assert done.wait(10)
        done.clear()
        publisher.changed(True)  # an end 0 s after the last write: waits for the gap
        clock.seconds += 1
        assert done.wait(10)  # the timed wait re-reads the clock
        done.clear()
        publisher.changed(False)  # a start: waits for the interval
        clock.seconds += 4
        assert not done.wait(0.3)
        clock.seconds += 1
        assert done.wait(10)
    assert calls == [1000.0, 1001.0, 1006.0]


def test_a_publish_that_raises_is_logged_and_the_step_goes_on(log_events: list[dict[str, Any]]) -> None:
    done = threading.Event()

    def publish() -> None:
        done.set()
        raise RuntimeError("API gone")

    with ProgressPublisher(publish) as publisher:
        publisher.changed(True)
        assert done.wait(10)
    assert log_events == [
        {"event": "progress not published", "reason": "RuntimeError: API gone", "log_level": "warning"}
    ]


def test_after_close_nothing_is_published() -> None:
    calls: list[int] = []
    publisher = ProgressPublisher(lambda: calls.append(1))
    with publisher:
        pass
    publisher.changed(True)
    assert calls == []


def test_events_never_see_a_clock_of_their_own_when_one_is_given() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    later = NOW + timedelta(hours=1)
    JobEvents(api, namespace=JOB[0], job=JOB[1], pod="", now=lambda: later).step_ended(
        ended("fetch", StepStatus.SUCCEEDED, "ok")
    )
    body = api.job_events[0][1]
    assert body["eventTime"] == "2026-12-03T19:00:00.123456Z"
    assert body["reportingInstance"] == JOB[1]  # no pod name: the Job's


def test_a_regression_is_a_warning_and_a_recovery_normal_each_naming_the_checks() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    events = recorder(api, Clock())
    events.verdict_changed([], [], "t0")
    assert api.job_events == [], "no change, no Event"
    events.verdict_changed(["operator-health"], [], "2026-12-05T10:00:00Z")
    events.verdict_changed([], ["operator-health"], "2026-12-05T11:00:00Z")
    said = [(b["type"], b["reason"], b["note"]) for _, b in api.job_events]
    assert said == [
        (
            "Warning",
            "ValidationRegressed",
            "checks that passed on 2026-12-05T10:00:00Z now fail: operator-health",
        ),
        ("Normal", "ValidationRecovered", "checks that failed on 2026-12-05T11:00:00Z now pass: operator-health"),
    ]


def test_a_regression_is_also_recorded_on_the_cronjob_that_started_the_job() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"}, job_owners={JOB: ("t-install-revalidate", "cron-uid")})
    events = recorder(api, Clock())
    events.verdict_changed(["operator-health"], [], "t0")
    regarding = [(b["regarding"]["kind"], b["regarding"]["name"], b["reason"]) for _, b in api.job_events]
    assert regarding == [
        ("Job", JOB[1], "ValidationRegressed"),
        ("CronJob", "t-install-revalidate", "ValidationRegressed"),
    ]
    assert api.job_events[1][1]["regarding"]["uid"] == "cron-uid"
    assert api.job_events[1][1]["note"] == "checks that passed on t0 now fail: operator-health"


def test_the_owning_cronjob_is_the_controller_owner_reference_of_kind_cronjob() -> None:
    from aicr_runner.kube.api import cronjob_owner

    refs = [
        {"kind": "CronJob", "name": "other", "uid": "1", "controller": False},
        {"kind": "CronJob", "name": "t-install-revalidate", "uid": "2", "controller": True},
    ]
    assert cronjob_owner({"ownerReferences": refs}) == ("t-install-revalidate", "2")
    assert cronjob_owner({"ownerReferences": refs[:1]}) is None
    assert cronjob_owner({}) is None


def test_a_changed_cluster_is_one_normal_cluster_changed_event_naming_each_change_even_past_the_cap() -> None:
    api = FakeKubeApi(job_uids={JOB: "u"})
    events = recorder(api, Clock())
    events.cluster_changed([], "t0")
    assert api.job_events == [], "no change, no Event"
    for _ in range(MAX_EVENTS):
        events.step_ended(ended("fetch", StepStatus.SUCCEEDED, "ok"))
    events.cluster_changed(["GPU driver: 560.35.03 -> 570.86.15", "node count: 3 -> 4"], "2026-12-05T10:00:00Z")
    body = api.job_events[-1][1]
    assert (body["type"], body["reason"], body["action"], body["regarding"]["kind"]) == (
        "Normal",
        "ClusterChanged",
        "Snapshot",
        "Job",
    )
    assert body["note"] == "since 2026-12-05T10:00:00Z: GPU driver: 560.35.03 -> 570.86.15; node count: 3 -> 4"


def test_an_event_note_is_one_printable_bounded_line() -> None:
    """Issue 35 finding 12: escape sequences and line breaks from check names never reach an Event."""
    from aicr_runner.kube.events import NOTE_LIMIT, job_event_body

    note = "check evil\x1b]0;pwned\x07\x1b[2J\r\nforged \udc80 line " + "x" * 5000
    body = job_event_body(
        namespace="ns", job="j", job_uid="u", pod="p", kind="Warning", reason="ValidateFailed", action="Validate",
        note=note, now=datetime(2026, 12, 6, tzinfo=UTC),
    )  # fmt: skip
    assert len(body["note"]) <= NOTE_LIMIT
    assert body["note"].startswith("check evil\ufffd]0;pwned\ufffd\ufffd[2J forged \ufffd line x")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in body["note"])
