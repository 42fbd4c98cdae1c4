"""The settings model: every runtime input, typed, as a pydantic-settings tree.

Each setting is defined once, by ``settings.groups.setting`` on its field (default,
description, bounds, chart value, where the chart renders it); ``leaves`` walks them
in the order of the environment table, for the generated files
(``scripts/gen-settings.py``) and the loader. Each field carries its check from
``settings.checks`` as a before-validator; ``settings.problems`` turns a check's
``Invalid``, or pydantic's own error, into the one line a bad value gets. Groups are
frozen and refuse unknown fields; the rules between settings are the root's
after-validator (``settings.rules``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, ValidationInfo, WrapValidator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aicr_runner.settings import checks, rules
from aicr_runner.settings.checks import (
    ENV_PREFIX,
    LogFormat,
    Phase,
    PublishMode,
    ReportsApi,
    UnknownPolicy,
    absolute_path,
)
from aicr_runner.settings.groups import (
    AICR_RELEASE_IDENTITY,
    GITHUB_ACTIONS_ISSUER,
    AicrSettings,
    BundleSettings,
    Criteria,
    DeploySettings,
    EnvironmentSettings,
    Group,
    PackSettings,
    ProvenanceSettings,
    RecipeExpectations,
    RecipeSettings,
    Seconds,
    SecondsOrZero,
    Sha256Pins,
    StepArgs,
    WholeNumber,
    checked,
    items_as_one,
    setting,
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
    "RunnerSettings",
    "Sha256Pins",
    "SnapshotSettings",
    "StepArgs",
    "UpgradeCheckSettings",
    "ValidateSettings",
    "chart_facts",
    "leaves",
]


class PublishSettings(Group):
    enabled: bool = setting(
        False, doc="push the evidence bundle with `aicr evidence publish`", chart="validate.publish.enabled", into="pod"
    )
    mode: PublishMode = setting(
        PublishMode.SIGNED,
        doc="`signed` (keyless, needs a token) or `unsigned` (`--no-sign`)",
        chart="validate.publish.mode",
        into="pod",
    )
    ref: Annotated[str, checked(checks.oci_reference)] = setting(
        "", doc="OCI push target for the evidence", chart="validate.publish.ref", into="pod"
    )
    fail_on_error: bool = setting(
        False, doc="a failed publish fails the Job", chart="validate.publish.failOnError", into="pod"
    )
    insecure_tls: bool = setting(
        False, doc="publish with `--insecure-tls`", chart="validate.publish.insecureTLS", into="pod"
    )
    plain_http: bool = setting(False, doc="publish with `--plain-http`", chart="validate.publish.plainHTTP", into="pod")
    #: Directory holding a dockerconfigjson ``config.json`` (becomes DOCKER_CONFIG
    #: for the publish call only).
    registry_config_dir: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="directory holding a dockerconfigjson `config.json`; `DOCKER_CONFIG` for the publish call only",
        into="pod",
        render=(
            '{{ ternary "/etc/aicr-runner/publish-auth" "" (eq (include "nvidia-aicr.publishAuthMounted" .) "true") '
            "| quote }}"
        ),
    )
    #: File holding the short-lived OIDC token for signed mode; read at publish time.
    identity_token_file: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="file holding the OIDC token for signed mode; read at publish time, given to the publish call only",
        into="pod",
        render=(
            '{{ ternary "/etc/aicr-runner/identity-token/token" "" (eq (include "nvidia-aicr.identityTokenMounted" '
            '.) "true") | quote }}'
        ),
    )


class ValidateSettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "", doc="legacy extra `aicr validate` flags, split on whitespace only", chart="validateFlags", into="pod"
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list, doc="extra `aicr validate` arguments (JSON array)", chart="validateArgs", into="pod"
    )
    enabled: bool = setting(
        False, doc="run `aicr validate` after the install (or alone, assert-only)", chart="validate.enabled", into="pod"
    )
    phases: Annotated[list[Phase], checked(checks.json_list(str)), WrapValidator(items_as_one)] = setting(
        default_factory=lambda: [Phase.DEPLOYMENT],
        doc="JSON array of phases: deployment, performance, conformance; never empty",
        chart="validate.phases",
        into="pod",
        render='{{ include "nvidia-aicr.phases" . | quote }}',
    )
    fail_on_error: bool = setting(
        False,
        doc=(
            "a failed validation fails the Job, and one that ran no check fails it with exit 32 (after the verdict "
            "is captured); `false`: the latter exits 0 with phase `SucceededInconclusive`"
        ),
        chart="validate.failOnError",
        into="pod",
    )
    emit_evidence: bool = setting(
        False, doc="`--emit-attestation`: build the evidence bundle", chart="validate.emitEvidence", into="pod"
    )
    result_configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-validate-result",
        doc="ConfigMap for the CTRF verdict (`ctrf.json`)",
        chart="validate.resultConfigMap",
        into="pod",
    )
    evidence_configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-evidence-bundle",
        doc="ConfigMap for `evidence.tgz` and `pointer.yaml`",
        chart="validate.evidenceConfigMap",
        into="pod",
    )
    #: Verdicts the history (``<result_configmap>-history``) keeps.
    history_limit: WholeNumber = setting(
        20,
        ge=1,
        le=100,
        doc="validations the verdict history (`<resultConfigMap>-history`) keeps",
        chart="validate.historyLimit",
        into="configmap",
    )
    publish: PublishSettings = Field(default_factory=PublishSettings)


class SnapshotSettings(Group):
    """``aicr snapshot`` before deploy and before each re-validation (``steps.snapshot``)."""

    enabled: bool = setting(
        False,
        doc=(
            "run `aicr snapshot` before deploy and before each re-validation, pass it to validate (`--snapshot "
            "cm://`), compare it with the previous one (docs/continuous-assurance.md, Snapshots); advisory"
        ),
        chart="snapshot.enabled",
        into="configmap",
    )
    #: The agent image (``--image``); empty: aicr's own, ``ghcr.io/nvidia/aicr:v<aicr.version>``.
    image: Annotated[str, checked(checks.snapshot_image)] = setting(
        "",
        doc="the snapshot agent's image (`--image`); empty: `ghcr.io/nvidia/aicr:v<AICR__VERSION>`",
        into="configmap",
        render='{{ include "nvidia-aicr.snapshotImage" . | quote }}',
    )
    #: ``--privileged``: host namespaces and mounts, so the node's OS release and systemd units are read.
    privileged: bool = setting(
        True,
        doc="`aicr snapshot --privileged`: the node's OS release and systemd units (true) or a restricted pod (false)",
        chart="snapshot.privileged",
        into="configmap",
    )
    #: ``--node-selector key=value``, one per entry; none: the agent lands on any node.
    node_selector: Annotated[list[str], checked(checks.json_list(checks.node_selector))] = setting(
        default_factory=list,
        doc="JSON list of `key=value` (`--node-selector` each); empty: any node",
        into="configmap",
        render='{{ include "nvidia-aicr.snapshotNodeSelector" . | quote }}',
    )
    #: ``--toleration key=value:Effect``; any entry replaces aicr's default (tolerate all).
    tolerations: Annotated[list[str], checked(checks.json_list(checks.toleration))] = setting(
        default_factory=list,
        doc="JSON list of `key=value:Effect` or `key:Effect` (`--toleration` each); empty: aicr's tolerate-all",
        into="configmap",
        render='{{ include "nvidia-aicr.snapshotTolerations" . | quote }}',
    )
    #: ``--timeout``: how long aicr waits for the agent Job.
    timeout_seconds: WholeNumber = setting(
        300,
        ge=10,
        le=3600,
        doc="how long aicr waits for the agent Job (`--timeout`), 10 to 3600",
        chart="snapshot.timeoutSeconds",
        into="configmap",
    )
    #: Where the agent runs and writes its ConfigMap (never the runner's own namespace: aicr
    #: deletes the ServiceAccount ``aicr`` and its Role there when it is done).
    namespace: Annotated[str, checked(checks.k8s_name(63))] = setting(
        "aicr-validation",
        doc="namespace of the agent Job and the ConfigMap `aicr-runner-snapshot` it writes",
        chart="snapshot.namespace",
        into="configmap",
    )
    #: The runner's copy of this snapshot and the previous one, in the runner's namespace; empty: not kept.
    configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-cluster-snapshot",
        doc=(
            "ConfigMap (the runner's namespace) keeping this snapshot and the previous one; empty: not kept, not "
            "compared"
        ),
        chart="snapshot.configMap",
        into="configmap",
    )

    def agent_image(self, aicr_version: str) -> str:
        return self.image or f"ghcr.io/nvidia/aicr:v{aicr_version.removeprefix('v')}"


class MirrorSettings(Group):
    """Where the component charts come from when a site mirrors them (``aicr-runner mirror``, docs/air-gap.md)."""

    #: Registry (``host[:port][/prefix]``) holding the mirrored charts: the recipe's chart sources are
    #: rewritten to ``oci://<registry>/<source host>/<source path>`` before ``aicr bundle``. Empty: no rewrite.
    registry: Annotated[str, checked(mirror_registry)] = setting(
        "",
        doc=(
            "registry (`host[:port][/prefix]`) holding the mirrored charts: the recipe's chart sources become "
            "`oci://<registry>/<source host>/<source path>` before `aicr bundle` (docs/air-gap.md); empty: no rewrite"
        ),
        chart="mirror.registry",
        into="configmap",
        render="{{ toString (default dict $v.mirror).registry | quote }}",
    )
    #: An HTTP(S) chart repository serving the charts the recipe takes from chart repositories
    #: (instead of ``registry``); empty: they are OCI charts in ``registry`` too.
    chart_repository: Annotated[str, checked(mirror_chart_repository)] = setting(
        "",
        doc=(
            "an `http(s)://` chart repository for the charts the recipe takes from chart repositories (instead of "
            "OCI charts in the registry); alone it redirects only those"
        ),
        chart="mirror.chartRepository",
        into="configmap",
        render="{{ toString (default dict $v.mirror).chartRepository | quote }}",
    )


class UpgradeCheckSettings(Group):
    """``aicr upgrade-check`` before the deploy of an install that crosses an aicr pin (``steps.upgrade``)."""

    #: Manual moves the user has done by hand: ``<component>:<from>:<to>``, matched exactly.
    acknowledge: Annotated[list[str], checked(checks.json_list(checks.acknowledged_move))] = setting(
        default_factory=list,
        doc=(
            "JSON array of acknowledged manual moves, `component:from:to` each, matched exactly; a blocked component "
            "is never acknowledged"
        ),
        chart="upgradeCheck.acknowledge",
        into="pod",
        render='{{ include "nvidia-aicr.acknowledgedMoves" . | quote }}',
    )
    #: A component aicr cannot judge (unknown, unversioned): stop the install, or warn and go on.
    on_unknown: UnknownPolicy = setting(
        UnknownPolicy.STOP,
        doc="`stop` (exit 35) or `warn` for a component `aicr upgrade-check` cannot judge (unknown, unversioned)",
        chart="upgradeCheck.onUnknown",
        into="pod",
    )
    #: An aicr without ``upgrade-check`` (0.x): a crossing it cannot assess stops the install.
    require_assessment: bool = setting(
        False,
        doc=(
            "stop (exit 35) a crossing the running aicr cannot assess (no `upgrade-check`: aicr 0.x); false: warn "
            "and go on"
        ),
        chart="upgradeCheck.requireAssessment",
        into="pod",
    )

    def acknowledged(self, component: str, source: str, target: str) -> bool:
        return f"{component}:{source}:{target}" in self.acknowledge


class LeaseSettings(Group):
    """The install Lease: one installer at a time per chart release."""

    #: Lease name in the namespace; empty runs without a Lease (local runs). The
    #: chart derives it from the release name, which may hold dots.
    name: Annotated[str, checked(checks.k8s_subdomain())] = setting(
        "", doc="the install Lease (`coordination.k8s.io/v1`) taken before deploy; empty runs without one (local runs)"
    )
    #: This pod's name and its Job's name: together the holder identity. A failed
    #: run also reads its Job's labels to find the Flux HelmRelease that rendered it.
    pod_name: Annotated[str, checked(checks.k8s_subdomain())] = setting(
        "", doc="this pod's name; with the Job name it is the Lease holder identity"
    )
    job_name: Annotated[str, checked(checks.k8s_subdomain(63))] = setting(
        "",
        doc=(
            "this pod's Job name (holder identity); a failed run reads this Job's labels to find the Flux "
            "HelmRelease that rendered it and records a Warning Event there"
        ),
    )
    #: A holder that stops renewing loses the Lease after this long.
    duration_seconds: WholeNumber = setting(
        60,
        ge=5,
        le=3600,
        doc="a holder that stops renewing loses the Lease after this many seconds",
        chart="lease.durationSeconds",
        into="configmap",
    )
    #: How long a run waits for another run's Lease before it gives up (exit 31).
    wait_seconds: SecondsOrZero = setting(
        7200.0,
        ge=0,
        le=86400,
        doc="how long a run waits for another run's Lease before it gives up with exit 31",
        chart="lease.waitSeconds",
        into="configmap",
        render="{{ int64 $v.lease.waitSeconds | toString | quote }}",
    )

    @property
    def pod_identity(self) -> str:
        """``job/pod`` (either part alone when the other is unknown); empty outside a pod."""
        return "/".join(part for part in (self.job_name, self.pod_name) if part)

    @property
    def holder(self) -> str:
        return self.pod_identity or "aicr-runner"


class ReportsSettings(Group):
    """The verdict as an OpenReports Report or a wgpolicyk8s PolicyReport (``kube.report_writer``)."""

    api: ReportsApi = setting(
        ReportsApi.AUTO,
        doc=(
            "which report the verdict is written to (docs/reports.md): `auto` (OpenReports `Report`, else "
            "wgpolicyk8s `PolicyReport`, found by discovery), `openreports`, `wgpolicy` or `none`"
        ),
        chart="reports.api",
        into="configmap",
    )
    #: One name per release (the chart: ``aicr-<release>``), replaced in place each run.
    name: Annotated[str, checked(checks.k8s_subdomain())] = setting(
        "aicr",
        doc="the report's name, one per release (the chart: `aicr-<release>`); replaced each run",
        into="configmap",
        render='{{ include "nvidia-aicr.reportName" . | quote }}',
    )
    #: The chart release, as the report's ``aicr.nvidia.com/release`` label; empty: no label.
    release: Annotated[str, checked(checks.k8s_subdomain(63))] = setting(
        "",
        doc="the chart release, as the report's `aicr.nvidia.com/release` label; empty: no label",
        into="configmap",
        render="{{ .Release.Name | quote }}",
    )


# The variables name the group VALIDATE: its field shadows BaseModel's deprecated
# ``validate`` classmethod, which nothing here calls.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "validate"', category=UserWarning)

    class RunnerSettings(BaseSettings):
        """Every runtime input. Field docs are the environment table in docs/configuration.md.

        Built in code, it reads nothing but its arguments; ``settings.load.load`` reads
        the environment through pydantic-settings' source (prefix, ``__`` nesting).
        """

        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX,
            env_nested_delimiter="__",
            case_sensitive=False,
            # An empty string is a value (an empty ConfigMap name turns that capture off).
            env_ignore_empty=False,
            # Lists are JSON arrays, parsed by their own check so a bad one gets our message.
            enable_decoding=False,
            extra="forbid",
            frozen=True,
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            # Only the arguments: a test's or a caller's settings never pick up the
            # process environment by surprise.
            return (init_settings,)

        criteria: Criteria = Field(default_factory=Criteria)
        pack: PackSettings = Field(default_factory=PackSettings)
        aicr: AicrSettings = Field(default_factory=AicrSettings)
        recipe: RecipeSettings = Field(default_factory=RecipeSettings)
        bundle: BundleSettings = Field(default_factory=BundleSettings)
        deploy: DeploySettings = Field(default_factory=DeploySettings)
        environment: EnvironmentSettings = Field(default_factory=EnvironmentSettings)
        lease: LeaseSettings = Field(default_factory=LeaseSettings)
        validate: ValidateSettings = Field(default_factory=ValidateSettings)  # type: ignore[assignment]
        reports: ReportsSettings = Field(default_factory=ReportsSettings)
        snapshot: SnapshotSettings = Field(default_factory=SnapshotSettings)
        mirror: MirrorSettings = Field(default_factory=MirrorSettings)
        upgrade_check: UpgradeCheckSettings = Field(default_factory=UpgradeCheckSettings)
        status_configmap: Annotated[str, checked(checks.k8s_name())] = setting(
            "aicr-run-status",
            doc="ConfigMap with the live run report (`report.json`, `summary.txt`); empty turns it off",
            chart="statusConfigMap",
            into="pod",
        )
        #: Namespace of the result ConfigMaps; empty: the pod's.
        namespace: Annotated[str, checked(checks.k8s_name(63))] = setting(
            "",
            doc="namespace of the result ConfigMaps (default: the pod's); a DNS-1123 label",
            into="pod",
            render="{{ .Release.Namespace | quote }}",
        )
        work_dir: Annotated[str, checked(absolute_path(required=True))] = setting(
            "/tmp/aicr-runner",  # noqa: S108 - the pod mounts an emptyDir there
            doc=(
                "absolute work directory (downloads, recipe, bundle, per-step logs); created, and checked writable "
                "before any step"
            ),
            into="pod",
            render="/work",
        )
        log_format: LogFormat = setting(
            LogFormat.CONSOLE, doc="`console` (readable) or `json`", chart="logFormat", into="configmap"
        )
        #: Empty outside a pod (the chart sets /dev/termination-log): a local run writes
        #: only under its work and results directories.
        termination_message_path: Annotated[str, checked(absolute_path())] = setting(
            "",
            doc=(
                "where the one-line outcome (printable, at most 4096 bytes) is written for the pod status; the chart "
                "sets `/dev/termination-log`; empty: not written (a local run writes only under its work and results "
                "directories)"
            ),
            into="pod",
            render="/dev/termination-log",
        )
        #: How long a running child (helm inside deploy.sh) may finish after SIGTERM.
        shutdown_grace_seconds: Annotated[
            float, checked(checks.decimal_seconds), AfterValidator(checks.zero_or_measurable)
        ] = setting(
            60.0,
            ge=0,
            le=3600,
            doc=(
                "after SIGTERM, how long a running child (helm in deploy.sh) may finish before it is stopped; "
                "deploy.sh is stopped earlier, as soon as no helm operation is in flight"
            ),
        )
        #: How long one Kubernetes API call may take, retries included (429, 5xx, connection
        #: errors, no answer); no call waits longer, whatever its own budget.
        kube_write_budget_seconds: Seconds = setting(
            120.0,
            ge=checks.MIN_SECONDS,
            le=3600,
            doc=(
                "how long one Kubernetes API call (a result ConfigMap write, a read) may take, retries of 429, 5xx, "
                "connection errors and unanswered requests included, honouring Retry-After; each request is also "
                "bounded on its own (15 s); once a call ran out of this budget, later calls get 15 s until one gets "
                "through; after SIGTERM every call gets at most 5 s"
            ),
            chart="kubeWriteBudgetSeconds",
            into="configmap",
        )

        @model_validator(mode="after")
        def _follows_the_rules(self, info: ValidationInfo) -> RunnerSettings:
            """The rules between settings (``settings.rules``), for a run's input only:
            validated with ``rules.RULES`` in the context (``settings.load``)."""
            context = info.context if isinstance(info.context, dict) else {}
            if context.get(rules.RULES):
                broken = rules.problems(self, local_pack=bool(context.get(rules.LOCAL_PACK)))
                if broken:
                    raise rules.RuleViolations(broken)
            return self

        @property
        def work_path(self) -> Path:
            return Path(self.work_dir)


def leaves(model: type[BaseModel] = RunnerSettings, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every setting under ``model``: its variable without the prefix (``VALIDATE__PHASES``)
    and its field, in the order of the environment table."""
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from leaves(kind, f"{prefix}{name.upper()}__")
        else:
            yield f"{prefix}{name.upper()}", field


def chart_facts(field: FieldInfo) -> dict[str, str]:
    """What ``setting`` recorded of a field's chart side: ``chart``, ``into``, ``render``."""
    extra = field.json_schema_extra
    return {key: str(value) for key, value in extra.items()} if isinstance(extra, dict) else {}
