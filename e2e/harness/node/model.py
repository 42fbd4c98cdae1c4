"""The stand-in kubelet's constants, errors and results (what a test reads back)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NODE_NAME = "e2e-node"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Where scenarios put the fake aicr in the image (chart value aicrBinary.path).
FAKE_AICR_PATH = "/usr/local/bin/aicr"
#: podman mode: where every pod finds the fake aicr's package (its launcher runs
#: it with the image's Python), mounted read-only like an image file.
FAKE_AICR_PACKAGE = "/opt/fake-aicr/fake_aicr"
#: The kubelet keeps at most this much of a termination message file...
MAX_TERMINATION_MESSAGE = 4096
#: ...and, under FallbackToLogsOnError, the last 80 lines / 2 KiB of the log.
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


class PodSpecUnsupported(NotImplementedError):
    """The pod uses something this stand-in kubelet does not implement."""


class _PodStartFailure(Exception):
    """The container cannot start (the kubelet would report a waiting reason)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


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
    detail: str = ""  # why it never started (the kubelet's waiting message)
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
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
    sandbox: str = ""
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
            f"job {self.job_name} pod {self.pod_name}: exit={self.exit_code} reason={self.reason} "
            f"sandbox={self.sandbox}" + (f" deletion={self.deletion}" if self.deletion else "")
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


# --------------------------------------------------------------------------------------
# $(VAR) expansion, exactly as k8s.io/kubernetes/third_party/forked/golang/expansion


def expand(value: str, *contexts: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` from the first context that has it; ``$$`` escapes; unknown
    references stay as written."""

    def mapping(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return f"$({name})"

    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            rest = value[cursor + 1 :]
            if rest[0] == "$":
                read, is_var, advance = "$", False, 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, is_var, advance = "$(", False, 1
                else:
                    read, is_var, advance = rest[1:close], True, close + 1
            else:
                read, is_var, advance = "$" + rest[0], False, 1
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


# --------------------------------------------------------------------------------------


def _ts(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
