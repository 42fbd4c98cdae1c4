"""One method per state of the run, registered for its state: ``@step(State.X)``.

A mode that does a state its own way registers its variant for that state and
mode (``@step(State.LEASE, Mode.PLAN)``); the run finds each state's step by its
state, its mode's variant first. What the modes' runs go through is the machine's
(``run.machine.ROUTES``).

Each step returns a ``StepResult`` and never raises: a ``RunnerError`` becomes a
failed result with its exit code, anything else an internal error whose traceback
goes to the work directory (never to the pod log as a wall of text).

What only an install or a validation runs (deploy.sh and helm, the re-validation's
Lease and history, the verdict report) is imported by its step: a plan loads none of it.
"""

from __future__ import annotations

import functools
import shutil
from collections import deque
from collections.abc import Callable
from pathlib import Path

from structlog.contextvars import bound_contextvars

from aicr_runner import logs
from aicr_runner.aicr import argv as commands
from aicr_runner.aicr import capabilities, classify, recipe
from aicr_runner.aicr.classify import Outcome
from aicr_runner.errors import (
    AicrContractError,
    ExitCode,
    InterruptedRun,
    PackError,
    RunnerError,
)
from aicr_runner.mirror import rewrite as mirror_sources
from aicr_runner.net import deadline
from aicr_runner.run.machine import UNRECORDED, State, StepResult
from aicr_runner.run.report import StepStatus
from aicr_runner.settings import criteria_catalog as catalog
from aicr_runner.settings.config import ENV_PREFIX
from aicr_runner.steps import captures, evidence, snapshot, upgrade
from aicr_runner.steps import fetch as acquire
from aicr_runner.steps.context import Mode, RunContext

__all__ = ["Steps", "step"]

log = logs.get_logger()

#: Lines of a failing command kept to explain the failure (never the whole output).
_TAIL_LINES = 60

StepCode = Callable[["Steps"], StepResult]
#: Each state's step, and a mode's own variant of it: (state, mode or None) -> its code.
_REGISTERED: dict[tuple[State, Mode | None], StepCode] = {}


def step(state: State, mode: Mode | None = None) -> Callable[[StepCode], StepCode]:
    """Registers a ``Steps`` method as ``state``'s step (in ``mode`` only, when given)."""

    def register(code: StepCode) -> StepCode:
        if (state, mode) in _REGISTERED:
            raise ValueError(f"two steps for {state} ({mode or 'every mode'})")
        _REGISTERED[(state, mode)] = code
        return code

    return register


class Steps:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.s = ctx.settings
        #: What the steps found so far (the binary, the pack, the recipe, aicr's version).
        self.found = ctx.findings

    def functions(self) -> dict[State, Callable[[], StepResult]]:
        """Each state's step, found by its state: the run's mode's variant first. The
        recorded steps run guarded (logged, an error turned into a failed result)."""
        mode, table = self.ctx.mode, dict[State, Callable[[], StepResult]]()
        for state in State:
            code = _REGISTERED.get((state, mode)) or _REGISTERED.get((state, None))
            if code is not None:
                bound = functools.partial(code, self)
                table[state] = bound if state in UNRECORDED else self._guarded(state, bound)
        return table

    def _guarded(self, state: State, method: Callable[[], StepResult]) -> Callable[[], StepResult]:
        # Every event of the step, wherever in the code it calls, carries the step.
        @bound_contextvars(step=state.value)
        def run() -> StepResult:
            log.info("step started")
            try:
                result = method()
            except InterruptedRun as exc:
                result = StepResult(StepStatus.INTERRUPTED, int(exc.exit_code), exc.message)
            except RunnerError as exc:
                result = StepResult.failed(int(exc.exit_code), exc.message)
            except Exception as exc:  # noqa: BLE001 - the run must end with a report, not a traceback
                where = logs.write_traceback(self.ctx.work)
                result = StepResult.failed(
                    ExitCode.INTERNAL,
                    f"internal error in {state}: {type(exc).__name__}: {logs.redact(str(exc))} ({where})",
                )
            record = self.ctx.report.step(state.value)
            started = record.started_at
            log.info(
                "step ended",
                outcome=result.status.value,
                exit_code=result.exit_code,
                reason=result.reason,
                duration_s=None
                if started is None
                else round((self.ctx.externals.clock() - started).total_seconds(), 3),
            )
            return result

        return run

    # -- helpers -----------------------------------------------------------------

    def _validate_exit(self) -> int | None:
        """validate's exit code once it ran (or was stopped); None when it did not run."""
        record = self.ctx.report.step(State.VALIDATE.value)
        if record.status in (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED):
            return None
        return record.exit_code

    @property
    def _binary(self) -> Path:
        if self.found.aicr is None:
            raise RunnerError("aicr is not available (the fetch step did not succeed)")
        return self.found.aicr

    # -- steps -------------------------------------------------------------------

    @step(State.FETCH, Mode.PLAN)
    def plan_fetch(self) -> StepResult:
        return acquire.offering_local(self.fetch)

    @step(State.FETCH)
    def fetch(self) -> StepResult:
        binary, how, preinstalled = acquire.obtain(self.ctx)
        # Provenance is verified before aicr runs at all, --version included.
        provenance = acquire.verify_provenance(self.ctx, binary)
        self.found.aicr = binary.path
        version = acquire.detect_version(self.ctx, binary.path, preinstalled=preinstalled)
        refused = capabilities.unsupported(self.s, version)
        if refused:
            return StepResult.failed(ExitCode.BAD_INPUT, "; ".join(refused), classification="aicr-version-unsupported")
        criteria = capabilities.criteria_refusals(self.s, version) if preinstalled else []
        if criteria:
            return StepResult.failed(ExitCode.BAD_INPUT, "; ".join(criteria), classification="criteria-refused")
        if provenance.warning:
            return StepResult.warned(
                f"aicr {version.text} from {how}; {provenance.warning}", classification="provenance-unverified"
            )
        if provenance.verified is None:
            return StepResult.ok(f"aicr {version.text} from {how}; provenance not checked (mode off)")
        return StepResult.ok(f"aicr {version.text} from {how}; {provenance.verified.summary()}")

    @step(State.PACK)
    def pack(self) -> StepResult:
        if self.ctx.config.pack_dir is not None:
            if not (self.ctx.config.pack_dir / "registry.yaml").is_file():
                return StepResult.failed(
                    ExitCode.PACK_VERIFICATION_FAILED,
                    f"pack directory {self.ctx.config.pack_dir} has no registry.yaml; aicr requires it even as a stub",
                )
            self.found.pack = self.ctx.config.pack_dir
            return StepResult.ok(f"local pack {self.ctx.config.pack_dir}")
        if not self.s.pack.ref:
            return StepResult.skipped("no data pack")
        target = self.ctx.work / "pack"
        shutil.rmtree(target, ignore_errors=True)
        budget = self.s.pack.pull_budget_seconds
        pulled = deadline.bounded(
            lambda cancelled: self.ctx.externals.pull(self.s.pack, target, cancelled=cancelled),
            budget_seconds=budget,
            interrupted=self.ctx.externals.interrupted,
            what="the data pack pull",
            over_budget=lambda: PackError(
                f"the data pack pull of {self.s.pack.ref} did not finish within the {budget:g}s pull budget "
                f"({ENV_PREFIX}PACK__PULL_BUDGET_SECONDS); the registry is slow or stalled"
            ),
        )
        self.found.pack = pulled.path
        return StepResult.ok(f"pulled {pulled.ref} ({pulled.manifest_digest}, {len(pulled.layers)} layers)")

    @step(State.RECIPE)
    def recipe(self) -> StepResult:
        self.ctx.recipe_path.unlink(missing_ok=True)
        tail: deque[str] = deque(maxlen=_TAIL_LINES)

        def watch(line: str) -> None:
            if self.ctx.behaviour.completion_message in line:
                self.found.completion_line = logs.format_relayed_line(line)

        argv = commands.recipe_argv(self.s, self._binary, self.found.pack, self.ctx.recipe_path)
        result = self.ctx.run_child(State.RECIPE, argv, tail=tail, on_line=watch)
        if result.exit_code != 0:
            message, supported = recipe.parse_rejection(list(tail))
            unknown = recipe.unknown_value(message)
            if unknown is not None and not supported:
                return self._unknown_criteria_value(result.exit_code, message, *unknown)
            if supported:
                self.ctx.report.supported_combinations = supported
                rejected = recipe.with_supported(message, supported)
                log.error("CRITERIA REJECTED", reason=rejected)
            return StepResult.failed(
                result.exit_code,
                f"aicr recipe failed (exit {result.exit_code}): {message}",
                classification="criteria-rejected" if supported else "recipe-failed",
            )
        if not self.ctx.recipe_path.is_file():
            raise AicrContractError(
                f"aicr broke its contract: aicr recipe exited 0 but wrote no {self.ctx.recipe_path.name} "
                f"(--output {self.ctx.recipe_path})"
            )
        mirrored = mirror_sources.apply(self.ctx.recipe_path, self.s.mirror.registry, self.s.mirror.chart_repository)
        summary = recipe.load_recipe(self.ctx.recipe_path)
        self.found.recipe_summary = summary
        self.ctx.report.components = [c.as_row() for c in summary.components]
        return StepResult.ok(
            f"{len(summary.components)} components, overlays: {', '.join(summary.applied_overlays) or '-'}{mirrored}"
        )

    def _unknown_criteria_value(self, exit_code: int, message: str, dimension: str, value: str) -> StepResult:
        """aicr does not know a criteria value (0.11 exits 8 for it, the refusal
        wrapped as an internal error, and lists nothing): a deterministic refusal,
        exit 2, with the values its ``recipe --help`` lists."""
        version = self.found.aicr_version
        named = f"aicr {version.text}" if version is not None and version.probe is None else "this aicr"
        known = acquire.known_values(self.ctx, self._binary).get(dimension, ())
        if known:
            self.ctx.report.supported_combinations = [f"{dimension}={v}" for v in known]
        text = recipe.unknown_value_refusal(named, exit_code, message, dimension=dimension, value=value, known=known)
        log.error("CRITERIA REJECTED", reason=text)
        return StepResult.failed(ExitCode.BAD_INPUT, text, classification="criteria-rejected")

    @step(State.CAPTURE_RECIPE)
    def capture_recipe(self) -> StepResult:
        return captures.recipe(self.ctx)

    @step(State.CHECK_RECIPE)
    def check_recipe(self) -> StepResult:
        summary = self.found.recipe_summary
        if summary is None:
            return StepResult.skipped("no recipe")
        expect = self.s.recipe.expect
        if expect.any_set:
            problems = recipe.check_expectations(summary, expect)
            if problems:
                return StepResult.failed(
                    ExitCode.EXPECTATIONS_NOT_MET,
                    "recipe falls short of recipe.expect: " + "; ".join(problems),
                    classification="expectations-not-met",
                )
            return StepResult.ok("recipe meets recipe.expect")
        version = self.found.aicr_version.text if self.found.aicr_version is not None else self.s.aicr.version
        # What each applied overlay carries: the running aicr's catalog, the pack's overlays.
        known = {**catalog.overlay_criteria(version), **recipe.pack_overlay_criteria(self.found.pack)}
        warnings = recipe.thin_resolution_warnings(summary, self.s.criteria, known)
        if warnings:
            return StepResult.warned("; ".join(warnings), classification="thin-resolution")
        return StepResult.ok("no expectations set; resolution is a full leaf")

    @step(State.BUNDLE)
    def bundle(self) -> StepResult:
        if not self.s.deploy.enabled:
            return StepResult.skipped("Skipping deploy (deploy.enabled=false): assert-only run")
        return self.rendered_bundle()

    @step(State.BUNDLE, Mode.PLAN)
    def rendered_bundle(self) -> StepResult:
        """The bundle rendered (a plan renders it whatever deploy.enabled says: it is what a plan shows)."""
        # aicr 1.x verify is closed-world: always bundle into a fresh, empty directory.
        shutil.rmtree(self.ctx.bundle_dir, ignore_errors=True)
        argv = commands.bundle_argv(self.s, self._binary, self.ctx.recipe_path, self.ctx.bundle_dir, self.found.pack)
        tail: deque[str] = deque(maxlen=_TAIL_LINES)
        result = self.ctx.run_child(State.BUNDLE, argv, tail=tail)
        if result.exit_code != 0:
            # aicr's own reason (e.g. "flag provided but not defined: -storage-class"), not just a number.
            reason = recipe.parse_rejection(list(tail))[0]
            return StepResult.failed(result.exit_code, f"aicr bundle failed (exit {result.exit_code}): {reason}")
        if not (self.ctx.bundle_dir / "deploy.sh").is_file():
            raise AicrContractError(
                f"aicr broke its contract: aicr bundle exited 0 but wrote no deploy.sh into {self.ctx.bundle_dir}"
            )
        files = sum(1 for p in self.ctx.bundle_dir.rglob("*") if p.is_file())
        return StepResult.ok(f"bundle rendered: {files} files in {self.ctx.bundle_dir}")

    @step(State.VERIFY)
    def verify(self) -> StepResult:
        if not self.s.deploy.enabled:
            return StepResult.skipped("assert-only run: no bundle")
        return self.verified_bundle()

    @step(State.VERIFY, Mode.PLAN)
    def verified_bundle(self) -> StepResult:
        result = self.ctx.run_child(State.VERIFY, commands.verify_argv(self.s, self._binary, self.ctx.bundle_dir))
        verdict = classify.classify_verify(result.exit_code, passed=self.ctx.behaviour.verify_checks)
        if verdict.outcome is Outcome.FAILED:
            return StepResult.failed(
                result.exit_code,
                f"Bundle verification FAILED (exit {result.exit_code}): {verdict.reason}",
                classification="verify-failed",
            )
        return StepResult.ok(verdict.reason, classification="verified")

    @step(State.UPGRADE_CHECK)
    def upgrade_check(self) -> StepResult:
        return upgrade.check(self.ctx, self._binary)

    @step(State.UPGRADE_CHECK, Mode.PLAN)
    def planned_upgrade_check(self) -> StepResult:
        return upgrade.planned(self.ctx, self._binary)

    @step(State.LEASE, Mode.VALIDATE)
    def validation_lease(self) -> StepResult:
        from aicr_runner.steps import revalidate

        return revalidate.no_install_running(self.ctx)

    @step(State.LEASE, Mode.PLAN)
    @step(State.DEPLOY, Mode.PLAN)
    def nothing_deployed(self) -> StepResult:
        return StepResult.skipped("plan: nothing is deployed")

    @step(State.LEASE)
    def lease(self) -> StepResult:
        if not self.s.deploy.enabled:
            return StepResult.skipped("assert-only run: nothing is deployed, no install Lease needed")
        lease = self.ctx.externals.lease
        if lease is None:
            return StepResult.skipped(
                "no install Lease (AICR_RUNNER_LEASE__NAME is empty): runs of this release are not serialised"
            )
        record = self.ctx.report.step(State.LEASE.value)

        def on_wait(holder: str, waited: float) -> None:
            record.message = (
                f"waiting for the install Lease {lease.where}, held by {holder} "
                f"(waited {waited:.0f}s; gives up after {self.s.lease.wait_seconds:g}s)"
            )
            self.ctx.handlers.progress()

        waited = lease.acquire(on_wait)
        lease.start_renewing(self.ctx.handlers.on_lease_lost)
        after = f" after waiting {waited:.0f}s" if waited >= 1 else ""
        return StepResult.ok(f"install Lease {lease.where} held by {lease.holder}{after}")

    @step(State.RECORDED_RECIPE)
    def recorded_recipe(self) -> StepResult:
        from aicr_runner.steps import revalidate

        return revalidate.recorded_recipe(self.ctx)

    @step(State.SNAPSHOT)
    def snapshot(self) -> StepResult:
        return snapshot.take(self.ctx, self._binary)

    @step(State.SNAPSHOT, Mode.PLAN)
    def planned_snapshot(self) -> StepResult:
        return snapshot.planned(self.ctx)

    @step(State.DEPLOY)
    def deploy(self) -> StepResult:
        if not self.s.deploy.enabled:
            return StepResult.skipped("Skipping deploy (deploy.enabled=false): assert-only run")
        from aicr_runner.steps import deploy as deploy_run

        return deploy_run.deployed(self.ctx)

    @step(State.VALIDATE, Mode.PLAN)
    def no_validation(self) -> StepResult:
        return StepResult.skipped("plan: no validation")

    @step(State.VALIDATE, Mode.VALIDATE)
    def validation_only(self) -> StepResult:
        """A validation-only run's validate, then whether an install took its Lease over meanwhile."""
        from aicr_runner.steps import revalidate

        result = self.validate()
        if self.s.validate.enabled:
            revalidate.note_preemption(self.ctx)
        return result

    @step(State.VALIDATE)
    def validate(self) -> StepResult:
        if not self.s.validate.enabled:
            return StepResult.skipped("validate.enabled=false")
        from aicr_runner.aicr.verdict import validate_result

        self.ctx.ctrf_path.unlink(missing_ok=True)
        shutil.rmtree(self.ctx.evidence_dir, ignore_errors=True)
        argv = snapshot.validate_argv(self.ctx, self._binary)
        tail: deque[str] = deque(maxlen=_TAIL_LINES)
        result = self.ctx.run_child(State.VALIDATE, argv, tail=tail)
        log.info("aicr validate exited", exit_code=result.exit_code)
        snapshot.into_evidence(self.ctx)
        error = recipe.last_error(list(tail)) if result.exit_code != 0 else ""
        return validate_result(result.exit_code, self.ctx.ctrf_path, self.s.validate, error=error)

    @step(State.CAPTURE_VERDICT)
    def capture_verdict(self) -> StepResult:
        return captures.verdict(self.ctx, self._validate_exit())

    @step(State.PUBLISH)
    def publish(self) -> StepResult:
        return evidence.publish(self.ctx, self._binary, validated=self._validate_exit() is not None)

    @step(State.CAPTURE_EVIDENCE)
    def capture_evidence(self) -> StepResult:
        return evidence.capture(self.ctx, validated=self._validate_exit() is not None)

    @step(State.VERDICT_REPORT)
    def report_verdict(self) -> StepResult:
        from aicr_runner.steps import verdict_report

        return verdict_report.written(self.ctx)
