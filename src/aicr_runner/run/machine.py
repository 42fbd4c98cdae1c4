"""The run as a state machine: a plain enum, one transition table per mode, and a driver.

Each state's code is the step registered for it in ``steps.table`` (``@step(State.X)``;
a mode's own variant with ``@step(State.X, Mode.PLAN)``). A step returns a ``StepResult``;
the mode's table (``ROUTES``) says where the run goes next when the step went well
(succeeded, skipped, warned) and when it failed. Validation and publish failures do not stop
the run: their gates apply last, after the verdict and the evidence are captured
(in the bash chart's order, docs/migration.md), so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from aicr_runner.run.invocation import Mode
from aicr_runner.run.report import (
    RunPhase,
    RunReport,
    StepRecord,
    StepStatus,
    run_message,
    step_message,
    utcnow,
    warning_line,
)

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "INCONCLUSIVE",
    "PLAN_TRANSITIONS",
    "ROUTES",
    "TRANSITIONS",
    "UNREADABLE",
    "UNRECORDED",
    "VALIDATE_TRANSITIONS",
    "Machine",
    "State",
    "StepResult",
    "final_exit",
    "inconclusive",
    "unreadable",
]


class State(StrEnum):
    FETCH = "fetch"
    PACK = "pack"
    RECIPE = "recipe"
    CAPTURE_RECIPE = "capture-recipe"
    CHECK_RECIPE = "check-recipe"
    BUNDLE = "bundle"
    VERIFY = "verify"
    UPGRADE_CHECK = "upgrade-check"
    LEASE = "lease"
    RECORDED_RECIPE = "recorded-recipe"
    SNAPSHOT = "snapshot"
    DEPLOY = "deploy"
    VALIDATE = "validate"
    CAPTURE_VERDICT = "capture-verdict"
    PUBLISH = "publish"
    CAPTURE_EVIDENCE = "capture-evidence"
    VERDICT_REPORT = "verdict-report"
    DONE = "done"


S = State
#: state              -> (next when it went well, next when it failed)
TRANSITIONS: dict[State, tuple[State, State]] = {
    S.FETCH:            (S.PACK,             S.DONE),
    S.PACK:             (S.RECIPE,           S.DONE),
    S.RECIPE:           (S.CAPTURE_RECIPE,   S.DONE),
    S.CAPTURE_RECIPE:   (S.CHECK_RECIPE,     S.CHECK_RECIPE),      # advisory: nothing deployed yet
    S.CHECK_RECIPE:     (S.BUNDLE,           S.DONE),              # expectations, before bundle
    S.BUNDLE:           (S.VERIFY,           S.DONE),
    S.VERIFY:           (S.UPGRADE_CHECK,    S.DONE),
    S.UPGRADE_CHECK:    (S.LEASE,            S.VERDICT_REPORT),    # a crossed aicr pin judged first
    S.LEASE:            (S.SNAPSHOT,         S.DONE),              # one installer at a time
    S.SNAPSHOT:         (S.DEPLOY,           S.DEPLOY),            # advisory: never blocks an install
    S.DEPLOY:           (S.VALIDATE,         S.VERDICT_REPORT),    # a failed install is reported
    S.VALIDATE:         (S.CAPTURE_VERDICT,  S.CAPTURE_VERDICT),   # gated last
    S.CAPTURE_VERDICT:  (S.PUBLISH,          S.PUBLISH),           # evidence still captured
    S.PUBLISH:          (S.CAPTURE_EVIDENCE, S.CAPTURE_EVIDENCE),  # gated last
    S.CAPTURE_EVIDENCE: (S.VERDICT_REPORT,   S.VERDICT_REPORT),
    S.VERDICT_REPORT:   (S.DONE,             S.DONE),              # advisory: after the captures
}  # fmt: skip

#: ``aicr-runner plan``: the main job, locally, up to a verified bundle; the states a
#: Job would go on to show what it would do (their plan steps skip), and no verdict
#: report (no cluster to write it to).
PLAN_TRANSITIONS: dict[State, tuple[State, State]] = {
    S.FETCH:            (S.PACK,             S.DONE),
    S.PACK:             (S.RECIPE,           S.DONE),
    S.RECIPE:           (S.CAPTURE_RECIPE,   S.DONE),
    S.CAPTURE_RECIPE:   (S.CHECK_RECIPE,     S.CHECK_RECIPE),
    S.CHECK_RECIPE:     (S.BUNDLE,           S.DONE),
    S.BUNDLE:           (S.VERIFY,           S.DONE),
    S.VERIFY:           (S.UPGRADE_CHECK,    S.DONE),
    S.UPGRADE_CHECK:    (S.LEASE,            S.DONE),              # --upgrade-from: judged offline
    S.LEASE:            (S.SNAPSHOT,         S.DONE),              # skipped: nothing is deployed
    S.SNAPSHOT:         (S.DEPLOY,           S.DEPLOY),            # skipped: what a Job would start
    S.DEPLOY:           (S.VALIDATE,         S.DONE),              # skipped: nothing is deployed
    S.VALIDATE:         (S.CAPTURE_VERDICT,  S.CAPTURE_VERDICT),   # skipped: no validation
    S.CAPTURE_VERDICT:  (S.PUBLISH,          S.PUBLISH),
    S.PUBLISH:          (S.CAPTURE_EVIDENCE, S.CAPTURE_EVIDENCE),
    S.CAPTURE_EVIDENCE: (S.DONE,             S.DONE),
}  # fmt: skip

#: ``aicr-runner validate``: validation only, with the same step code as a run. No
#: recipe resolution, bundle, verify or deploy: the recipe is the one recorded at
#: install; the Lease is taken without waiting (an install in progress ends the run at once,
#: and an install that starts meanwhile takes it over: the verdict is then discarded).
VALIDATE_TRANSITIONS: dict[State, tuple[State, State]] = {
    S.FETCH:            (S.PACK,             S.DONE),
    S.PACK:             (S.LEASE,            S.DONE),
    S.LEASE:            (S.RECORDED_RECIPE,  S.DONE),              # never a half-installed cluster
    S.RECORDED_RECIPE:  (S.SNAPSHOT,         S.DONE),
    S.SNAPSHOT:         (S.VALIDATE,         S.VALIDATE),          # advisory: validate then takes its own
    S.VALIDATE:         (S.CAPTURE_VERDICT,  S.CAPTURE_VERDICT),   # gated last
    S.CAPTURE_VERDICT:  (S.PUBLISH,          S.PUBLISH),
    S.PUBLISH:          (S.CAPTURE_EVIDENCE, S.CAPTURE_EVIDENCE),
    S.CAPTURE_EVIDENCE: (S.VERDICT_REPORT,   S.VERDICT_REPORT),
    S.VERDICT_REPORT:   (S.DONE,             S.DONE),
}  # fmt: skip

#: Each mode's table.
ROUTES: dict[Mode, dict[State, tuple[State, State]]] = {
    Mode.RUN: TRANSITIONS,
    Mode.PLAN: PLAN_TRANSITIONS,
    Mode.VALIDATE: VALIDATE_TRANSITIONS,
}

#: Failures in these states do not end the run; ``final_exit`` weighs them last.
GATED_STATES = frozenset({S.CAPTURE_RECIPE, S.SNAPSHOT, S.VALIDATE, S.CAPTURE_VERDICT, S.PUBLISH, S.CAPTURE_EVIDENCE})
#: Failures where the step is not what went wrong (the fetch step refuses settings
#: once it knows the aicr): the run's message names the cause, by classification.
FAILURE_HEADINGS = {
    "aicr-version-unsupported": "settings refused (the aicr that runs lacks what they need)",
    "criteria-refused": "criteria refused",
    "upgrade-blocked": "upgrade check",
    "upgrade-stopped": "upgrade check",
    "upgrade-not-assessed": "upgrade check",
}
#: The validate step's classification when no check ran (zero tests, or only
#: skipped/pending): failed under validate.failOnError, else warned, and then the
#: run's phase is ``SucceededInconclusive``, never plain ``Succeeded``.
INCONCLUSIVE = "validation-inconclusive"
#: The validate step's classification when aicr's CTRF report cannot be believed (not
#: CTRF, or contradicting itself): failed under validate.failOnError (exit 30), else
#: warned, and then the run's phase is ``SucceededWithFailures``, never ``Succeeded``.
UNREADABLE = "validation-unreadable"
_HEADINGS = {INCONCLUSIVE: "INCONCLUSIVE", UNREADABLE: "UNREADABLE"}
#: Run even after an interruption: they only store results that already exist.
CAPTURE_STATES = (S.CAPTURE_RECIPE, S.CAPTURE_VERDICT, S.CAPTURE_EVIDENCE, S.VERDICT_REPORT)
#: Not a step of the run report: the verdict report is advisory (a failure is one
#: warning line, the outcome unchanged) and writes what the recorded steps found.
UNRECORDED = frozenset({S.VERDICT_REPORT})


@dataclass(frozen=True)
class StepResult:
    status: StepStatus
    exit_code: int = 0
    reason: str = ""
    classification: str = ""

    def __post_init__(self) -> None:
        # Plain ints in reports and logs, never "<ExitCode.X: n>".
        object.__setattr__(self, "exit_code", int(self.exit_code))

    @classmethod
    def ok(cls, reason: str = "", classification: str = "") -> StepResult:
        return cls(StepStatus.SUCCEEDED, 0, reason, classification)

    @classmethod
    def skipped(cls, reason: str) -> StepResult:
        return cls(StepStatus.SKIPPED, 0, reason)

    @classmethod
    def warned(cls, reason: str, classification: str = "", exit_code: int = 0) -> StepResult:
        return cls(StepStatus.WARNED, exit_code, reason, classification)

    @classmethod
    def failed(cls, exit_code: int, reason: str, classification: str = "") -> StepResult:
        return cls(StepStatus.FAILED, exit_code, reason, classification)

    @property
    def went_well(self) -> bool:
        return self.status in (StepStatus.SUCCEEDED, StepStatus.SKIPPED, StepStatus.WARNED)


StepFunction = Callable[[], StepResult]


def final_exit(  # noqa: PLR0911 - one return per gate, in order
    report: RunReport,
    *,
    validate_gate: bool,
    publish_gate: bool,
    interrupted_before: State | None = None,
    success: str = "AICR Job complete",
    component_gate: bool = False,
) -> tuple[int, str]:
    """The Job's exit code and message, applying the gates in the anchor's order.

    1. a step that ended the run; 2. a failed verdict or evidence capture;
    3. validation failed and validate.failOnError; 4. publish failed and
    publish.failOnError; 5. components failed (--best-effort) and
    deploy.failOnComponentFailure (exit 1, deploy.sh's own code for a failed
    component); otherwise success, which names failed components. A run
    stopped between two steps (``interrupted_before``) did not finish, whatever
    its steps say: 143.
    """
    records = {State(r.state): r for r in report.steps}
    for record in report.steps:
        state = State(record.state)
        if record.status is StepStatus.INTERRUPTED:
            return record.exit_code or 143, f"interrupted during {state}: {record.message}"
        if record.status is StepStatus.FAILED and state not in GATED_STATES:
            heading = FAILURE_HEADINGS.get(record.classification, f"{state} failed")
            return record.exit_code or 1, f"{heading}: {record.message}"
    if interrupted_before is not None:
        return 143, f"interrupted before {interrupted_before}: a shutdown was requested; the steps before it finished"
    for state in (S.CAPTURE_VERDICT, S.CAPTURE_EVIDENCE):
        if records[state].status is StepStatus.FAILED:
            return records[state].exit_code or 1, f"{state} failed: {records[state].message}"
    validate = records[S.VALIDATE]
    if validate_gate and validate.status is StepStatus.FAILED:
        heading = _HEADINGS.get(validate.classification, "FAILED")
        return validate.exit_code or 1, f"Validation {heading} (exit {validate.exit_code}): {validate.message}"
    publish = records[S.PUBLISH]
    if publish_gate and publish.status is StepStatus.FAILED:
        return publish.exit_code or 1, f"Evidence publish FAILED (exit {publish.exit_code}): {publish.message}"
    # Failed checks, no check ran, no readable report: said on a green exit, never a plain success.
    caveats = [c for c in (_failed_checks(report), validate.message if _held(report) else "") if c]
    if report.failed_components:
        failed = ", ".join(report.failed_components)
        if component_gate:
            return 1, f"Components FAILED ({failed}) and deploy.failOnComponentFailure is set"
        caveats.insert(
            0,
            f"components failed: {failed} (--best-effort; deploy.failOnComponentFailure=true fails the Job instead)",
        )
    return 0, f"{success}, but {'; and '.join(caveats)}" if caveats else success


def _failed_checks(report: RunReport) -> str:
    """What a validation that failed says on a run that exits 0 (no validate.failOnError)."""
    if not validation_failed(report):
        return ""
    validate = report.step(S.VALIDATE.value)
    return (
        f"validation FAILED (exit {validate.exit_code}): {validate.message} "
        "(validate.failOnError=true fails the Job instead)"
    )


def validation_failed(report: RunReport) -> bool:
    """Validation ran and failed, and did not fail the run (no validate.failOnError)."""
    validate = report.step(S.VALIDATE.value)
    return validate.status is StepStatus.FAILED and validate.classification != INCONCLUSIVE


def _held(report: RunReport) -> bool:
    return inconclusive(report) or unreadable(report)


def unreadable(report: RunReport) -> bool:
    """aicr's CTRF report could not be believed and did not fail the run (no validate.failOnError)."""
    validate = report.step(S.VALIDATE.value)
    return validate.status is StepStatus.WARNED and validate.classification == UNREADABLE


def inconclusive(report: RunReport) -> bool:
    """Validation ran no check and did not fail the run (no validate.failOnError)."""
    validate = report.step(S.VALIDATE.value)
    return validate.status is StepStatus.WARNED and validate.classification == INCONCLUSIVE


class Machine:
    """Drives the steps through a mode's table (``TRANSITIONS`` by default), recording each in the report.

    ``on_change`` is called when a step starts and when it ends (the status
    ConfigMap is written there). ``interrupted`` is polled between steps.
    """

    def __init__(
        self,
        steps: dict[State, StepFunction],
        report: RunReport,
        *,
        on_change: Callable[[RunReport], None],
        interrupted: Callable[[], bool],
        transitions: dict[State, tuple[State, State]] = TRANSITIONS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        missing = set(transitions) - set(steps)
        if missing:
            raise ValueError(f"no step function for {sorted(missing)}")
        self._steps = steps
        self._transitions = transitions
        self.report = report
        self._on_change = on_change
        self._interrupted = interrupted
        #: The time each step's record and the report's end carry (the run's clock).
        self._clock = clock
        #: Set when a shutdown request stopped the run between two steps.
        self.interrupted_before: State | None = None

    @staticmethod
    def new_report(transitions: dict[State, tuple[State, State]] = TRANSITIONS, **kwargs: object) -> RunReport:
        steps = [StepRecord(state.value) for state in transitions if state not in UNRECORDED]
        return RunReport(steps=steps, **kwargs)  # type: ignore[arg-type]

    def run(self, start: State = State.FETCH) -> RunReport:
        order = list(self._transitions)
        state = start
        self.interrupted_before = None
        #: After a shutdown request: the states that have not run yet.
        not_run: list[State] | None = None
        while state is not State.DONE:
            # The verdict report only writes what the steps found: not a step a shutdown stops before.
            if state not in UNRECORDED and self._interrupted():
                self.interrupted_before = state
                not_run = order[order.index(state) :]
                break
            result = self._run_step(state)
            if result.status is StepStatus.INTERRUPTED:
                not_run = order[order.index(state) + 1 :]
                break
            state = self._transitions[state][0 if result.went_well else 1]
        # A stopping pod still gets a few seconds: store what exists (cheap, local).
        for later in not_run or []:
            if later in CAPTURE_STATES:
                self._run_step(later)
        for record in self.report.steps:
            if record.status is StepStatus.PENDING:
                record.status = StepStatus.SKIPPED
                record.message = record.message or (
                    "not started: the run was interrupted" if not_run is not None else "not reached"
                )
        return self.report

    def _run_step(self, state: State) -> StepResult:
        if state in UNRECORDED:
            return self._steps[state]()
        record = self.report.step(state.value)
        record.status = StepStatus.RUNNING
        record.started_at = self._clock()
        self._on_change(self.report)
        result = self._steps[state]()
        record.ended_at = self._clock()
        record.status = result.status
        record.exit_code = result.exit_code
        record.classification = result.classification
        record.message = step_message(result.reason)
        if result.status is StepStatus.WARNED:
            self.report.warnings.append(warning_line(f"{state}: {result.reason}"))
        self._on_change(self.report)
        return result

    def finish(
        self,
        *,
        validate_gate: bool,
        publish_gate: bool,
        success: str = "AICR Job complete",
        component_gate: bool = False,
    ) -> int:
        """``success`` is the message of a run that passed every gate."""
        code, message = final_exit(
            self.report,
            validate_gate=validate_gate,
            publish_gate=publish_gate,
            interrupted_before=self.interrupted_before,
            success=success,
            component_gate=component_gate,
        )
        self.report.exit_code = code
        self.report.message = run_message(message)
        self.report.ended_at = self._clock()
        interrupted = self.interrupted_before is not None or any(
            r.status is StepStatus.INTERRUPTED for r in self.report.steps
        )
        self.report.phase = (
            RunPhase.INTERRUPTED
            if interrupted
            else RunPhase.FAILED
            if code != 0
            else RunPhase.SUCCEEDED_WITH_FAILURES
            if self.report.failed_components or validation_failed(self.report) or unreadable(self.report)
            else RunPhase.SUCCEEDED_INCONCLUSIVE
            if inconclusive(self.report)
            else RunPhase.SUCCEEDED
        )
        self._on_change(self.report)
        return code
