"""What a test reads back of the pods the e2e node ran (pods.py makes them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ContainerRun:
    name: str
    init: bool
    exit_code: int | None  # None: the container never started
    reason: str  # Completed, Error, DeadlineExceeded, CreateContainerConfigError...
    output: str  # stdout and stderr, interleaved by line (what `kubectl logs` shows)
    stdout: str
    stderr: str
    termination_message: str
    seconds: float = 0.0


@dataclass
class PodDeletion:
    """What the kubelet saw of a pod's deletion and did about it."""

    grace_seconds: float  # the deletion's grace period (deletionGracePeriodSeconds)
    disruption: str = ""  # the DisruptionTarget condition's reason, when the API server set one
    sigterm_after: float | None = None  # seconds from the container's start to SIGTERM
    sigterm_at: float | None = None  # when SIGTERM was sent (time.monotonic())
    exited_after_sigterm: float | None = None  # seconds from SIGTERM to the container's exit
    sigkill: bool = False  # the grace period ran out


@dataclass(frozen=True)
class JobRun:
    job_name: str
    pod_name: str
    exit_code: int | None  # the container's; an init container's if that failed first
    output: str
    termination_message: str
    reason: str
    containers: tuple[ContainerRun, ...] = ()
    pod: Mapping[str, Any] = field(default_factory=dict)
    deletion: PodDeletion | None = None  # set when the pod was deleted while it ran

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    def container(self, name: str) -> ContainerRun:
        for run in self.containers:
            if run.name == name:
                return run
        raise KeyError(f"no container {name!r} ran in pod {self.pod_name}")

    def describe(self) -> str:
        """A multi-line summary for assertion messages."""
        lines = [
            f"job {self.job_name} pod {self.pod_name}: exit={self.exit_code} reason={self.reason}"
            + (f" deletion={self.deletion}" if self.deletion else "")
        ]
        for run in self.containers:
            lines.append(
                f"--- {'init ' if run.init else ''}container {run.name}: exit={run.exit_code} reason={run.reason}"
            )
            lines.append(run.output.rstrip())
            if run.termination_message:
                lines.append(f"--- termination message:\n{run.termination_message}")
        return "\n".join(lines)


@dataclass(frozen=True)
class JobOutcome:
    """The Job's end, as the real Job controller recorded it, and the pods run."""

    status: str  # the Job's condition: "Complete" or "Failed"; "Stuck": a pod can never start
    reason: str  # the condition's reason ("CompletionsReached", "PodFailurePolicy", "BackoffLimitExceeded",
    # "DeadlineExceeded"...), or the stuck pod's
    attempts: tuple[JobRun, ...]

    @property
    def last(self) -> JobRun:
        return self.attempts[-1]

    def describe(self) -> str:
        head = f"job outcome: {self.status} {self.reason} after {len(self.attempts)} pod(s)"
        return "\n".join([head, *(a.describe() for a in self.attempts)])
