"""The transition table and the driver: order, skips, gates, interruption."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from aicr_runner.run.invocation import Mode
from aicr_runner.run.machine import (
    INCONCLUSIVE,
    PLAN_TRANSITIONS,
    ROUTES,
    TRANSITIONS,
    VALIDATE_TRANSITIONS,
    Machine,
    State,
    StepResult,
    final_exit,
)
from aicr_runner.run.report import RunPhase, RunReport, StepStatus

#: A whole run's steps (the recorded recipe is read only by a validation-only run).
ALL: list[State] = [s for s in State if s not in (State.DONE, State.RECORDED_RECIPE, State.VERDICT_REPORT)]
#: The states a whole run goes through: its steps, then the verdict report (not a step of the report).
ROUTE: list[State] = [*ALL, State.VERDICT_REPORT]


def build(results: dict[State, StepResult], *, interrupt_after: State | None = None) -> tuple[Machine, list[str]]:
    calls: list[str] = []
    flag = {"stop": False}

    def make(state: State) -> Callable[[], StepResult]:
        def step() -> StepResult:
            calls.append(state.value)
            if state is interrupt_after:
                flag["stop"] = True
            return results.get(state, StepResult.ok())

        return step

    report = Machine.new_report(runner_version="t", aicr_version="v1.2.0", criteria={"accelerator": "h100"})
    machine = Machine({s: make(s) for s in ROUTE}, report, on_change=lambda r: None, interrupted=lambda: flag["stop"])
    return machine, calls


def test_table_covers_every_state_and_reaches_done() -> None:
    assert set(TRANSITIONS) == set(ROUTE)
    state, seen = State.FETCH, []
    while state is not State.DONE:
        seen.append(state)
        state = TRANSITIONS[state][0]
    assert seen == ROUTE, "the happy path visits every step once, in the documented order"


def test_a_plan_shows_the_steps_of_a_run_in_its_order_and_writes_no_verdict_report() -> None:
    assert ROUTES == {Mode.RUN: TRANSITIONS, Mode.PLAN: PLAN_TRANSITIONS, Mode.VALIDATE: VALIDATE_TRANSITIONS}
    state, seen = State.FETCH, []
    while state is not State.DONE:
        seen.append(state)
        state = PLAN_TRANSITIONS[state][0]
    assert seen == ALL == list(PLAN_TRANSITIONS)
    plan = Machine.new_report(PLAN_TRANSITIONS, runner_version="t", aicr_version="v", criteria={})
    run = Machine.new_report(TRANSITIONS, runner_version="t", aicr_version="v", criteria={})
    assert [r.state for r in plan.steps] == [r.state for r in run.steps] == [s.value for s in ALL]
    assert State.VERDICT_REPORT.value not in [r.state for r in run.steps], "not a step of the run report"


def test_validation_only_never_reaches_recipe_bundle_verify_or_deploy() -> None:
    assert set(VALIDATE_TRANSITIONS) | set(TRANSITIONS) == {s for s in State if s is not State.DONE}
    never = {State.RECIPE, State.CAPTURE_RECIPE, State.CHECK_RECIPE, State.BUNDLE, State.VERIFY, State.DEPLOY}
    assert not never & set(VALIDATE_TRANSITIONS)
    calls: list[str] = []

    def make(state: State) -> Callable[[], StepResult]:
        return lambda: calls.append(state.value) or StepResult.ok()  # type: ignore[func-returns-value]

    report = Machine.new_report(VALIDATE_TRANSITIONS, runner_version="t", aicr_version="v", criteria={})
    steps = {s: make(s) for s in VALIDATE_TRANSITIONS}
    machine = Machine(
        steps, report, on_change=lambda r: None, interrupted=lambda: False, transitions=VALIDATE_TRANSITIONS
    )
    machine.run()
    assert calls == [s.value for s in VALIDATE_TRANSITIONS]
    lease_held = {**steps, State.LEASE: lambda: StepResult.failed(33, "install in progress, not validated")}
    report = Machine.new_report(VALIDATE_TRANSITIONS, runner_version="t", aicr_version="v", criteria={})
    machine = Machine(
        lease_held, report, on_change=lambda r: None, interrupted=lambda: False, transitions=VALIDATE_TRANSITIONS
    )
    calls.clear()
    machine.run()
    assert State.VALIDATE.value not in calls, "a cluster being installed is never validated"
    assert machine.finish(validate_gate=False, publish_gate=False) == 33
    assert machine.report.message == "lease failed: install in progress, not validated"


def test_happy_path_runs_every_step_and_exits_zero() -> None:
    machine, calls = build({})
    machine.run()
    assert calls == [s.value for s in ROUTE]
    assert machine.finish(validate_gate=True, publish_gate=True) == 0
    assert machine.report.phase is RunPhase.SUCCEEDED
    assert machine.report.message == "AICR Job complete"
    assert all(r.started_at and r.ended_at for r in machine.report.steps)


@pytest.mark.parametrize(
    "failing", [State.FETCH, State.PACK, State.RECIPE, State.CHECK_RECIPE, State.BUNDLE, State.VERIFY, State.DEPLOY]
)
def test_a_failure_before_validation_ends_the_run_with_its_code(failing: State) -> None:
    machine, calls = build({failing: StepResult.failed(42, "boom")})
    machine.run()
    # A failed install is still reported (the verdict report's state); nothing else after it.
    ended = [failing.value, "verdict-report"] if failing is State.DEPLOY else [failing.value]
    assert calls[-len(ended) :] == ended
    code = machine.finish(validate_gate=False, publish_gate=False)
    assert code == 42
    assert machine.report.message == f"{failing.value} failed: boom"
    later = ALL[ALL.index(failing) + 1 :]
    assert all(machine.report.step(s.value).status is StepStatus.SKIPPED for s in later)


def test_recipe_capture_failure_is_advisory() -> None:
    machine, calls = build({State.CAPTURE_RECIPE: StepResult.warned("403")})
    machine.run()
    assert calls == [s.value for s in ROUTE]
    assert machine.finish(validate_gate=True, publish_gate=True) == 0
    assert machine.report.warnings == ["capture-recipe: 403"]


def test_verdict_and_evidence_are_captured_before_the_validate_gate() -> None:
    machine, calls = build({State.VALIDATE: StepResult.failed(8, "checks failed")})
    machine.run()
    assert calls[calls.index("validate") :] == [
        "validate",
        "capture-verdict",
        "publish",
        "capture-evidence",
        "verdict-report",
    ]
    assert machine.finish(validate_gate=True, publish_gate=True) == 8
    assert machine.report.message.startswith("Validation FAILED (exit 8)")


def test_validate_failure_without_fail_on_error_exits_0_but_is_never_plain_succeeded() -> None:
    machine, _ = build({State.VALIDATE: StepResult.failed(8, "checks failed: operator-health", "validation-failed")})
    machine.run()
    assert machine.finish(validate_gate=False, publish_gate=True) == 0, "the bash chart's gate: exit 0"
    assert machine.report.phase is RunPhase.SUCCEEDED_WITH_FAILURES, "failed checks are never plain green"
    assert machine.report.message == (
        "AICR Job complete, but validation FAILED (exit 8): checks failed: operator-health "
        "(validate.failOnError=true fails the Job instead)"
    )


def test_failed_components_and_failed_checks_are_both_said() -> None:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})

    def deploy() -> StepResult:
        report.failed_components = ["nfd"]
        return StepResult.warned("components failed")

    def step(state: State) -> Callable[[], StepResult]:
        if state is State.DEPLOY:
            return deploy
        if state is State.VALIDATE:
            return lambda: StepResult.failed(8, "checks failed: operator-health", "validation-failed")
        return StepResult.ok

    machine = Machine({s: step(s) for s in ROUTE}, report, on_change=lambda r: None, interrupted=lambda: False)
    machine.run()
    assert machine.finish(validate_gate=False, publish_gate=False) == 0
    assert report.phase is RunPhase.SUCCEEDED_WITH_FAILURES
    assert report.message.startswith("AICR Job complete, but components failed: nfd (--best-effort;")
    assert report.message.endswith(
        "; and validation FAILED (exit 8): checks failed: operator-health "
        "(validate.failOnError=true fails the Job instead)"
    )


NO_CHECK = "validation inconclusive: no check ran: the recipe lists no check for phase deployment (CTRF tests: 0)"


def test_an_inconclusive_validation_without_fail_on_error_exits_0_but_is_never_plain_succeeded() -> None:
    warned = StepResult.warned(NO_CHECK, classification=INCONCLUSIVE)
    machine, _ = build({State.VALIDATE: warned})
    machine.run()
    assert machine.finish(validate_gate=False, publish_gate=True) == 0
    assert machine.report.phase is RunPhase.SUCCEEDED_INCONCLUSIVE
    assert machine.report.message == f"AICR Job complete, but {NO_CHECK}"
    assert machine.report.summary_text().startswith("phase: SucceededInconclusive\nexitCode: 0\n")


def test_an_inconclusive_validation_under_fail_on_error_fails_with_exit_32() -> None:
    failed = StepResult.failed(32, f"{NO_CHECK} (validate.failOnError)", classification=INCONCLUSIVE)
    machine, calls = build({State.VALIDATE: failed})
    machine.run()
    assert "capture-verdict" in calls, "the report is still captured"
    assert machine.finish(validate_gate=True, publish_gate=True) == 32
    assert machine.report.phase is RunPhase.FAILED
    assert machine.report.message == f"Validation INCONCLUSIVE (exit 32): {NO_CHECK} (validate.failOnError)"


def test_failed_components_and_an_inconclusive_validation_are_both_said() -> None:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})

    def deploy() -> StepResult:
        report.failed_components = ["nfd"]
        return StepResult.warned("components failed")

    def step(state: State) -> Callable[[], StepResult]:
        if state is State.DEPLOY:
            return deploy
        if state is State.VALIDATE:
            return lambda: StepResult.warned(NO_CHECK, classification=INCONCLUSIVE)
        return StepResult.ok

    machine = Machine({s: step(s) for s in ROUTE}, report, on_change=lambda r: None, interrupted=lambda: False)
    machine.run()
    assert machine.finish(validate_gate=False, publish_gate=False) == 0
    assert report.phase is RunPhase.SUCCEEDED_WITH_FAILURES, "failed components weigh more"
    assert report.message.startswith("AICR Job complete, but components failed: nfd (--best-effort;")
    assert report.message.endswith(f"fails the Job instead); and {NO_CHECK}")


def test_a_warned_validation_that_ran_checks_keeps_the_run_succeeded() -> None:
    machine, _ = build({State.VALIDATE: StepResult.warned("1 of 1 checks passed; aicr exited 8", "validation-passed")})
    machine.run()
    assert machine.finish(validate_gate=True, publish_gate=True) == 0
    assert machine.report.phase is RunPhase.SUCCEEDED


def test_gates_apply_in_the_anchor_order() -> None:
    machine, _ = build({State.VALIDATE: StepResult.failed(8, "v"), State.PUBLISH: StepResult.failed(6, "p")})
    machine.run()
    assert machine.finish(validate_gate=True, publish_gate=True) == 8
    machine, _ = build({State.VALIDATE: StepResult.failed(8, "v"), State.PUBLISH: StepResult.failed(6, "p")})
    machine.run()
    assert machine.finish(validate_gate=False, publish_gate=True) == 6
    assert machine.report.message.startswith("Evidence publish FAILED (exit 6)")


def test_a_failed_verdict_capture_still_captures_evidence_then_fails() -> None:
    machine, calls = build({State.CAPTURE_VERDICT: StepResult.failed(26, "403")})
    machine.run()
    assert "capture-evidence" in calls
    assert machine.finish(validate_gate=False, publish_gate=False) == 26


def test_interruption_stops_work_but_still_captures() -> None:
    machine, calls = build({}, interrupt_after=State.VALIDATE)
    machine.run()
    assert "publish" not in calls, "no new work after SIGTERM"
    assert calls[-3:] == ["capture-verdict", "capture-evidence", "verdict-report"], "what exists is still stored"
    assert machine.report.step("publish").status is StepStatus.SKIPPED
    assert "interrupted" in machine.report.step("publish").message
    code = machine.finish(validate_gate=False, publish_gate=False)
    assert code == 143, "a run stopped between steps did not finish: never green"
    assert machine.report.phase is RunPhase.INTERRUPTED
    assert machine.report.message.startswith("interrupted before capture-verdict")


def test_a_shutdown_after_the_last_capture_still_writes_the_verdict_report_and_ends_as_it_would() -> None:
    machine, calls = build({}, interrupt_after=State.CAPTURE_EVIDENCE)
    machine.run()
    assert calls[-2:] == ["capture-evidence", "verdict-report"]
    assert machine.finish(validate_gate=True, publish_gate=True) == 0
    assert machine.report.phase is RunPhase.SUCCEEDED, "every step of the run finished"


def test_an_interrupted_step_gives_143_and_phase_interrupted() -> None:
    result = StepResult(StepStatus.INTERRUPTED, 143, "SIGTERM during deploy.sh")
    machine, calls = build({State.DEPLOY: result})
    machine.run()
    assert "validate" not in calls
    assert calls[-3:] == ["capture-verdict", "capture-evidence", "verdict-report"], "the captures still run"
    assert machine.finish(validate_gate=True, publish_gate=True) == 143
    assert machine.report.phase is RunPhase.INTERRUPTED
    assert machine.report.step("deploy").status is StepStatus.INTERRUPTED


def test_on_change_sees_each_step_start_and_end() -> None:
    seen: list[tuple[str, str]] = []

    def record(report: RunReport) -> None:
        running = [r.state for r in report.steps if r.status is StepStatus.RUNNING]
        seen.append(("running", running[0]) if running else ("idle", ""))

    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    machine = Machine(dict.fromkeys(ROUTE, StepResult.ok), report, on_change=record, interrupted=lambda: False)
    machine.run()
    assert seen[0] == ("running", "fetch")
    assert seen.count(("idle", "")) == len(ALL)


def test_missing_step_function_is_refused() -> None:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    with pytest.raises(ValueError, match="no step function"):
        Machine({State.FETCH: StepResult.ok}, report, on_change=lambda r: None, interrupted=lambda: False)


def test_final_exit_prefers_the_terminal_step_over_gates() -> None:
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    report.step("deploy").status = StepStatus.FAILED
    report.step("deploy").exit_code = 1
    report.step("deploy").message = "x"
    report.step("validate").status = StepStatus.FAILED
    report.step("validate").exit_code = 8
    assert final_exit(report, validate_gate=True, publish_gate=True) == (1, "deploy failed: x")


def test_each_step_and_the_run_end_carry_the_time_of_the_runs_clock() -> None:
    """The machine's own timestamps come from the clock it is given (the run's
    externals), not the wall: a clock that ticks a minute per reading."""
    ticks = iter(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n) for n in range(1000))
    report = Machine.new_report(runner_version="t", aicr_version="v1.2.0", criteria={"accelerator": "h100"})

    def ok() -> StepResult:
        return StepResult.ok()

    steps: dict[State, Callable[[], StepResult]] = dict.fromkeys(ROUTE, ok)
    machine = Machine(steps, report, on_change=lambda r: None, interrupted=lambda: False, clock=lambda: next(ticks))
    machine.run()
    machine.finish(validate_gate=True, publish_gate=True)
    first = report.steps[0]
    assert (first.started_at, first.ended_at) == (
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
    )
    assert report.ended_at == datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=2 * len(report.steps))
