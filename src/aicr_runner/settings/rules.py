"""The rules between settings: the chart's render-time guards, repeated so ``docker run``
users get them too. ``RunnerSettings`` runs them as its ``model_validator(mode="after")``
when validated with ``RULES`` in its context (``settings.load.load``); a model built in
code (a test's, a step's) is not a run's input and skips them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from aicr_runner.errors import InputProblem
from aicr_runner.settings.checks import DEFAULT_RELEASE_BASE_URL, ENV_PREFIX, NON_CONCRETE_SERVICES, PublishMode
from aicr_runner.settings.criteria_catalog import release_numbers, version_guards

if TYPE_CHECKING:
    from aicr_runner.settings.runner import RunnerSettings

__all__ = ["LOCAL_PACK", "RULES", "RuleViolations", "problems"]

#: Validation context keys: run the rules; ``plan --pack-dir`` supplies a pack without a ref.
RULES = "rules"
LOCAL_PACK = "local_pack"


class RuleViolations(ValueError):
    """The rules a valid set of settings breaks, one problem each (pydantic carries it as the
    ``error`` of a ``value_error``)."""

    def __init__(self, problems: list[InputProblem]) -> None:
        super().__init__("; ".join(problem.line for problem in problems))
        self.problems = problems


def _about(name: str, rest: str) -> InputProblem:
    """A broken rule's line, opened by the variable ``ENV_PREFIX + name`` it is about."""
    return InputProblem(f"{ENV_PREFIX}{name}{rest}", f"{ENV_PREFIX}{name}")


def problems(s: RunnerSettings, *, local_pack: bool = False) -> list[InputProblem]:
    """The chart's render-time guards, repeated so ``docker run`` users get them too.

    ``local_pack``: ``plan --pack-dir`` supplies a pack without a ref.
    """
    return [
        *_criteria_problems(s, local_pack=local_pack),
        *_run_problems(s),
        *_publish_problems(s),
        *_input_problems(s),
        *_snapshot_problems(s),
        *_release_problems(s),
    ]


def _release_problems(s: RunnerSettings) -> list[InputProblem]:
    """One source of the aicr release: a registry artifact or an HTTP folder, never both."""
    p, aicr = ENV_PREFIX, s.aicr
    if aicr.release_ref and aicr.release_base_url != DEFAULT_RELEASE_BASE_URL:
        return [
            _about(
                "AICR__RELEASE_REF",
                f"={aicr.release_ref!r} with {p}AICR__RELEASE_BASE_URL={aicr.release_base_url!r}: the release comes "
                "from one place; unset the base URL (chart aicr.releaseBaseUrl) to fetch it from the registry, or the "
                "ref (aicr.releaseRef) to fetch it over HTTP",
            )
        ]
    return []


def _snapshot_problems(s: RunnerSettings) -> list[InputProblem]:
    """The snapshot agent's namespace: stated, and never the runner's own (aicr
    deletes the ServiceAccount ``aicr`` and its Role there when it is done)."""
    p, snap = ENV_PREFIX, s.snapshot
    if not snap.enabled:
        return []
    if not snap.namespace:
        return [
            _about(
                "SNAPSHOT__NAMESPACE",
                "='': name the namespace of the snapshot agent (default aicr-validation); aicr creates it",
            )
        ]
    if snap.namespace == s.namespace:
        return [
            _about(
                "SNAPSHOT__NAMESPACE",
                f"={snap.namespace!r} is the runner's own namespace ({p}NAMESPACE): aicr deletes "
                "the agent's ServiceAccount and Role there when it is done; use a namespace of its own",
            )
        ]
    return []


def _criteria_problems(s: RunnerSettings, *, local_pack: bool) -> list[InputProblem]:
    """Criteria aicr would refuse or misread."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[InputProblem] = []
    numbers = release_numbers(s.aicr.version)
    if not s.aicr.binary and numbers is not None:
        # The release's tag says what aicr does with these values; a preinstalled
        # aicr is asked its version first (the fetch step words them for it).
        problems += version_guards(c.stated(), numbers, f"aicr {s.aicr.version}")
    concrete_service = c.service not in NON_CONCRETE_SERVICES
    if not c.accelerator and not (s.pack.ref or local_pack) and not (concrete_service and c.intent):
        line = (
            f"{p}CRITERIA__*: no criteria stated (service={c.service!r}, accelerator='', intent="
            f"{c.intent!r}, pack ref=''); set an accelerator, a pack ref, or a concrete service "
            "together with an intent (e.g. service=bcm, intent=inference)"
        )
        problems.append(InputProblem(line))  # about every criterion: no one variable's origin
    if c.intent and c.service in ("any", ""):
        problems.append(
            _about(
                "CRITERIA__INTENT",
                f"={c.intent!r} with {p}CRITERIA__SERVICE={c.service!r}: a stated "
                "intent needs a service whose overlays declare it (aks, eks, gke, k0s, oke, ...); "
                "name the service or leave the intent empty",
            )
        )
    return problems


def _run_problems(s: RunnerSettings) -> list[InputProblem]:
    """What the run does: deploy, validate, or both."""
    p = ENV_PREFIX
    problems: list[InputProblem] = []
    v = s.validate
    if not s.deploy.enabled and not v.enabled:
        problems.append(
            _about(
                "DEPLOY__ENABLED",
                f"=false needs {p}VALIDATE__ENABLED=true: a run that neither deploys nor validates does nothing",
            )
        )
    if v.enabled and not v.phases:
        problems.append(
            _about(
                "VALIDATE__PHASES",
                "=[]: name at least one phase (deployment, performance, conformance); "
                "an empty list makes aicr run every phase, performance included",
            )
        )
    return problems


def _publish_problems(s: RunnerSettings) -> list[InputProblem]:
    """Publishing the evidence needs a validation with evidence, a target and, signed, a token."""
    p = ENV_PREFIX
    problems: list[InputProblem] = []
    v = s.validate
    pub = v.publish
    if pub.enabled:
        if not v.enabled:
            problems.append(
                _about(
                    "VALIDATE__PUBLISH__ENABLED",
                    f"=true needs {p}VALIDATE__ENABLED=true: publishing "
                    "needs a validation run to produce the evidence bundle",
                )
            )
        if not v.emit_evidence:
            problems.append(
                _about(
                    "VALIDATE__PUBLISH__ENABLED",
                    f"=true needs {p}VALIDATE__EMIT_EVIDENCE=true: without "
                    "--emit-attestation there is no bundle to publish",
                )
            )
        if not pub.ref:
            problems.append(
                _about(
                    "VALIDATE__PUBLISH__REF",
                    "='': publishing needs an OCI push target such as ghcr.io/org/aicr-evidence",
                )
            )
        if pub.mode is PublishMode.SIGNED and not pub.identity_token_file:
            problems.append(
                _about(
                    "VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE",
                    "='' with mode=signed: mount a short-lived "
                    "OIDC token and give its path, or use mode=unsigned and sign later with "
                    "'aicr evidence sign <pointer> --relocate'",
                )
            )
    return problems


def _input_problems(s: RunnerSettings) -> list[InputProblem]:
    """Settings that need another one: the binary's hash, the pack's transport, k0s's aicr."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[InputProblem] = []
    # "X is set but Y is empty": the line names two settings, so no one origin follows it.
    if s.aicr.binary_sha256 and not s.aicr.binary:
        line = (
            f"{p}AICR__BINARY_SHA256 is set but {p}AICR__BINARY is empty: the hash pins a "
            "preinstalled binary; give its path or drop the hash"
        )
        problems.append(InputProblem(line))
    transport = [
        f"{p}PACK__{name.upper()}"
        for name in ("plain_http", "insecure_tls", "credentials_file")
        if getattr(s.pack, name)
    ]
    # The release artifact (aicr.release_ref) is reached with the pack's transport too.
    if transport and not s.pack.ref and not s.aicr.release_ref:
        line = (
            f"{' and '.join(transport)} {'is' if len(transport) == 1 else 'are'} set but {p}PACK__REF is empty: "
            f"pack transport settings need a pack (or aicr's release from a registry, {p}AICR__RELEASE_REF)"
        )
        problems.append(InputProblem(line))
    if c.service == "k0s" and _version_tuple(s.aicr.version) < (0, 22, 0):
        problems.append(
            _about(
                "CRITERIA__SERVICE",
                f"='k0s' with {p}AICR__VERSION={s.aicr.version!r}: service k0s needs aicr v0.22.0 or later",
            )
        )
    return problems


def _version_tuple(version: str) -> tuple[int, int, int]:
    major, minor, patch = re.split(r"[.+-]", version.lstrip("v"))[:3]
    return int(major), int(minor), int(patch)
