"""Exit codes and the one exception tree of the runner.

Upstream exit codes (aicr 0-9, deploy.sh 1/2/130) pass through as the Job's exit
code unchanged. The runner's own failures use the codes below, chosen so they never
collide with aicr's (0-9), deploy.sh's (130) or a shell's (126/127).

Third-party errors (httpx, oras/requests, kubernetes, OSError from subprocesses)
are translated into this tree at the boundary of the module that calls them, so
the state machine only ever sees a ``RunnerError`` with an exit code.

The tree (exit code in brackets)::

    RunnerError [70 INTERNAL, or the code given]
    ├── ConfigError [2 BAD_INPUT]
    ├── DownloadError [20 DOWNLOAD_FAILED]
    ├── ChecksumError [21 AICR_VERIFICATION_FAILED]
    ├── ArchiveError [21 AICR_VERIFICATION_FAILED]
    ├── PackError [22 PACK_UNAVAILABLE]
    │   ├── PackNotFoundError [22 PACK_UNAVAILABLE]
    │   ├── PackAuthError [23 PACK_AUTH_FAILED]
    │   └── PackIntegrityError [24 PACK_VERIFICATION_FAILED]
    ├── CaptureError [26 CAPTURE_FAILED]
    │   └── ApiConflictError [26 CAPTURE_FAILED]
    ├── ToolError [27 TOOL_MISSING]
    ├── HelmReleasePendingError [28 HELM_RELEASE_PENDING]
    ├── ProvenanceError [29 PROVENANCE_FAILED]
    ├── AicrContractError [30 AICR_CONTRACT_BROKEN]
    ├── LeaseError [31 LEASE_WAIT_EXPIRED]
    ├── RecipeFormatError [70 INTERNAL]
    └── InterruptedRun [143 INTERRUPTED]
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

__all__ = [
    "AicrContractError",
    "ApiConflictError",
    "ArchiveError",
    "CaptureError",
    "ChecksumError",
    "ConfigError",
    "DownloadError",
    "ExitCode",
    "HelmReleasePendingError",
    "InputProblem",
    "InterruptedRun",
    "LeaseError",
    "PackAuthError",
    "PackError",
    "PackIntegrityError",
    "PackNotFoundError",
    "ProvenanceError",
    "RecipeFormatError",
    "RunnerError",
    "ToolError",
]


class ExitCode(IntEnum):
    """The runner's own exit codes. Documented in docs/configuration.md "Exit codes"."""

    OK = 0
    #: A setting is invalid (environment, flags, cross-field rules). Same meaning
    #: as aicr's own 2 (INVALID_REQUEST), so one podFailurePolicy rule covers both.
    BAD_INPUT = 2
    #: The aicr release could not be downloaded within the retry budget.
    DOWNLOAD_FAILED = 20
    #: Checksum, pin or archive-shape verification of the aicr release failed.
    AICR_VERIFICATION_FAILED = 21
    #: The data pack does not exist or its registry cannot be reached.
    PACK_UNAVAILABLE = 22
    #: The registry rejected (401/403) or never got a credential for the pack.
    PACK_AUTH_FAILED = 23
    #: A pack blob did not match its digest, the archive was unsafe, or the pack
    #: has no registry.yaml.
    PACK_VERIFICATION_FAILED = 24
    #: The resolved recipe is thinner than the stated expectations.
    EXPECTATIONS_NOT_MET = 25
    #: A result ConfigMap (verdict, evidence, status) could not be written; also a
    #: run whose final status could not be written (it never claims it was).
    CAPTURE_FAILED = 26
    #: A required program (aicr, bash, deploy.sh) is missing or not executable, or
    #: deploy.sh's helm does not say its version (deploy.helmApply needs it).
    TOOL_MISSING = 27
    #: A Helm release of this bundle is pending (an interrupted helm operation);
    #: deploy.sh would fail on it ("another operation is in progress").
    HELM_RELEASE_PENDING = 28
    #: aicr's Sigstore provenance did not verify (signature, certificate chain,
    #: transparency log, signer identity, subject digest or predicate type), or
    #: the release carries none while provenance.mode is require.
    PROVENANCE_FAILED = 29
    #: aicr broke its contract: it exited 0 without writing its output file, or
    #: (validate.failOnError) its CTRF report is unreadable (not CTRF, or contradicting itself).
    AICR_CONTRACT_BROKEN = 30
    #: The install Lease stayed with another live run for longer than the wait
    #: allowed (AICR_RUNNER_LEASE__WAIT_SECONDS), or the Lease API failed.
    LEASE_WAIT_EXPIRED = 31
    #: validate.failOnError and aicr's CTRF report shows no check ran: zero tests,
    #: or every one skipped or pending (aicr 0.11 exits 0 for both).
    VALIDATION_INCONCLUSIVE = 32
    #: ``aicr-runner validate`` found the install Lease held by a live install (or
    #: another validation), or an install took it over while it validated (its
    #: verdict discarded): a half-installed cluster is never reported, and an
    #: install never waits for a validation.
    INSTALL_IN_PROGRESS = 33
    #: ``aicr-runner fleet``: a row is not green (a failed, errored or inconclusive
    #: verdict, no verdict at all, or a cluster that is unreachable or forbidden).
    FLEET_NOT_GREEN = 34
    #: An install would cross an aicr pin that ``aicr upgrade-check`` says must not be
    #: crossed as it is: a blocked component, a manual one not acknowledged in
    #: upgradeCheck.acknowledge, an unknown one under upgradeCheck.onUnknown=stop, or
    #: (upgradeCheck.requireAssessment) an aicr that cannot assess it. Nothing was
    #: deployed; retrying with the same inputs gives the same verdict.
    UPGRADE_STOPPED = 35
    #: An unexpected internal error; the message says where to find details.
    INTERNAL = 70
    #: SIGTERM/SIGINT stopped the run; the step is recorded as interrupted.
    INTERRUPTED = 143


#: Exit codes that mean "re-running with the same inputs cannot succeed": bad
#: input or failed verification. The chart's podFailurePolicy fails the Job at
#: once on these (aicr's 2 = invalid input and 4 = bundle verification included).
DETERMINISTIC_EXIT_CODES: tuple[int, ...] = (
    ExitCode.BAD_INPUT,
    4,
    ExitCode.AICR_VERIFICATION_FAILED,
    ExitCode.PACK_VERIFICATION_FAILED,
    ExitCode.EXPECTATIONS_NOT_MET,
    ExitCode.PROVENANCE_FAILED,
    ExitCode.UPGRADE_STOPPED,
)


class RunnerError(Exception):
    """Base of every error the runner reports. Carries its exit code, and the facts
    a caller branches on as fields (never parsed from the message): the HTTP status
    a server answered with (0: none), whether the call ran out of its time budget."""

    exit_code: int = ExitCode.INTERNAL

    def __init__(
        self, message: str, *, exit_code: int | None = None, http_status: int = 0, out_of_budget: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.http_status = http_status
        self.out_of_budget = out_of_budget

    def __str__(self) -> str:
        return self.message


class InputProblem(NamedTuple):
    """One problem of the input: ``line`` says it; ``name`` is the variable (or flag) it is
    about, by which the command line says where the value came from (``""``: it names none).
    A named tuple: no ``dataclasses`` import on the command line's start-up path."""

    line: str
    name: str = ""


class ConfigError(RunnerError):
    """One or more settings are invalid. ``items`` holds each problem as a fact (its line
    and the input it is about), ``problems`` its line.

    ``report``: the lines are one report (a heading and its items, such as Helm's
    schema report), printed as they are rather than one "invalid setting" each."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, problems: Sequence[str | InputProblem], *, report: bool = False) -> None:
        self.items = [item if isinstance(item, InputProblem) else InputProblem(item) for item in problems]
        self.problems = [item.line for item in self.items]
        super().__init__("; ".join(self.problems))
        self.report = report


class DownloadError(RunnerError):
    exit_code = ExitCode.DOWNLOAD_FAILED

    def __init__(self, message: str, *, offers_local: bool = False) -> None:
        super().__init__(message)
        #: The message already says how to run without the download (a preinstalled aicr).
        self.offers_local = offers_local


class ChecksumError(RunnerError):
    exit_code = ExitCode.AICR_VERIFICATION_FAILED


class ArchiveError(RunnerError):
    """An archive member is unsafe or unexpected (links, '..', oversized...)."""

    exit_code = ExitCode.AICR_VERIFICATION_FAILED


class ProvenanceError(RunnerError):
    """aicr's Sigstore provenance is missing or does not verify (fail closed)."""

    exit_code = ExitCode.PROVENANCE_FAILED


class PackError(RunnerError):
    exit_code = ExitCode.PACK_UNAVAILABLE


class PackNotFoundError(PackError):
    exit_code = ExitCode.PACK_UNAVAILABLE


class PackAuthError(PackError):
    exit_code = ExitCode.PACK_AUTH_FAILED


class PackIntegrityError(PackError):
    exit_code = ExitCode.PACK_VERIFICATION_FAILED


class CaptureError(RunnerError):
    exit_code = ExitCode.CAPTURE_FAILED


class ApiConflictError(CaptureError):
    """The API server answered 409 Conflict; the caller decides what that means."""


class AicrContractError(RunnerError):
    """aicr said it succeeded but did not do what its contract promises."""

    exit_code = ExitCode.AICR_CONTRACT_BROKEN


class RecipeFormatError(RunnerError):
    """aicr wrote a recipe the runner cannot read."""

    exit_code = ExitCode.INTERNAL


class ToolError(RunnerError):
    exit_code = ExitCode.TOOL_MISSING


class LeaseError(RunnerError):
    """The install Lease could not be taken (waited too long, or the API failed)."""

    exit_code = ExitCode.LEASE_WAIT_EXPIRED


class HelmReleasePendingError(RunnerError):
    """A Helm release of the bundle is pending and the runner may not, or could not, recover it."""

    exit_code = ExitCode.HELM_RELEASE_PENDING


class InterruptedRun(RunnerError):
    exit_code = ExitCode.INTERRUPTED
