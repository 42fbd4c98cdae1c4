"""Reading the environment into the settings, and the rules between settings.

``load`` reads the ``AICR_RUNNER_`` variables with pydantic-settings' own
environment source (prefix, ``__`` nesting, names in any case), validates them
into ``RunnerSettings`` and raises ``ConfigError`` with one line per problem:
unknown variables first, then in the order of the environment table. Before
that it looks at the names itself, since pydantic-settings skips a name no field
claims and lets the last spelling of a variable set twice win. Then the
cross-field rules: the chart's render-time guards, repeated for ``docker run``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping

from pydantic import BaseModel, ValidationError
from pydantic_settings import EnvSettingsSource, SettingsError
from pydantic_settings.sources.utils import parse_env_vars

from aicr_runner.errors import ConfigError
from aicr_runner.settings.checks import ENV_PREFIX, NON_CONCRETE_SERVICES, PublishMode, escaped
from aicr_runner.settings.criteria_catalog import release_numbers, version_guards
from aicr_runner.settings.problems import settings_error_lines, validation_error_lines
from aicr_runner.settings.runner import RunnerSettings

__all__ = ["env_var_names", "load"]


def _leaves(model: type[BaseModel], prefix: str) -> Iterator[str]:
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _leaves(kind, f"{prefix}{name.upper()}__")
        else:
            yield f"{prefix}{name.upper()}"


#: Every variable, in the order of the environment table.
_ORDER: dict[str, int] = {name: index for index, name in enumerate(_leaves(RunnerSettings, ENV_PREFIX))}


def env_var_names() -> list[str]:
    """Every environment variable the runtime reads (the contract test uses this)."""
    return list(_ORDER)


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, not ``os.environ``."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by _load_env_vars, which the base __init__ calls
        super().__init__(RunnerSettings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _unknown(key: str) -> str:
    import difflib

    guess = difflib.get_close_matches(key.upper(), _ORDER, n=1, cutoff=0.85)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    return f"{escaped(key)}: unknown setting{hint}; see docs/configuration.md 'Environment' for the names"


def _names(env: Mapping[str, str]) -> tuple[dict[str, str], list[str], list[tuple[int, str]]]:
    """The known variables (each under its name in capitals, first spelling kept),
    the unknown ones, and the ones set twice in two spellings."""
    known: dict[str, str] = {}
    spelled: dict[str, str] = {}
    unknown: list[str] = []
    twice: list[tuple[int, str]] = []
    for key, raw in env.items():
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        if upper not in _ORDER:
            unknown.append(_unknown(key))
        elif upper in spelled:
            twice.append((_ORDER[upper], f"{upper}: set twice, as {spelled[upper]} and {key}; set it once"))
        else:
            spelled[upper] = key
            known[upper] = raw
    return known, unknown, twice


def _validated(known: Mapping[str, str]) -> tuple[RunnerSettings | None, list[tuple[int, str]]]:
    try:
        return RunnerSettings(**_Environment(known)()), []
    except ValidationError as exc:
        lines = validation_error_lines(exc, known)
    except SettingsError as exc:  # not expected with decoding off; still one line, never a traceback
        lines = settings_error_lines(exc)
    return None, [(_ORDER.get(name, len(_ORDER)), line) for name, line in lines]


def load(environ: Mapping[str, str] | None = None, *, local_pack: bool = False) -> RunnerSettings:
    """Read settings from ``environ`` (default ``os.environ``).

    Raises ``ConfigError`` with one readable line per problem, unknown
    variables first, then in the order of the environment table.
    """
    known, unknown, twice = _names(os.environ if environ is None else environ)
    settings, found = _validated(known)
    problems = sorted(unknown) + [line for _, line in sorted(twice + found)]
    if problems or settings is None:
        raise ConfigError(problems)
    cross = _cross_field_problems(settings, local_pack=local_pack)
    if cross:
        raise ConfigError(cross)
    return settings


def _cross_field_problems(s: RunnerSettings, *, local_pack: bool = False) -> list[str]:
    """The chart's render-time guards, repeated so ``docker run`` users get them too.

    ``local_pack``: ``plan --pack-dir`` supplies a pack without a ref.
    """
    return [
        *_criteria_problems(s, local_pack=local_pack),
        *_run_problems(s),
        *_publish_problems(s),
        *_input_problems(s),
        *_snapshot_problems(s),
    ]


def _snapshot_problems(s: RunnerSettings) -> list[str]:
    """The snapshot agent's namespace: stated, and never the runner's own (aicr
    deletes the ServiceAccount ``aicr`` and its Role there when it is done)."""
    p, snap = ENV_PREFIX, s.snapshot
    if not snap.enabled:
        return []
    if not snap.namespace:
        return [
            f"{p}SNAPSHOT__NAMESPACE='': name the namespace of the snapshot agent (default aicr-validation); "
            "aicr creates it"
        ]
    if snap.namespace == s.namespace:
        return [
            f"{p}SNAPSHOT__NAMESPACE={snap.namespace!r} is the runner's own namespace ({p}NAMESPACE): aicr deletes "
            "the agent's ServiceAccount and Role there when it is done; use a namespace of its own"
        ]
    return []


def _criteria_problems(s: RunnerSettings, *, local_pack: bool) -> list[str]:
    """Criteria aicr would refuse or misread."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[str] = []
    numbers = release_numbers(s.aicr.version)
    if not s.aicr.binary and numbers is not None:
        # The release's tag says what aicr does with these values; a preinstalled
        # aicr is asked its version first (the fetch step words them for it).
        problems += version_guards(c.stated(), numbers, f"aicr {s.aicr.version}")
    concrete_service = c.service not in NON_CONCRETE_SERVICES
    if not c.accelerator and not (s.pack.ref or local_pack) and not (concrete_service and c.intent):
        problems.append(
            f"{p}CRITERIA__*: no criteria stated (service={c.service!r}, accelerator='', intent="
            f"{c.intent!r}, pack ref=''); set an accelerator, a pack ref, or a concrete service "
            "together with an intent (e.g. service=bcm, intent=inference)"
        )
    if c.intent and c.service in ("any", ""):
        problems.append(
            f"{p}CRITERIA__INTENT={c.intent!r} with {p}CRITERIA__SERVICE={c.service!r}: a stated "
            "intent needs a service whose overlays declare it (aks, eks, gke, k0s, oke, ...); "
            "name the service or leave the intent empty"
        )
    return problems


def _run_problems(s: RunnerSettings) -> list[str]:
    """What the run does: deploy, validate, or both."""
    p = ENV_PREFIX
    problems: list[str] = []
    v = s.validate
    if not s.deploy.enabled and not v.enabled:
        problems.append(
            f"{p}DEPLOY__ENABLED=false needs {p}VALIDATE__ENABLED=true: a run that neither deploys "
            "nor validates does nothing"
        )
    if v.enabled and not v.phases:
        problems.append(
            f"{p}VALIDATE__PHASES=[]: name at least one phase (deployment, performance, conformance); "
            "an empty list makes aicr run every phase, performance included"
        )
    return problems


def _publish_problems(s: RunnerSettings) -> list[str]:
    """Publishing the evidence needs a validation with evidence, a target and, signed, a token."""
    p = ENV_PREFIX
    problems: list[str] = []
    v = s.validate
    pub = v.publish
    if pub.enabled:
        if not v.enabled:
            problems.append(
                f"{p}VALIDATE__PUBLISH__ENABLED=true needs {p}VALIDATE__ENABLED=true: publishing "
                "needs a validation run to produce the evidence bundle"
            )
        if not v.emit_evidence:
            problems.append(
                f"{p}VALIDATE__PUBLISH__ENABLED=true needs {p}VALIDATE__EMIT_EVIDENCE=true: without "
                "--emit-attestation there is no bundle to publish"
            )
        if not pub.ref:
            problems.append(
                f"{p}VALIDATE__PUBLISH__REF='': publishing needs an OCI push target such as ghcr.io/org/aicr-evidence"
            )
        if pub.mode is PublishMode.SIGNED and not pub.identity_token_file:
            problems.append(
                f"{p}VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE='' with mode=signed: mount a short-lived "
                "OIDC token and give its path, or use mode=unsigned and sign later with "
                "'aicr evidence sign <pointer> --relocate'"
            )
    return problems


def _input_problems(s: RunnerSettings) -> list[str]:
    """Settings that need another one: the binary's hash, the pack's transport, k0s's aicr."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[str] = []
    if s.aicr.binary_sha256 and not s.aicr.binary:
        problems.append(
            f"{p}AICR__BINARY_SHA256 is set but {p}AICR__BINARY is empty: the hash pins a "
            "preinstalled binary; give its path or drop the hash"
        )
    transport = [
        f"{p}PACK__{name.upper()}"
        for name in ("plain_http", "insecure_tls", "credentials_file")
        if getattr(s.pack, name)
    ]
    if transport and not s.pack.ref:
        problems.append(
            f"{' and '.join(transport)} {'is' if len(transport) == 1 else 'are'} set but {p}PACK__REF is empty: "
            "pack transport settings need a pack"
        )
    if c.service == "k0s" and _version_tuple(s.aicr.version) < (0, 22, 0):
        problems.append(
            f"{p}CRITERIA__SERVICE='k0s' with {p}AICR__VERSION={s.aicr.version!r}: service k0s needs "
            "aicr v0.22.0 or later"
        )
    return problems


def _version_tuple(version: str) -> tuple[int, int, int]:
    major, minor, patch = re.split(r"[.+-]", version.lstrip("v"))[:3]
    return int(major), int(minor), int(patch)
