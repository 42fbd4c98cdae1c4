"""The settings groups of the install's inputs (criteria, aicr, pack, the steps' arguments),
and ``setting``: the one definition of a setting (default, description, chart value, where
the chart renders it). ``settings.model`` holds the other groups and the root.

Each field carries its check from ``settings.checks`` as a before-validator: the check
gets the raw value (a string from the environment, or a value given in code),
normalises it or raises ``settings.checks.Invalid``, whose reason ``settings.problems`` turns
into the one line a bad value gets. Groups are frozen and refuse unknown fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
)

from aicr_runner.settings import checks, names
from aicr_runner.settings.checks import (
    DEFAULT_RELEASE_BASE_URL,
    ENV_PREFIX,
    Arch,
    ProvenanceMode,
    absolute_path,
)

__all__ = [
    "AICR_RELEASE_IDENTITY",
    "GITHUB_ACTIONS_ISSUER",
    "AicrSettings",
    "BundleSettings",
    "Criteria",
    "DeploySettings",
    "EnvironmentSettings",
    "Group",
    "Into",
    "PackSettings",
    "ProvenanceSettings",
    "RecipeExpectations",
    "RecipeSettings",
    "Seconds",
    "SecondsOrZero",
    "Sha256Pins",
    "StepArgs",
    "WholeNumber",
    "checked",
    "items_as_one",
    "setting",
]


#: Where the chart puts a setting: the Job's pod template (``pod``: part of the install's
#: identity, a change renames the Job) or the runner-settings ConfigMap (``configmap``:
#: may change without a new Job). Neither: the pod template sets it by hand (a
#: ``valueFrom``) or the chart does not set it.
Into = Literal["pod", "configmap"]


def setting(
    default: Any = ...,
    *,
    doc: str,
    chart: str | None = None,
    into: Into | None = None,
    render: str | None = None,
    **field: Any,
) -> Any:
    """A setting's one definition: its default, its description (the environment table in
    docs/configuration.md), its chart value (``chart``: a dotted values path; ``plan --values``
    maps it unless it is cluster-only) and where the chart renders it (``into``), by default
    from its value and type (``render``: a template expression instead).
    ``scripts/gen-settings.py`` writes the environment table and the chart's env map
    (``chart/templates/_env.tpl``) from these; ``default`` left out (``...``): the field has
    none or a ``default_factory``; ``**field``: ``Field``'s own arguments."""
    facts = (("chart", chart), ("into", into), ("render", render))
    extra: dict[str, Any] = {key: value for key, value in facts if value}
    return Field(default, description=doc, json_schema_extra=extra or None, **field)


def checked(check: Callable[[object], Any]) -> BeforeValidator:
    """``check`` on the raw value, before pydantic's own type validation."""
    return BeforeValidator(check)


def items_as_one(value: object, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list's validation, an item's error raised on the whole list (``checks.ItemRefused``):
    its message shows the list as given, from the environment or from code alike."""
    try:
        return handler(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        context = dict(error.get("ctx") or {})
        if isinstance(context.get("error"), checks.Invalid):
            raise context["error"] from None
        item = next((part for part in error["loc"] if isinstance(part, int)), None)
        raise checks.ItemRefused(error["type"], context, item) from None


#: Numbers: read from plain decimal text by the check, bounded by the field's ``ge``/``le``
#: (``setting(..., ge=1, le=20)``), what they allow worded by ``settings.problems``.
WholeNumber = Annotated[int, checked(checks.whole_number)]
Seconds = Annotated[float, checked(checks.decimal_seconds)]
#: Seconds with ``ge=0``: 0 turns it off; otherwise at least ``MIN_SECONDS``.
SecondsOrZero = Annotated[float, checked(checks.decimal_seconds), AfterValidator(checks.zero_or_measurable)]


class Group(BaseModel):
    """A frozen group of settings; its variables are ``<GROUP>__<NAME>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Criteria(Group):
    """Recipe criteria. Empty leaves the flag out."""

    service: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc=(
            "recipe `--service` (aks, eks, gke, k0s, ..., a pack-registered value, or `any`); empty leaves the flag out"
        ),
        chart="service",
        into="pod",
    )
    accelerator: Annotated[str, checked(checks.criterion)] = setting(
        "", doc="recipe `--accelerator` (h100, h200, gb200, ...); `any` is refused", chart="accelerator", into="pod"
    )
    intent: Annotated[str, checked(checks.criterion)] = setting(
        "", doc="recipe `--intent` (training, inference); needs a concrete service", chart="intent", into="pod"
    )
    os: Annotated[str, checked(checks.criterion)] = setting(
        "", doc="recipe `--os` (ubuntu, rhel, rocky, cos, ...)", chart="os", into="pod"
    )
    platform: Annotated[str, checked(checks.criterion)] = setting(
        "", doc="recipe `--platform` (kubeflow, dynamo, nim, ...)", chart="platform", into="pod"
    )

    #: The bash chart's flag order (docs/migration.md): service, accelerator, os, intent, platform.
    FLAG_ORDER: ClassVar[tuple[str, ...]] = names.CRITERIA_FLAG_ORDER

    def stated(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.FLAG_ORDER if getattr(self, name)}

    def summary(self) -> str:
        return ", ".join(f"{name}={getattr(self, name) or '-'}" for name in self.FLAG_ORDER)


class Sha256Pins(Group):
    amd64: Annotated[str, checked(checks.sha256_or_empty)] = setting(
        "",
        doc="strict sha256 pin of the amd64 release tarball (the checksums file is verified regardless)",
        chart="aicrSha256.amd64",
        into="pod",
        render='{{ toString (default "" (default dict $v.aicrSha256).amd64) | quote }}',
    )
    arm64: Annotated[str, checked(checks.sha256_or_empty)] = setting(
        "",
        doc="strict sha256 pin of the arm64 release tarball; never inherits the amd64 pin",
        chart="aicrSha256.arm64",
        into="pod",
        render='{{ toString (default "" (default dict $v.aicrSha256).arm64) | quote }}',
    )


#: Defaults from aicr's own install script (``cosign verify-blob-attestation`` of
#: ``aicr-attestation.sigstore.json``): the release workflow's OIDC issuer, and the
#: workflow identity, pinned here to the exact tag the runner downloads.
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
AICR_RELEASE_IDENTITY = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}"


class ProvenanceSettings(Group):
    """How aicr's Sigstore provenance is verified before the binary runs."""

    mode: ProvenanceMode = setting(
        ProvenanceMode.REQUIRE,
        doc=(
            "aicr's Sigstore provenance: `require` (exit 29 unless it verifies), `warn` or `off`; a preinstalled "
            "binary without an attestation needs `warn` or `off`"
        ),
        chart="aicrProvenance.mode",
        into="pod",
    )
    #: Exact certificate identity (SAN URI); empty: NVIDIA's release workflow at
    #: the pinned tag. ``{version}`` is replaced by the pinned tag.
    identity: Annotated[str, checked(checks.plain_text)] = setting(
        "",
        doc=(
            "exact signer identity (certificate SAN); empty: "
            "`https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/<aicr version>`; `{version}` is "
            "replaced by the pinned tag"
        ),
        chart="aicrProvenance.identity",
        into="pod",
    )
    issuer: Annotated[str, checked(checks.issuer)] = setting(
        GITHUB_ACTIONS_ISSUER, doc="OIDC issuer of the signing certificate", chart="aicrProvenance.issuer", into="pod"
    )
    #: A Sigstore trusted_root.json; empty: the public-good root shipped with the runner.
    trusted_root: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="Sigstore `trusted_root.json` (private Sigstore or a refreshed root); empty: the shipped public-good root",
        chart="aicrProvenance.trustedRoot",
        into="pod",
    )


_MIRROR_HINT = (
    "serve the release mirror without a login inside the cluster, or give a preinstalled aicr "
    f"(chart aicrBinary.path, env {ENV_PREFIX}AICR__BINARY, plan --aicr-binary)"
)


class AicrSettings(Group):
    version: Annotated[str, checked(checks.version)] = setting(
        names.PINNED_AICR_VERSION,
        doc="pinned aicr release tag; the leading `v` is optional",
        chart="aicrVersion",
        into="pod",
    )
    arch: Annotated[Arch, checked(checks.arch)] = setting(
        default_factory=checks.host_arch,
        doc="release architecture, `amd64` or `arm64`; empty or unset: this machine's",
        chart="aicrArch",
        into="pod",
    )
    sha256: Sha256Pins = Field(default_factory=Sha256Pins)
    release_base_url: Annotated[str, checked(checks.url(("http", "https"), _MIRROR_HINT))] = setting(
        DEFAULT_RELEASE_BASE_URL,
        doc=(
            "where releases are served: `<base>/<tag>/aicr_<ver>_linux_<arch>.tar.gz` (a mirror for air-gapped "
            "clusters); http(s), no user or password in it"
        ),
        chart="aicrReleaseBaseUrl",
        into="pod",
    )
    #: The release as the OCI artifact ``aicr-runner mirror --to`` pushes (``aicr.release_oci``),
    #: reached with the pack's registry settings; empty: the HTTP folder of ``release_base_url``.
    release_ref: Annotated[str, checked(checks.pack_reference)] = setting(
        "",
        doc=(
            "the release as an OCI artifact, without scheme (`host/prefix/nvidia/aicr/release:<tag>`, an `@sha256:` "
            "digest is then enforced; `aicr-runner mirror --to` pushes it), reached with the pack's registry "
            "settings (credentials file, plain HTTP, TLS); empty: the HTTP folder of the release base URL"
        ),
        chart="aicrReleaseRef",
        into="configmap",
    )
    #: A preinstalled aicr to use instead of downloading one.
    binary: Annotated[str, checked(absolute_path())] = setting(
        "", doc="use this preinstalled aicr instead of downloading one", chart="aicrBinary.path", into="pod"
    )
    #: sha256 of ``binary``; when set the binary must match it.
    binary_sha256: Annotated[str, checked(checks.sha256_or_empty)] = setting(
        "", doc="sha256 the preinstalled binary must match", chart="aicrBinary.sha256", into="pod"
    )
    download_attempts: WholeNumber = setting(
        5,
        ge=1,
        le=20,
        doc="download attempts for transient failures (timeouts, resets, 408/429/5xx)",
        chart="aicrDownload.attempts",
        into="configmap",
    )
    download_timeout_seconds: Seconds = setting(
        60.0,
        ge=checks.MIN_SECONDS,
        le=3600,
        doc="per-request timeout",
        chart="aicrDownload.timeoutSeconds",
        into="configmap",
    )
    #: Upper bound on the whole download step, retries and back-off included.
    download_budget_seconds: Seconds = setting(
        600.0,
        ge=checks.MIN_SECONDS,
        le=7200,
        doc=(
            "wall-clock bound on the whole download (retries, back-off, slow bodies, stalled TLS and redirects "
            "included; exit 20 past it)"
        ),
        chart="aicrDownload.budgetSeconds",
        into="configmap",
    )
    provenance: ProvenanceSettings = Field(default_factory=ProvenanceSettings)

    @property
    def pin(self) -> str:
        """The strict pin for the selected arch; never another arch's."""
        return str(getattr(self.sha256, self.arch.value))

    @property
    def expected_identity(self) -> str:
        """The signer identity aicr's provenance must carry."""
        template = self.provenance.identity or AICR_RELEASE_IDENTITY
        return template.replace("{version}", self.version)


class PackSettings(Group):
    #: OCI reference without scheme: host/repo:tag or host/repo@sha256:...
    ref: Annotated[str, checked(checks.pack_reference)] = setting(
        "",
        doc=(
            "OCI reference of the org data pack, without scheme (`host/repo:tag` or `@sha256:` digest, which is then "
            "enforced)"
        ),
        chart="dataPack",
        into="pod",
    )
    #: Path to a dockerconfigjson file (a mounted Secret's config.json).
    credentials_file: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="path of a dockerconfigjson file for the pack pull; the only credential the pull uses",
        into="pod",
        render=(
            '{{ ternary "/etc/aicr-runner/pack-auth/config.json" "" (ne (include "nvidia-aicr.packSecretName" .) "") '
            "| quote }}"
        ),
    )
    plain_http: bool = setting(
        False, doc="pull the pack over plain HTTP (lab registries)", chart="dataPackPlainHTTP", into="pod"
    )
    insecure_tls: bool = setting(
        False,
        doc="skip TLS verification for the pack registry (lab registries)",
        chart="dataPackInsecureTLS",
        into="pod",
    )
    #: Wall-clock bound on the whole pack pull, however slowly the registry answers.
    pull_budget_seconds: Seconds = setting(
        600.0,
        ge=checks.MIN_SECONDS,
        le=7200,
        doc="wall-clock bound on the whole pack pull, however slowly the registry answers (exit 22 past it)",
        chart="dataPackPullBudgetSeconds",
        into="configmap",
    )


class StepArgs(Group):
    """A legacy whitespace-split flags string plus an argv list (list wins, last)."""

    flags: Annotated[str, checked(checks.flags)] = ""
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = Field(default_factory=list)


class RecipeExpectations(Group):
    min_components: WholeNumber = setting(
        0,
        ge=0,
        le=100_000,
        doc="stop before bundle when fewer components resolve (0: no check)",
        chart="recipe.expect.minComponents",
        into="pod",
    )
    components: Annotated[list[str], checked(checks.json_list(checks.plain_text))] = setting(
        default_factory=list,
        doc="JSON array of component names that must resolve",
        chart="recipe.expect.components",
        into="pod",
    )
    overlays: Annotated[list[str], checked(checks.json_list(checks.plain_text))] = setting(
        default_factory=list,
        doc="JSON array of overlay names that must be applied",
        chart="recipe.expect.overlays",
        into="pod",
    )

    @property
    def any_set(self) -> bool:
        return bool(self.min_components or self.components or self.overlays)


class RecipeSettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "",
        doc="legacy extra `aicr recipe` flags, split on whitespace only (no quotes, no globs)",
        chart="recipeFlags",
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `aicr recipe` arguments as a JSON array, one argv entry each, after the flags",
        chart="recipeArgs",
        into="pod",
    )
    configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-recipe",
        doc="ConfigMap for `summary.txt` and `recipe.yaml`; empty turns the capture off",
        chart="recipeConfigMap",
        into="pod",
    )
    expect: RecipeExpectations = Field(default_factory=RecipeExpectations)


class BundleSettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "", doc="legacy extra `aicr bundle` flags, split on whitespace only", chart="bundleFlags", into="pod"
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `aicr bundle` arguments (JSON array), after the flags and the driver profile",
        chart="bundleArgs",
        into="pod",
    )
    storage_class: Annotated[str, checked(checks.k8s_subdomain())] = setting(
        "", doc="`aicr bundle --storage-class`", chart="storageClass", into="pod"
    )


class DeploySettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "--best-effort --no-wait",
        doc="legacy `deploy.sh` flags, split on whitespace only",
        chart="deployFlags",
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `deploy.sh` arguments (JSON array), after the flags",
        chart="deployArgs",
        into="pod",
    )
    enabled: bool = setting(
        True, doc="`false` gives an assert-only run: no bundle, verify or deploy", chart="deploy.enabled", into="pod"
    )
    #: A run whose deploy.sh reported failed components fails (exit 1) even under --best-effort.
    fail_on_component_failure: bool = setting(
        False,
        doc=(
            "fail the run (exit 1, after validation and capture) when deploy.sh reported failed components; `false`: "
            "such a run exits 0 with phase `SucceededWithFailures`"
        ),
        chart="deploy.failOnComponentFailure",
        into="configmap",
    )

    @property
    def best_effort(self) -> bool:
        """``--best-effort`` in either the flags string or the args list (the bash chart's
        deploy gate reads it from both; docs/migration.md)."""
        return "--best-effort" in self.flags.split() or "--best-effort" in self.args


class EnvironmentSettings(Group):
    preinstalled_driver: bool = setting(
        False,
        doc="nodes have a host driver: adds the three driver-ownership `--set` overrides before user flags",
        chart="environment.preinstalledDriver",
        into="pod",
    )
