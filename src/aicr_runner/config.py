"""The environment contract: every runtime input, typed, in one settings model.

Variables use the prefix ``AICR_RUNNER_``; nested groups are joined with ``__``
(``AICR_RUNNER_VALIDATE__PUBLISH__MODE``); list values are JSON arrays. An empty
string is a value, not "unset" (an empty ConfigMap name turns that capture off, as
in the chart this replaces).

Errors from pydantic-settings come in two types and name field paths; ``load``
turns both into one readable line per problem that names the environment variable,
the bad value and what is allowed.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Mapping
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.exceptions import SettingsError
from pydantic_settings.sources.utils import parse_env_vars

from aicr_runner import names
from aicr_runner.errors import ConfigError
from aicr_runner.reference import PackReference

__all__ = [
    "ENV_PREFIX",
    "AicrSettings",
    "Arch",
    "Criteria",
    "LeaseSettings",
    "LogFormat",
    "Phase",
    "ProvenanceMode",
    "ProvenanceSettings",
    "PublishMode",
    "PublishSettings",
    "RunnerSettings",
    "env_var_names",
    "load",
]

ENV_PREFIX = names.ENV_PREFIX
DEFAULT_RELEASE_BASE_URL = "https://github.com/NVIDIA/aicr/releases/download"

#: Service values aicr silently maps to ``generic``, which resolves nothing for
#: most accelerators (anchor pain point 3).
SERVICE_ALIASES = ("self-managed", "self", "vanilla")
#: Service values that state no concrete service.
NON_CONCRETE_SERVICES = ("", "any", *SERVICE_ALIASES)

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")


class Arch(StrEnum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class Phase(StrEnum):
    DEPLOYMENT = "deployment"
    PERFORMANCE = "performance"
    CONFORMANCE = "conformance"


class PublishMode(StrEnum):
    SIGNED = "signed"
    UNSIGNED = "unsigned"


class ProvenanceMode(StrEnum):
    #: Fail closed (exit 29) unless aicr's provenance verifies.
    REQUIRE = "require"
    #: Verify and report, but run aicr even when verification fails.
    WARN = "warn"
    #: Do not verify.
    OFF = "off"


class LogFormat(StrEnum):
    CONSOLE = "console"
    JSON = "json"


def _sha256_or_empty(value: str) -> str:
    value = value.strip().lower()
    if value and not _SHA256.match(value):
        raise ValueError("must be empty or 64 lowercase hex characters (a sha256 digest)")
    return value


def _host_arch() -> Arch:
    machine = platform.machine().lower()
    return Arch.ARM64 if machine in ("arm64", "aarch64") else Arch.AMD64


def _check_k8s_name(value: str) -> str:
    if value and (len(value) > 253 or not _K8S_NAME.match(value)):
        raise ValueError(
            "must be empty or a Kubernetes object name (lowercase letters, digits and '-', at most 253 characters)"
        )
    return value


ConfigMapName = Annotated[str, Field(max_length=253)]


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Criteria(_Group):
    """Recipe criteria. Empty leaves the flag out; values pass through verbatim."""

    service: str = ""
    accelerator: str = ""
    intent: str = ""
    os: str = ""
    platform: str = ""

    #: The anchor's flag order (R-07): service, accelerator, os, intent, platform.
    FLAG_ORDER: ClassVar[tuple[str, ...]] = names.CRITERIA_FLAG_ORDER

    def stated(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.FLAG_ORDER if getattr(self, name)}

    def summary(self) -> str:
        return ", ".join(f"{name}={getattr(self, name) or '-'}" for name in self.FLAG_ORDER)


class Sha256Pins(_Group):
    amd64: str = ""
    arm64: str = ""

    @field_validator("amd64", "arm64")
    @classmethod
    def _hex(cls, value: str) -> str:
        return _sha256_or_empty(value)


#: Defaults from aicr's own install script (``cosign verify-blob-attestation`` of
#: ``aicr-attestation.sigstore.json``): the release workflow's OIDC issuer, and the
#: workflow identity, pinned here to the exact tag the runner downloads.
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
AICR_RELEASE_IDENTITY = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}"


class ProvenanceSettings(_Group):
    """How aicr's Sigstore provenance is verified before the binary runs."""

    mode: ProvenanceMode = ProvenanceMode.REQUIRE
    #: Exact certificate identity (SAN URI); empty: NVIDIA's release workflow at
    #: the pinned tag. ``{version}`` is replaced by the pinned tag.
    identity: str = ""
    issuer: str = GITHUB_ACTIONS_ISSUER
    #: A Sigstore trusted_root.json; empty: the public-good root shipped with the runner.
    trusted_root: str = ""

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        if not re.match(r"^https://[^/\s]+", value):
            raise ValueError("must be an https:// OIDC issuer URL, e.g. https://token.actions.githubusercontent.com")
        return value


class AicrSettings(_Group):
    version: str = names.PINNED_AICR_VERSION
    arch: Arch = Field(default_factory=_host_arch)
    sha256: Sha256Pins = Sha256Pins()
    release_base_url: str = DEFAULT_RELEASE_BASE_URL
    #: A preinstalled aicr to use instead of downloading one.
    binary: str = ""
    #: sha256 of ``binary``; when set the binary must match it.
    binary_sha256: str = ""
    download_attempts: int = Field(default=5, ge=1, le=20)
    download_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    #: Upper bound on the whole download step, retries and back-off included.
    download_budget_seconds: float = Field(default=600.0, gt=0, le=7200)
    provenance: ProvenanceSettings = ProvenanceSettings()

    @field_validator("arch", mode="before")
    @classmethod
    def _arch(cls, value: object) -> object:
        # The chart renders "" by default: the node's architecture, detected here.
        return _host_arch() if value == "" else value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError("must be a release tag such as v1.2.0 (the leading 'v' is optional)")
        return value if value.startswith("v") else f"v{value}"

    @field_validator("release_base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("binary_sha256")
    @classmethod
    def _binary_hex(cls, value: str) -> str:
        return _sha256_or_empty(value)

    @property
    def pin(self) -> str:
        """The strict pin for the selected arch; never another arch's."""
        return str(getattr(self.sha256, self.arch.value))

    @property
    def expected_identity(self) -> str:
        """The signer identity aicr's provenance must carry."""
        template = self.provenance.identity or AICR_RELEASE_IDENTITY
        return template.replace("{version}", self.version)


class PackSettings(_Group):
    #: OCI reference without scheme: host/repo:tag or host/repo@sha256:...
    ref: str = ""
    #: Path to a dockerconfigjson file (a mounted Secret's config.json).
    credentials_file: str = ""
    plain_http: bool = False
    insecure_tls: bool = False
    #: Wall-clock bound on the whole pack pull, however slowly the registry answers.
    pull_budget_seconds: float = Field(default=600.0, gt=0, le=7200)

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str) -> str:
        if value:
            PackReference.parse(value)  # InvalidReference is a ValueError: one readable line
        return value


class StepArgs(_Group):
    """A legacy whitespace-split flags string plus an argv list (list wins, last)."""

    flags: str = ""
    args: list[str] = Field(default_factory=list)


class RecipeExpectations(_Group):
    min_components: int = Field(default=0, ge=0)
    components: list[str] = Field(default_factory=list)
    overlays: list[str] = Field(default_factory=list)

    @property
    def any_set(self) -> bool:
        return bool(self.min_components or self.components or self.overlays)


class RecipeSettings(StepArgs):
    configmap: ConfigMapName = "aicr-recipe"
    expect: RecipeExpectations = RecipeExpectations()

    _name = field_validator("configmap")(classmethod(lambda cls, v: _check_k8s_name(v)))


class BundleSettings(StepArgs):
    storage_class: str = ""


class DeploySettings(StepArgs):
    enabled: bool = True
    flags: str = "--best-effort --no-wait"
    #: A run whose deploy.sh reported failed components fails (exit 1) even under --best-effort.
    fail_on_component_failure: bool = False

    @property
    def best_effort(self) -> bool:
        """``--best-effort`` in either the flags string or the args list (anchor R-14)."""
        return "--best-effort" in self.flags.split() or "--best-effort" in self.args


class EnvironmentSettings(_Group):
    preinstalled_driver: bool = False


class PublishSettings(_Group):
    enabled: bool = False
    mode: PublishMode = PublishMode.SIGNED
    ref: str = ""
    fail_on_error: bool = False
    insecure_tls: bool = False
    plain_http: bool = False
    #: Directory holding a dockerconfigjson ``config.json`` (becomes DOCKER_CONFIG
    #: for the publish call only).
    registry_config_dir: str = ""
    #: File holding the short-lived OIDC token for signed mode; read at publish time.
    identity_token_file: str = ""


class ValidateSettings(StepArgs):
    enabled: bool = False
    phases: list[Phase] = Field(default_factory=lambda: [Phase.DEPLOYMENT])
    fail_on_error: bool = False
    emit_evidence: bool = False
    result_configmap: ConfigMapName = "aicr-validate-result"
    evidence_configmap: ConfigMapName = "aicr-evidence-bundle"
    publish: PublishSettings = PublishSettings()

    _names = field_validator("result_configmap", "evidence_configmap")(classmethod(lambda cls, v: _check_k8s_name(v)))


class LeaseSettings(_Group):
    """The install Lease: one installer at a time per chart release."""

    #: Lease name in the namespace; empty runs without a Lease (local runs).
    name: str = ""
    #: This pod's name and its Job's name: together the holder identity. A failed
    #: run also reads its Job's labels to find the Flux HelmRelease that rendered it.
    pod_name: str = ""
    job_name: str = ""
    #: A holder that stops renewing loses the Lease after this long.
    duration_seconds: int = Field(default=60, ge=5, le=3600)
    #: How long a run waits for another run's Lease before it gives up (exit 31).
    wait_seconds: float = Field(default=7200.0, ge=0, le=86400)

    _name = field_validator("name")(classmethod(lambda cls, v: _check_k8s_name(v)))

    @property
    def holder(self) -> str:
        return "/".join(part for part in (self.job_name, self.pod_name) if part) or "aicr-runner"


_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("aicr_runner_environ", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """Reads the mapping given to ``load`` instead of the process environment."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = _ENVIRON.get()
        if environ is None:
            return super()._load_env_vars()
        return parse_env_vars(environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class RunnerSettings(BaseSettings):
    """Every runtime input. Field docs are the README's environment table."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    criteria: Criteria = Criteria()
    pack: PackSettings = PackSettings()
    aicr: AicrSettings = AicrSettings()
    recipe: RecipeSettings = RecipeSettings()
    bundle: BundleSettings = BundleSettings()
    deploy: DeploySettings = DeploySettings()
    environment: EnvironmentSettings = EnvironmentSettings()
    lease: LeaseSettings = LeaseSettings()
    # ``validate`` shadows a BaseModel method, so the field carries the full env name as alias.
    validate_: ValidateSettings = Field(default=ValidateSettings(), alias="aicr_runner_validate")
    status_configmap: ConfigMapName = "aicr-run-status"
    namespace: str = ""
    work_dir: str = "/tmp/aicr-runner"  # noqa: S108 - the pod mounts an emptyDir there
    log_format: LogFormat = LogFormat.CONSOLE
    termination_message_path: str = "/dev/termination-log"
    #: How long a running child (helm inside deploy.sh) may finish after SIGTERM.
    shutdown_grace_seconds: float = Field(default=60.0, ge=0, le=3600)
    #: How long one Kubernetes API write may keep retrying (429, 5xx, connection errors).
    kube_write_budget_seconds: float = Field(default=120.0, gt=0, le=3600)

    _names = field_validator("status_configmap")(classmethod(lambda cls, v: _check_k8s_name(v)))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No dotenv or secrets_dir: in a pod, only what the chart renders counts.
        return (init_settings, _MappingEnvSource(settings_cls))

    @property
    def validate(self) -> ValidateSettings:  # type: ignore[override]
        return self.validate_

    @property
    def work_path(self) -> Path:
        return Path(self.work_dir)


def _cross_field_problems(s: RunnerSettings, *, local_pack: bool = False) -> list[str]:
    """The chart's render-time guards, repeated so ``docker run`` users get them too.

    ``local_pack``: ``plan --pack-dir`` supplies a pack without a ref.
    """
    return [
        *_criteria_problems(s, local_pack=local_pack),
        *_run_problems(s),
        *_publish_problems(s),
        *_input_problems(s),
    ]


def _criteria_problems(s: RunnerSettings, *, local_pack: bool) -> list[str]:
    """Criteria aicr would refuse or misread."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[str] = []
    if c.accelerator == "any":
        problems.append(
            f"{p}CRITERIA__ACCELERATOR='any': 'any' is not an accelerator (aicr answers "
            "'no criteria provided'); leave it empty or name a real accelerator such as h100"
        )
    concrete_service = c.service not in NON_CONCRETE_SERVICES
    if not c.accelerator and not (s.pack.ref or local_pack) and not (concrete_service and c.intent):
        problems.append(
            f"{p}CRITERIA__*: no criteria stated (service={c.service!r}, accelerator='', intent="
            f"{c.intent!r}, pack ref=''); set an accelerator, a pack ref, or a concrete service "
            "together with an intent (e.g. service=bcm, intent=inference)"
        )
    if c.service in SERVICE_ALIASES:
        problems.append(
            f"{p}CRITERIA__SERVICE={c.service!r}: aicr maps this alias to 'generic', which has no "
            "recipe for most accelerators; use 'any' or name the service (eks, gke, k0s, ...)"
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
    if (s.pack.plain_http or s.pack.insecure_tls or s.pack.credentials_file) and not s.pack.ref:
        problems.append(
            f"{p}PACK__PLAIN_HTTP/INSECURE_TLS/CREDENTIALS_FILE are set but {p}PACK__REF is empty: "
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


def _env_name(loc: tuple[int | str, ...]) -> str:
    parts = [str(part) for part in loc if not isinstance(part, int)]
    parts = ["validate" if part in ("validate_", f"{ENV_PREFIX}VALIDATE".lower()) else part for part in parts]
    return ENV_PREFIX + "__".join(parts).upper()


def _allowed(error: Mapping[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    if "expected" in ctx:
        return f"allowed: {ctx['expected']}"
    kind = str(error.get("type", ""))
    if kind.startswith("bool"):
        return "allowed: true or false"
    if kind.startswith(("int", "float")):
        return "allowed: a number"
    msg = str(error.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def _format_validation_error(exc: ValidationError, environ: Mapping[str, str]) -> list[str]:
    lines = []
    lowered = {k.upper(): v for k, v in environ.items()}
    for error in exc.errors(include_url=False):
        loc = tuple(error.get("loc", ()))
        if error.get("type") == "extra_forbidden":
            lines.append(f"{_env_name(loc)}: unknown setting; see README 'Environment' for the names")
            continue
        name = _env_name(loc)
        raw = lowered.get(name, error.get("input"))
        index = next((part for part in loc if isinstance(part, int)), None)
        where = f" (item {index})" if index is not None else ""
        lines.append(f"{name}={json.dumps(raw) if not isinstance(raw, str) else repr(raw)}{where}: {_allowed(error)}")
    return lines


def _format_settings_error(exc: SettingsError, environ: Mapping[str, str]) -> list[str]:
    match = re.search(r'field "([^"]+)"', str(exc))
    field = match.group(1) if match else ""
    candidates = [k for k in environ if k.upper().startswith(ENV_PREFIX) and field.upper() in k.upper()]
    name = candidates[0] if candidates else ENV_PREFIX + field.upper()
    raw = environ.get(name, "")
    return [f'{name.upper()}={raw!r}: not valid JSON; list values are JSON arrays, e.g. \'["--nodes", "4"]\'']


def load(environ: Mapping[str, str] | None = None, *, local_pack: bool = False, **overrides: Any) -> RunnerSettings:
    """Read settings from ``environ`` (default ``os.environ``) plus explicit overrides.

    Raises ``ConfigError`` with one readable line per problem.
    """
    env = dict(os.environ if environ is None else environ)
    unknown = sorted(k for k in env if k.upper().startswith(ENV_PREFIX) and k.upper() not in set(env_var_names()))
    problems = [f"{k}: unknown setting; see README 'Environment' for the names" for k in unknown]
    settings: RunnerSettings | None = None
    token = _ENVIRON.set({k: v for k, v in env.items() if k.upper().startswith(ENV_PREFIX) and k not in unknown})
    try:
        settings = RunnerSettings(**overrides)
    except ValidationError as exc:
        problems.extend(_format_validation_error(exc, env))
    except SettingsError as exc:
        problems.extend(_format_settings_error(exc, env))
    finally:
        _ENVIRON.reset(token)
    if settings is not None:
        problems.extend(_cross_field_problems(settings, local_pack=local_pack))
    if problems or settings is None:
        raise ConfigError(problems)
    return settings


def _leaf_names(model: type[BaseModel], prefix: str) -> list[str]:
    names: list[str] = []
    for field_name, info in model.model_fields.items():
        name = "validate" if field_name == "validate_" else field_name
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names.extend(_leaf_names(annotation, f"{prefix}{name.upper()}__"))
        else:
            names.append(f"{prefix}{name.upper()}")
    return names


def env_var_names() -> list[str]:
    """Every environment variable the runtime reads (the contract test uses this)."""
    return _leaf_names(RunnerSettings, ENV_PREFIX)
