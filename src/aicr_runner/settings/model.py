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

from typing import Annotated, Any

from pydantic import Field, WrapValidator
from pydantic.fields import FieldInfo

from aicr_runner.settings import addresses, checks
from aicr_runner.settings.checks import (
    Phase,
    PublishMode,
    ReportsApi,
    UnknownPolicy,
    absolute_path,
)
from aicr_runner.settings.groups import (
    AICR_RELEASE_IDENTITY,
    CHART_DEFAULT,
    GITHUB_ACTIONS_ISSUER,
    AicrSettings,
    BundleSettings,
    Criteria,
    DeploySettings,
    Group,
    PackSettings,
    ProvenanceSettings,
    RecipeExpectations,
    RecipeSettings,
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
    "Sha256Pins",
    "SnapshotSettings",
    "StepArgs",
    "UpgradeCheckSettings",
    "ValidateSettings",
    "chart_default",
    "chart_facts",
]


class EnvironmentSettings(Group):
    preinstalled_driver: bool = setting(
        False,
        doc="nodes have a host driver: adds the three driver-ownership `--set` overrides before user flags",
        chart="environment.preinstalledDriver",
        chart_doc=(
            "The nodes already run an NVIDIA driver: disables the GPU Operator driver and sets the DRA driver root and "
            "the NVSentinel labeler to match (bundle overrides applied before bundle.flags/bundle.args)."
        ),
        into="pod",
    )


class PublishSettings(Group):
    enabled: bool = setting(
        False,
        doc="push the evidence bundle with `aicr evidence publish`",
        chart="validate.publish.enabled",
        chart_doc=(
            "Push the evidence bundle with `aicr evidence publish`. Needs validate.enabled, validate.emitEvidence and "
            "publish.ref."
        ),
        into="pod",
    )
    mode: PublishMode = setting(
        PublishMode.SIGNED,
        doc="`signed` (keyless, needs a token) or `unsigned` (`--no-sign`)",
        chart="validate.publish.mode",
        chart_doc=(
            "`signed` signs keylessly in the cluster with a short-lived OIDC token (identityTokenSecret); `unsigned` "
            "pushes with `--no-sign` and you sign later with `aicr evidence sign <pointer> --relocate`."
        ),
        into="pod",
    )
    ref: Annotated[str, checked(addresses.oci_reference)] = setting(
        "",
        doc="OCI push target for the evidence",
        chart="validate.publish.ref",
        chart_doc="OCI push target, e.g. ghcr.io/acme/aicr-evidence. Required when publishing.",
        into="pod",
    )
    fail_on_error: bool = setting(
        False,
        doc="a failed publish fails the Job",
        chart="validate.publish.failOnError",
        chart_doc="Fail the Job when publishing fails.",
        into="pod",
    )
    insecure_tls: bool = setting(
        False,
        doc="publish with `--insecure-tls`",
        chart="validate.publish.insecureTLS",
        chart_doc="Add `--insecure-tls` to the publish call.",
        into="pod",
    )
    plain_http: bool = setting(
        False,
        doc="publish with `--plain-http`",
        chart="validate.publish.plainHTTP",
        chart_doc="Add `--plain-http` to the publish call (local registries).",
        into="pod",
    )
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
        "",
        doc="legacy extra `aicr validate` flags, split on whitespace only",
        chart="validate.flags",
        legacy="validateFlags",
        chart_doc="Legacy extra `aicr validate` flags, split on whitespace. Prefer validate.args.",
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `aicr validate` arguments (JSON array)",
        chart="validate.args",
        legacy="validateArgs",
        chart_doc=(
            'Extra `aicr validate` arguments, one argv entry per element, e.g. `["--namespace", "aicr", '
            '"--image-pull-secret", "regcred"]`.'
        ),
        into="pod",
    )
    enabled: bool = setting(
        False,
        doc="run `aicr validate` after the install (or alone, assert-only)",
        chart="validate.enabled",
        chart_doc="Run `aicr validate` after the install (or on its own with deploy.enabled=false).",
        into="pod",
    )
    phases: Annotated[list[Phase], checked(checks.json_list(str)), WrapValidator(items_as_one)] = setting(
        default_factory=lambda: [Phase.DEPLOYMENT],
        doc="JSON array of phases: deployment, performance, conformance; never empty",
        chart="validate.phases",
        chart_doc=(
            "Validation phases: deployment, performance, conformance. Empty entries are dropped; at least one must "
            "remain (an empty list makes aicr run every phase, performance included)."
        ),
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
        chart_doc=(
            "Fail the Job when validation fails (validate's exit code; 8 when aicr 0.11 exits 0 although a check "
            "crashed) or ran no check (exit 32: zero tests, or every check skipped). aicr's CTRF report decides. "
            "Without it such a run exits 0: one whose checks failed ends with phase `SucceededWithFailures`, one that "
            "ran no check with phase `SucceededInconclusive`. The verdict and evidence are captured first."
        ),
        into="pod",
    )
    emit_evidence: bool = setting(
        False,
        doc="`--emit-attestation`: build the evidence bundle",
        chart="validate.emitEvidence",
        chart_doc="Add `--emit-attestation` and capture the evidence bundle.",
        into="pod",
    )
    result_configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-validate-result",
        doc="ConfigMap for the CTRF verdict (`ctrf.json`)",
        chart="validate.resultConfigMap",
        chart_doc="ConfigMap that receives the CTRF verdict under the key `ctrf.json`. Empty turns the capture off.",
        into="pod",
    )
    evidence_configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-evidence-bundle",
        doc="ConfigMap for `evidence.tgz` and `pointer.yaml`",
        chart="validate.evidenceConfigMap",
        chart_doc=(
            "ConfigMap that receives the evidence: binaryData `evidence.tgz` (when under the budget) and data "
            "`pointer.yaml`. Empty turns the capture off."
        ),
        into="pod",
    )
    #: Verdicts the history (``<result_configmap>-history``) keeps.
    history_limit: WholeNumber = setting(
        20,
        ge=1,
        le=100,
        doc="validations the verdict history (`<resultConfigMap>-history`) keeps",
        chart="validate.historyLimit",
        chart_doc=(
            "Validations the verdict history keeps (ConfigMap `<resultConfigMap>-history`, key `history.json`; install "
            "runs and re-validations alike), newest last; each run is compared with the previous verdict of the same "
            "recipe (docs/continuous-assurance.md)."
        ),
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
        chart_doc=(
            "Run `aicr snapshot` before the deploy of each install and before each re-validation (`aicr-runner "
            "validate`), pass it to `aicr validate --snapshot` (validate then starts no agent of its own), keep it "
            "(snapshot.configMap) and report what changed since the previous one (Kubernetes version, GPU model and "
            "count, driver, kernel, OS, node count) in the run summary and a `ClusterChanged` Event on the Job. "
            "Advisory: a failed snapshot is a warning, never a failed install or re-validation. "
            'docs/continuous-assurance.md "Snapshots".'
        ),
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
        chart_doc=(
            "`aicr snapshot --privileged`. true (aicr's default): the agent shares the node's PID, network and IPC "
            "namespaces and mounts `/run/systemd` and `/etc/os-release` read-only, so the snapshot has the node's OS "
            "release and its containerd/kubelet units; the namespace must admit privileged pods. false: a restricted "
            "pod (non-root, read-only root, no host mounts): the OS release is the agent image's own and the systemd "
            "data is empty; kernel, sysctl and modules still come from the node (shared kernel)."
        ),
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
        chart_doc="How long aicr waits for the agent Job (`--timeout`), in seconds (10 to 3600).",
        into="configmap",
    )
    #: Where the agent runs and writes its ConfigMap (never the runner's own namespace: aicr
    #: deletes the ServiceAccount ``aicr`` and its Role there when it is done).
    namespace: Annotated[str, checked(checks.k8s_name(63))] = setting(
        "aicr-validation",
        doc="namespace of the agent Job and the ConfigMap `aicr-runner-snapshot` it writes",
        chart="snapshot.namespace",
        chart_doc=(
            "Namespace of the agent Job and of the ConfigMap it writes (`aicr-runner-snapshot`); aicr creates it. Not "
            "the release's namespace: aicr deletes the agent's ServiceAccount and Role there when it is done."
        ),
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
        chart_doc=(
            "ConfigMap in the release's namespace keeping the latest snapshot (`snapshot.yaml`, gzip-compressed as "
            "`snapshot.yaml.gz` when large) and the readings compared (`facts.json`), replaced each run after the "
            "previous readings were compared with the new. Empty: not kept, nothing compared."
        ),
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
        chart_doc=(
            "Registry (`host[:port][/prefix]`, no scheme) holding the component charts that `aicr-runner mirror` "
            "copied, for air-gapped clusters: between `aicr recipe` and `aicr bundle` every chart source of the recipe "
            "is rewritten to `oci://<registry>/<source host>/<source path>` (deploy.sh then names only the mirror); "
            "the upstream recipe and the mapping are captured with it (`mirror-sources.json`). The Job's helm must "
            "trust the registry's TLS certificate (deploy.sh passes helm no CA or plain-HTTP flag). Empty: the "
            "recipe's own sources. docs/air-gap.md."
        ),
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
        chart_doc=(
            "An `http(s)://` chart repository serving the charts the recipe takes from chart repositories, instead of "
            "OCI charts in mirror.registry. Alone, it redirects only those (the OCI-sourced charts keep their source). "
            "Empty: they are OCI charts in mirror.registry."
        ),
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
        chart_doc=(
            "Manual moves you have done by hand, so an upgrade that crosses an aicr pin may go on. Each entry is one "
            "move exactly as `aicr upgrade-check` reports it: `{component: nfd, from: 0.17.3, to: v0.18.2}`; an entry "
            "for another move (another component, source or target version) does not count. Only `manual` verdicts can "
            "be acknowledged: a `blocked` component always stops the install (upgrade to its earliest recorded "
            'starting point first). Changing it starts a new Job. docs/installing.md "Upgrading".'
        ),
        into="pod",
        render='{{ include "nvidia-aicr.acknowledgedMoves" . | quote }}',
    )
    #: A component aicr cannot judge (unknown, unversioned): stop the install, or warn and go on.
    on_unknown: UnknownPolicy = setting(
        UnknownPolicy.STOP,
        doc="`stop` (exit 35) or `warn` for a component `aicr upgrade-check` cannot judge (unknown, unversioned)",
        chart="upgradeCheck.onUnknown",
        chart_doc=(
            "A component `aicr upgrade-check` cannot judge (`unknown`: no transition record; `unversioned`: the "
            "installed version cannot be told): `stop` the install before deploy (exit 35), or `warn` (a Warning "
            "Event, the step warned) and go on."
        ),
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
        chart_doc=(
            "An aicr without `upgrade-check` (v0.11.1; it is present from v1.0.0) cannot assess a crossing: false "
            "reports the crossing as not assessed (the step warned, a Warning Event) and goes on; true stops the "
            "install before deploy (exit 35)."
        ),
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
        chart_doc=(
            "Seconds after which a run that stopped renewing the install Lease (pod killed, node lost) loses it. A run "
            "that starts after a killed one waits up to this long."
        ),
        into="configmap",
    )
    #: How long a run waits for another run's Lease before it gives up (exit 31).
    wait_seconds: SecondsOrZero = setting(
        7200.0,
        ge=0,
        le=86400,
        doc="how long a run waits for another run's Lease before it gives up with exit 31",
        chart="lease.waitSeconds",
        chart_doc=(
            "Seconds a run waits for the install Lease while another run of this release holds it, before it gives up "
            "with exit 31. The wait happens inside the pod and does not use the Job's backoffLimit; keep it below "
            "job.activeDeadlineSeconds."
        ),
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
        chart_doc=(
            "Which report each run (install or scheduled) writes its verdict to, in the release namespace, named "
            "`aicr-<release>`: `auto` (an OpenReports `Report` where `openreports.io/v1alpha1` is served, else a "
            "`wgpolicyk8s.io/v1alpha2` `PolicyReport`, else none, said in one log line), `openreports`, `wgpolicy` or "
            "`none`. Found by discovery at run time; the chart installs no CRD. Its results are replaced each run and "
            "it outlives the Job. A runtime setting: changing it does not re-run the install."
        ),
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


def chart_facts(field: FieldInfo) -> dict[str, str]:
    """What ``setting`` recorded of a field's chart side: ``chart``, ``chart_doc``, ``into``,
    ``render`` (the chart's default: ``chart_default``)."""
    extra = field.json_schema_extra
    if not isinstance(extra, dict):
        return {}
    return {key: str(value) for key, value in extra.items() if key != CHART_DEFAULT}


def chart_default(field: FieldInfo) -> Any:
    """A setting's default in chart/values.yaml: ``setting``'s ``chart_default``, else its own."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and CHART_DEFAULT in extra:
        return extra[CHART_DEFAULT]
    return field.get_default(call_default_factory=True)
