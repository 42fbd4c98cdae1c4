"""The settings model: every runtime input, typed, as a pydantic-settings tree.

Each field carries its check from ``settings.checks`` as a before-validator: the check
gets the raw value (a string from the environment, or a value given in code),
normalises it or raises ``settings.checks.Invalid``, whose reason ``settings.problems`` turns
into the one line a bad value gets. Groups are frozen and refuse unknown fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from aicr_runner.settings import names
from aicr_runner.settings.checks import (
    DEFAULT_RELEASE_BASE_URL,
    ENV_PREFIX,
    Arch,
    Phase,
    ProvenanceMode,
    PublishMode,
    ReportsApi,
    UnknownPolicy,
    _acknowledged_move,
    _arch,
    _argument,
    _boolean,
    _choice,
    _criterion,
    _flags,
    _host_arch,
    _integer,
    _issuer,
    _json_list,
    _k8s_name,
    _k8s_subdomain,
    _node_selector,
    _oci_reference,
    _pack_reference,
    _plain_text,
    _seconds,
    _sha256_or_empty,
    _snapshot_image,
    _toleration,
    _url,
    _version,
    absolute_path,
)
from aicr_runner.settings.mirror_checks import mirror_chart_repository, mirror_registry

__all__ = [
    "AICR_RELEASE_IDENTITY",
    "GITHUB_ACTIONS_ISSUER",
    "AicrSettings",
    "BundleSettings",
    "Criteria",
    "DeploySettings",
    "EnvironmentSettings",
    "LeaseSettings",
    "PackSettings",
    "ProvenanceSettings",
    "PublishSettings",
    "RecipeExpectations",
    "RecipeSettings",
    "ReportsSettings",
    "Sha256Pins",
    "SnapshotSettings",
    "StepArgs",
    "UpgradeCheckSettings",
    "ValidateSettings",
]


def _v(check: Callable[[object], Any]) -> BeforeValidator:
    """``check`` on the raw value, before pydantic's own type validation."""
    return BeforeValidator(check)


class _Group(BaseModel):
    """A frozen group of settings; its variables are ``<GROUP>__<NAME>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Criteria(_Group):
    """Recipe criteria. Empty leaves the flag out."""

    service: Annotated[str, _v(_criterion)] = ""
    accelerator: Annotated[str, _v(_criterion)] = ""
    intent: Annotated[str, _v(_criterion)] = ""
    os: Annotated[str, _v(_criterion)] = ""
    platform: Annotated[str, _v(_criterion)] = ""

    #: The bash chart's flag order (docs/migration.md): service, accelerator, os, intent, platform.
    FLAG_ORDER: ClassVar[tuple[str, ...]] = names.CRITERIA_FLAG_ORDER

    def stated(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.FLAG_ORDER if getattr(self, name)}

    def summary(self) -> str:
        return ", ".join(f"{name}={getattr(self, name) or '-'}" for name in self.FLAG_ORDER)


class Sha256Pins(_Group):
    amd64: Annotated[str, _v(_sha256_or_empty)] = ""
    arm64: Annotated[str, _v(_sha256_or_empty)] = ""


#: Defaults from aicr's own install script (``cosign verify-blob-attestation`` of
#: ``aicr-attestation.sigstore.json``): the release workflow's OIDC issuer, and the
#: workflow identity, pinned here to the exact tag the runner downloads.
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
AICR_RELEASE_IDENTITY = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}"


class ProvenanceSettings(_Group):
    """How aicr's Sigstore provenance is verified before the binary runs."""

    mode: Annotated[ProvenanceMode, _v(_choice(ProvenanceMode))] = ProvenanceMode.REQUIRE
    #: Exact certificate identity (SAN URI); empty: NVIDIA's release workflow at
    #: the pinned tag. ``{version}`` is replaced by the pinned tag.
    identity: Annotated[str, _v(_plain_text)] = ""
    issuer: Annotated[str, _v(_issuer)] = GITHUB_ACTIONS_ISSUER
    #: A Sigstore trusted_root.json; empty: the public-good root shipped with the runner.
    trusted_root: Annotated[str, _v(absolute_path())] = ""


_MIRROR_HINT = (
    "serve the release mirror without a login inside the cluster, or give a preinstalled aicr "
    f"(chart aicrBinary.path, env {ENV_PREFIX}AICR__BINARY, plan --aicr-binary)"
)


class AicrSettings(_Group):
    version: Annotated[str, _v(_version)] = names.PINNED_AICR_VERSION
    arch: Annotated[Arch, _v(_arch)] = Field(default_factory=_host_arch)
    sha256: Sha256Pins = Field(default_factory=Sha256Pins)
    release_base_url: Annotated[str, _v(_url(("http", "https"), _MIRROR_HINT))] = DEFAULT_RELEASE_BASE_URL
    #: A preinstalled aicr to use instead of downloading one.
    binary: Annotated[str, _v(absolute_path())] = ""
    #: sha256 of ``binary``; when set the binary must match it.
    binary_sha256: Annotated[str, _v(_sha256_or_empty)] = ""
    download_attempts: Annotated[int, _v(_integer(1, 20))] = 5
    download_timeout_seconds: Annotated[float, _v(_seconds(3600))] = 60.0
    #: Upper bound on the whole download step, retries and back-off included.
    download_budget_seconds: Annotated[float, _v(_seconds(7200))] = 600.0
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


class PackSettings(_Group):
    #: OCI reference without scheme: host/repo:tag or host/repo@sha256:...
    ref: Annotated[str, _v(_pack_reference)] = ""
    #: Path to a dockerconfigjson file (a mounted Secret's config.json).
    credentials_file: Annotated[str, _v(absolute_path())] = ""
    plain_http: Annotated[bool, _v(_boolean)] = False
    insecure_tls: Annotated[bool, _v(_boolean)] = False
    #: Wall-clock bound on the whole pack pull, however slowly the registry answers.
    pull_budget_seconds: Annotated[float, _v(_seconds(7200))] = 600.0


class StepArgs(_Group):
    """A legacy whitespace-split flags string plus an argv list (list wins, last)."""

    flags: Annotated[str, _v(_flags)] = ""
    args: Annotated[list[str], _v(_json_list(_argument))] = Field(default_factory=list)


class RecipeExpectations(_Group):
    min_components: Annotated[int, _v(_integer(0, 100_000))] = 0
    components: Annotated[list[str], _v(_json_list(_plain_text))] = Field(default_factory=list)
    overlays: Annotated[list[str], _v(_json_list(_plain_text))] = Field(default_factory=list)

    @property
    def any_set(self) -> bool:
        return bool(self.min_components or self.components or self.overlays)


class RecipeSettings(StepArgs):
    configmap: Annotated[str, _v(_k8s_name())] = "aicr-recipe"
    expect: RecipeExpectations = Field(default_factory=RecipeExpectations)


class BundleSettings(StepArgs):
    storage_class: Annotated[str, _v(_k8s_subdomain())] = ""


class DeploySettings(StepArgs):
    flags: Annotated[str, _v(_flags)] = "--best-effort --no-wait"
    enabled: Annotated[bool, _v(_boolean)] = True
    #: A run whose deploy.sh reported failed components fails (exit 1) even under --best-effort.
    fail_on_component_failure: Annotated[bool, _v(_boolean)] = False

    @property
    def best_effort(self) -> bool:
        """``--best-effort`` in either the flags string or the args list (the bash chart's
        deploy gate reads it from both; docs/migration.md)."""
        return "--best-effort" in self.flags.split() or "--best-effort" in self.args


class EnvironmentSettings(_Group):
    preinstalled_driver: Annotated[bool, _v(_boolean)] = False


class PublishSettings(_Group):
    enabled: Annotated[bool, _v(_boolean)] = False
    mode: Annotated[PublishMode, _v(_choice(PublishMode))] = PublishMode.SIGNED
    ref: Annotated[str, _v(_oci_reference)] = ""
    fail_on_error: Annotated[bool, _v(_boolean)] = False
    insecure_tls: Annotated[bool, _v(_boolean)] = False
    plain_http: Annotated[bool, _v(_boolean)] = False
    #: Directory holding a dockerconfigjson ``config.json`` (becomes DOCKER_CONFIG
    #: for the publish call only).
    registry_config_dir: Annotated[str, _v(absolute_path())] = ""
    #: File holding the short-lived OIDC token for signed mode; read at publish time.
    identity_token_file: Annotated[str, _v(absolute_path())] = ""


class ValidateSettings(StepArgs):
    enabled: Annotated[bool, _v(_boolean)] = False
    phases: Annotated[list[Phase], _v(_json_list(_choice(Phase)))] = Field(default_factory=lambda: [Phase.DEPLOYMENT])
    fail_on_error: Annotated[bool, _v(_boolean)] = False
    emit_evidence: Annotated[bool, _v(_boolean)] = False
    result_configmap: Annotated[str, _v(_k8s_name())] = "aicr-validate-result"
    evidence_configmap: Annotated[str, _v(_k8s_name())] = "aicr-evidence-bundle"
    #: Verdicts the history (``<result_configmap>-history``) keeps.
    history_limit: Annotated[int, _v(_integer(1, 100))] = 20
    publish: PublishSettings = Field(default_factory=PublishSettings)


class SnapshotSettings(_Group):
    """``aicr snapshot`` before deploy and before each re-validation (``steps.snapshot``)."""

    enabled: Annotated[bool, _v(_boolean)] = False
    #: The agent image (``--image``); empty: aicr's own, ``ghcr.io/nvidia/aicr:v<aicr.version>``.
    image: Annotated[str, _v(_snapshot_image)] = ""
    #: ``--privileged``: host namespaces and mounts, so the node's OS release and systemd units are read.
    privileged: Annotated[bool, _v(_boolean)] = True
    #: ``--node-selector key=value``, one per entry; none: the agent lands on any node.
    node_selector: Annotated[list[str], _v(_json_list(_node_selector))] = Field(default_factory=list)
    #: ``--toleration key=value:Effect``; any entry replaces aicr's default (tolerate all).
    tolerations: Annotated[list[str], _v(_json_list(_toleration))] = Field(default_factory=list)
    #: ``--timeout``: how long aicr waits for the agent Job.
    timeout_seconds: Annotated[int, _v(_integer(10, 3600))] = 300
    #: Where the agent runs and writes its ConfigMap (never the runner's own namespace: aicr
    #: deletes the ServiceAccount ``aicr`` and its Role there when it is done).
    namespace: Annotated[str, _v(_k8s_name(63))] = "aicr-validation"
    #: The runner's copy of this snapshot and the previous one, in the runner's namespace; empty: not kept.
    configmap: Annotated[str, _v(_k8s_name())] = "aicr-cluster-snapshot"

    def agent_image(self, aicr_version: str) -> str:
        return self.image or f"ghcr.io/nvidia/aicr:v{aicr_version.removeprefix('v')}"


class MirrorSettings(_Group):
    """Where the component charts come from when a site mirrors them (``aicr-runner mirror``, docs/air-gap.md)."""

    #: Registry (``host[:port][/prefix]``) holding the mirrored charts: the recipe's chart sources are
    #: rewritten to ``oci://<registry>/<source host>/<source path>`` before ``aicr bundle``. Empty: no rewrite.
    registry: Annotated[str, _v(mirror_registry)] = ""
    #: An HTTP(S) chart repository serving the charts the recipe takes from chart repositories
    #: (instead of ``registry``); empty: they are OCI charts in ``registry`` too.
    chart_repository: Annotated[str, _v(mirror_chart_repository)] = ""


class UpgradeCheckSettings(_Group):
    """``aicr upgrade-check`` before the deploy of an install that crosses an aicr pin (``steps.upgrade``)."""

    #: Manual moves the user has done by hand: ``<component>:<from>:<to>``, matched exactly.
    acknowledge: Annotated[list[str], _v(_json_list(_acknowledged_move))] = Field(default_factory=list)
    #: A component aicr cannot judge (unknown, unversioned): stop the install, or warn and go on.
    on_unknown: Annotated[UnknownPolicy, _v(_choice(UnknownPolicy))] = UnknownPolicy.STOP
    #: An aicr without ``upgrade-check`` (0.x): a crossing it cannot assess stops the install.
    require_assessment: Annotated[bool, _v(_boolean)] = False

    def acknowledged(self, component: str, source: str, target: str) -> bool:
        return f"{component}:{source}:{target}" in self.acknowledge


class LeaseSettings(_Group):
    """The install Lease: one installer at a time per chart release."""

    #: Lease name in the namespace; empty runs without a Lease (local runs). The
    #: chart derives it from the release name, which may hold dots.
    name: Annotated[str, _v(_k8s_subdomain())] = ""
    #: This pod's name and its Job's name: together the holder identity. A failed
    #: run also reads its Job's labels to find the Flux HelmRelease that rendered it.
    pod_name: Annotated[str, _v(_k8s_subdomain())] = ""
    job_name: Annotated[str, _v(_k8s_subdomain(63))] = ""
    #: A holder that stops renewing loses the Lease after this long.
    duration_seconds: Annotated[int, _v(_integer(5, 3600))] = 60
    #: How long a run waits for another run's Lease before it gives up (exit 31).
    wait_seconds: Annotated[float, _v(_seconds(86400, zero=True))] = 7200.0

    @property
    def pod_identity(self) -> str:
        """``job/pod`` (either part alone when the other is unknown); empty outside a pod."""
        return "/".join(part for part in (self.job_name, self.pod_name) if part)

    @property
    def holder(self) -> str:
        return self.pod_identity or "aicr-runner"


class ReportsSettings(_Group):
    """The verdict as an OpenReports Report or a wgpolicyk8s PolicyReport (``kube.report_writer``)."""

    api: Annotated[ReportsApi, _v(_choice(ReportsApi))] = ReportsApi.AUTO
    #: One name per release (the chart: ``aicr-<release>``), replaced in place each run.
    name: Annotated[str, _v(_k8s_subdomain())] = "aicr"
    #: The chart release, as the report's ``aicr.nvidia.com/release`` label; empty: no label.
    release: Annotated[str, _v(_k8s_subdomain(63))] = ""
