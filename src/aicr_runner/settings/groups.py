"""The settings groups of the install's inputs (criteria, aicr, pack, the steps' arguments),
each field defined once by ``settings.fields.setting`` (re-exported here). ``settings.model``
holds the other groups, ``settings.runner`` the root.

Each field carries its check from ``settings.checks`` as a before-validator: the check
gets the raw value (a string from the environment, or a value given in code),
normalises it or raises ``settings.checks.Invalid``, whose reason ``settings.problems`` turns
into the one line a bad value gets. Groups are frozen and refuse unknown fields.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import (
    Field,
)

from aicr_runner.settings import addresses, checks, names
from aicr_runner.settings.checks import (
    DEFAULT_RELEASE_BASE_URL,
    ENV_PREFIX,
    Arch,
    HelmApply,
    ProvenanceMode,
    absolute_path,
)
from aicr_runner.settings.fields import (
    CHART_DEFAULT,
    Group,
    Into,
    Seconds,
    SecondsOrZero,
    WholeNumber,
    checked,
    items_as_one,
    setting,
)

__all__ = [
    "AICR_RELEASE_IDENTITY",
    "CHART_DEFAULT",
    "GITHUB_ACTIONS_ISSUER",
    "AicrSettings",
    "BundleSettings",
    "Criteria",
    "DeploySettings",
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


class Criteria(Group):
    """Recipe criteria. Empty leaves the flag out."""

    service: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc=(
            "recipe `--service` (aks, eks, gke, k0s, ..., a pack-registered value, or `any`); empty leaves the flag out"
        ),
        chart="criteria.service",
        legacy="service",
        chart_doc=(
            "Cloud or distribution (`aicr recipe --service`): aks, bcm, cks, eks, generic, gke, k0s, kind, lke, "
            "metal3, mk8s, nvke, ocp, oke, rke2, a value your data pack registers (e.g. acme), or `any`. "
            "`self-managed`, `self` and `vanilla` are rejected: aicr maps them to `generic`, which has no recipe for "
            "most accelerators."
        ),
        chart_default="any",
        into="pod",
    )
    accelerator: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc="recipe `--accelerator` (h100, h200, gb200, ...); `any` is refused",
        chart="criteria.accelerator",
        legacy="accelerator",
        chart_doc=(
            "GPU (`--accelerator`): h100, h200, gb200, gb300, b200, b300, a100, l40, l40s, rtx-pro-6000, vr200. Empty "
            "leaves the flag out. There is deliberately no default; `any` is rejected."
        ),
        into="pod",
    )
    intent: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc="recipe `--intent` (training, inference); needs a concrete service",
        chart="criteria.intent",
        legacy="intent",
        chart_doc=(
            "Workload intent (`--intent`): training or inference. Empty leaves the flag out. A stated intent needs a "
            "concrete service whose overlays declare it (not `any`)."
        ),
        into="pod",
    )
    os: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc="recipe `--os` (ubuntu, rhel, rocky, cos, ...)",
        chart="criteria.os",
        legacy="os",
        chart_doc=(
            "Node OS (`--os`): ubuntu, rhel, rocky, cos, amazonlinux, ol, sles, talos. Empty leaves the flag out."
        ),
        into="pod",
    )
    platform: Annotated[str, checked(checks.criterion)] = setting(
        "",
        doc="recipe `--platform` (kubeflow, dynamo, nim, ...)",
        chart="criteria.platform",
        legacy="platform",
        chart_doc="Platform (`--platform`): kubeflow, dynamo, kueue, nim, runai, slurm. Empty leaves the flag out.",
        into="pod",
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
        chart="aicr.sha256.amd64",
        legacy="aicrSha256.amd64",
        chart_doc="sha256 of `aicr_<version>_linux_amd64.tar.gz` (64 hex characters) or empty.",
        into="pod",
        render='{{ toString (default "" (default dict $v.aicr.sha256).amd64) | quote }}',
    )
    arm64: Annotated[str, checked(checks.sha256_or_empty)] = setting(
        "",
        doc="strict sha256 pin of the arm64 release tarball; never inherits the amd64 pin",
        chart="aicr.sha256.arm64",
        legacy="aicrSha256.arm64",
        chart_doc="sha256 of `aicr_<version>_linux_arm64.tar.gz` (64 hex characters) or empty.",
        into="pod",
        render='{{ toString (default "" (default dict $v.aicr.sha256).arm64) | quote }}',
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
        chart="aicr.provenance.mode",
        legacy="aicrProvenance.mode",
        chart_doc=(
            "Verify aicr's Sigstore provenance (`aicr-attestation.sigstore.json`, SLSA v1, signed by NVIDIA's release "
            "workflow) offline before aicr runs: `require` (exit 29 unless it verifies), `warn` (report and run "
            "anyway) or `off`. A preinstalled aicr.binary.path without the attestation beside it needs `warn` or `off`."
        ),
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
        chart="aicr.provenance.identity",
        legacy="aicrProvenance.identity",
        chart_doc=(
            "Exact signer identity (certificate SAN). Empty means "
            "`https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/<aicr.version>`; `{version}` is "
            "replaced by aicr.version."
        ),
        into="pod",
    )
    issuer: Annotated[str, checked(addresses.issuer)] = setting(
        GITHUB_ACTIONS_ISSUER,
        doc="OIDC issuer of the signing certificate",
        chart="aicr.provenance.issuer",
        legacy="aicrProvenance.issuer",
        chart_doc="OIDC issuer of the signing certificate.",
        into="pod",
    )
    #: A Sigstore trusted_root.json; empty: the public-good root shipped with the runner.
    trusted_root: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="Sigstore `trusted_root.json` (private Sigstore or a refreshed root); empty: the shipped public-good root",
        chart="aicr.provenance.trustedRoot",
        legacy="aicrProvenance.trustedRoot",
        chart_doc=(
            "Path, inside the container, of a Sigstore `trusted_root.json` (private Sigstore or a refreshed root; "
            "mount it with a custom image or job.extraVolumes). Empty uses the public-good root shipped in the image."
        ),
        into="pod",
    )


_MIRROR_HINT = (
    "serve the release mirror without a login inside the cluster, or give a preinstalled aicr "
    f"(chart aicr.binary.path, env {ENV_PREFIX}AICR__BINARY, plan --aicr-binary)"
)


class AicrSettings(Group):
    version: Annotated[str, checked(checks.version)] = setting(
        names.PINNED_AICR_VERSION,
        doc="pinned aicr release tag; the leading `v` is optional",
        chart="aicr.version",
        legacy="aicrVersion",
        chart_doc=(
            'aicr release tag to download and run (the leading "v" is optional). The criteria catalog in files/ is for '
            "v1.2.0; another version skips the chart's catalog check."
        ),
        into="pod",
    )
    arch: Annotated[Arch, checked(checks.arch)] = setting(
        default_factory=checks.host_arch,
        doc="release architecture, `amd64` or `arm64`; empty or unset: this machine's",
        chart="aicr.arch",
        legacy="aicrArch",
        chart_doc=(
            "Architecture of the aicr release tarball: amd64, arm64, or empty for the architecture of the node the Job "
            "lands on (the image is multi-arch). Selects the tarball and the aicr.sha256 entry. To pin the Job to one "
            "architecture, set job.nodeSelector (see its example)."
        ),
        chart_default="",
        into="pod",
    )
    sha256: Sha256Pins = Field(default_factory=Sha256Pins)
    release_base_url: Annotated[str, checked(addresses.url(("http", "https"), _MIRROR_HINT))] = setting(
        DEFAULT_RELEASE_BASE_URL,
        doc=(
            "where releases are served: `<base>/<tag>/aicr_<ver>_linux_<arch>.tar.gz` (a mirror for air-gapped "
            "clusters); http(s), no user or password in it"
        ),
        chart="aicr.releaseBaseUrl",
        legacy="aicrReleaseBaseUrl",
        chart_doc=(
            "Base URL of the aicr releases; the runtime downloads `<base>/<tag>/<tarball>` and `aicr_checksums.txt`. "
            "Point it at a mirror for restricted networks."
        ),
        into="pod",
    )
    #: The release as the OCI artifact ``aicr-runner mirror --to`` pushes (``aicr.release_oci``),
    #: reached with the pack's registry settings; empty: the HTTP folder of ``release_base_url``.
    release_ref: Annotated[str, checked(addresses.pack_reference)] = setting(
        "",
        doc=(
            "the release as an OCI artifact, without scheme (`host/prefix/nvidia/aicr/release:<tag>`, an `@sha256:` "
            "digest is then enforced; `aicr-runner mirror --to` pushes it), reached with the pack's registry "
            "settings (credentials file, plain HTTP, TLS); empty: the HTTP folder of the release base URL"
        ),
        chart="aicr.releaseRef",
        legacy="aicrReleaseRef",
        chart_doc=(
            "The aicr release as an OCI artifact, without scheme (`<registry>/<prefix>/nvidia/aicr/release:<tag>`, "
            "pushed by `aicr-runner mirror --to`; an `@sha256:` digest is enforced), reached with the data pack's "
            "registry settings (pack.secret, pack.plainHTTP, pack.insecureTLS). Empty: the HTTP folder of "
            "aicr.releaseBaseUrl. Leave aicr.releaseBaseUrl at its default when set."
        ),
        into="configmap",
    )
    #: A preinstalled aicr to use instead of downloading one.
    binary: Annotated[str, checked(absolute_path())] = setting(
        "",
        doc="use this preinstalled aicr instead of downloading one",
        chart="aicr.binary.path",
        legacy="aicrBinary.path",
        chart_doc="Absolute path of an aicr binary preinstalled in a custom image. When set, nothing is downloaded.",
        into="pod",
    )
    #: sha256 of ``binary``; when set the binary must match it.
    binary_sha256: Annotated[str, checked(checks.sha256_or_empty)] = setting(
        "",
        doc="sha256 the preinstalled binary must match",
        chart="aicr.binary.sha256",
        legacy="aicrBinary.sha256",
        chart_doc="sha256 the preinstalled binary must match (64 hex characters). Requires aicr.binary.path.",
        into="pod",
    )
    download_attempts: WholeNumber = setting(
        5,
        ge=1,
        le=20,
        doc="download attempts for transient failures (timeouts, resets, 408/429/5xx)",
        chart="aicr.download.attempts",
        legacy="aicrDownload.attempts",
        chart_doc="Download attempts for the aicr release (1-20); only transient errors are retried.",
        into="configmap",
    )
    download_timeout_seconds: Seconds = setting(
        60.0,
        ge=checks.MIN_SECONDS,
        le=3600,
        doc="per-request timeout",
        chart="aicr.download.timeoutSeconds",
        legacy="aicrDownload.timeoutSeconds",
        chart_doc="Timeout of one download attempt, in seconds.",
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
        chart="aicr.download.budgetSeconds",
        legacy="aicrDownload.budgetSeconds",
        chart_doc=(
            "Wall-clock bound on the whole download step, in seconds: retries, back-off, slow bodies, stalled TLS and "
            "redirects included; past it the run ends with exit 20."
        ),
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
    ref: Annotated[str, checked(addresses.pack_reference)] = setting(
        "",
        doc=(
            "OCI reference of the org data pack, without scheme (`host/repo:tag` or `@sha256:` digest, which is then "
            "enforced)"
        ),
        chart="pack.ref",
        legacy="dataPack",
        chart_doc=(
            "OCI reference, without a scheme, of your organisation's data pack (`aicr ... --data`), e.g. "
            "`ghcr.io/acme/aicr-pack:1.0.0` or `...@sha256:...`. The runtime pulls and verifies it. With a pack set, "
            "the chart's criteria catalog check is skipped (the pack may register new values) and the runtime checks "
            "the criteria instead."
        ),
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
        False,
        doc="pull the pack over plain HTTP (lab registries)",
        chart="pack.plainHTTP",
        legacy="dataPackPlainHTTP",
        chart_doc="Pull the data pack over plain HTTP (lab registries only).",
        into="pod",
    )
    insecure_tls: bool = setting(
        False,
        doc="skip TLS verification for the pack registry (lab registries)",
        chart="pack.insecureTLS",
        legacy="dataPackInsecureTLS",
        chart_doc="Skip TLS verification when pulling the data pack (lab registries only).",
        into="pod",
    )
    #: Wall-clock bound on the whole pack pull, however slowly the registry answers.
    pull_budget_seconds: Seconds = setting(
        600.0,
        ge=checks.MIN_SECONDS,
        le=7200,
        doc="wall-clock bound on the whole pack pull, however slowly the registry answers (exit 22 past it)",
        chart="pack.pullBudgetSeconds",
        legacy="dataPackPullBudgetSeconds",
        chart_doc=(
            "Wall-clock bound on the whole data pack pull, in seconds, however slowly the registry answers; past it "
            "the run ends with exit 22."
        ),
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
        chart_doc=(
            "Fail the run (exit 25) before bundling when the resolved recipe has fewer components than this. 0 turns "
            "the check off. Guards against a silently thin recipe from under-stated criteria."
        ),
        into="pod",
    )
    components: Annotated[list[str], checked(checks.json_list(checks.plain_text))] = setting(
        default_factory=list,
        doc="JSON array of component names that must resolve",
        chart="recipe.expect.components",
        chart_doc=(
            "Component names the resolved recipe must contain (e.g. gpu-operator); exit 25 before bundling otherwise."
        ),
        into="pod",
    )
    overlays: Annotated[list[str], checked(checks.json_list(checks.plain_text))] = setting(
        default_factory=list,
        doc="JSON array of overlay names that must be applied",
        chart="recipe.expect.overlays",
        chart_doc=(
            "Overlay names the resolution must apply (e.g. h100-eks-ubuntu-training); exit 25 before bundling "
            "otherwise."
        ),
        into="pod",
    )

    @property
    def any_set(self) -> bool:
        return bool(self.min_components or self.components or self.overlays)


class RecipeSettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "",
        doc="legacy extra `aicr recipe` flags, split on whitespace only (no quotes, no globs)",
        chart="recipe.flags",
        legacy="recipeFlags",
        chart_doc="Legacy extra `aicr recipe` flags, split on whitespace (no quoting). Prefer recipe.args.",
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `aicr recipe` arguments as a JSON array, one argv entry each, after the flags",
        chart="recipe.args",
        legacy="recipeArgs",
        chart_doc=(
            "Extra `aicr recipe` arguments, one argv entry per element (quote numbers and booleans). Placed after "
            "recipe.flags."
        ),
        into="pod",
    )
    configmap: Annotated[str, checked(checks.k8s_name())] = setting(
        "aicr-recipe",
        doc="ConfigMap for `summary.txt` and `recipe.yaml`; empty turns the capture off",
        chart="recipe.configMap",
        legacy="recipeConfigMap",
        chart_doc=(
            "ConfigMap that receives the recipe capture (`summary.txt`, `recipe.yaml`, or binaryData `recipe.yaml.gz` "
            "when over the ConfigMap budget). Empty turns the capture off."
        ),
        into="pod",
    )
    expect: RecipeExpectations = Field(default_factory=RecipeExpectations)


class BundleSettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "",
        doc="legacy extra `aicr bundle` flags, split on whitespace only",
        chart="bundle.flags",
        legacy="bundleFlags",
        chart_doc="Legacy extra `aicr bundle` flags, split on whitespace. Prefer bundle.args.",
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `aicr bundle` arguments (JSON array), after the flags and the driver profile",
        chart="bundle.args",
        legacy="bundleArgs",
        chart_doc=(
            'Extra `aicr bundle` arguments, one argv entry per element, e.g. `["--accelerated-node-toleration", '
            '"nvidia.com/gpu=present:NoSchedule"]`. Placed after bundle.flags and the environment profile, so they win.'
        ),
        into="pod",
    )
    storage_class: Annotated[str, checked(checks.k8s_subdomain())] = setting(
        "",
        doc="`aicr bundle --storage-class`",
        chart="bundle.storageClass",
        legacy="storageClass",
        chart_doc="Storage class passed to `aicr bundle --storage-class`; empty leaves the flag out.",
        into="pod",
    )


class DeploySettings(StepArgs):
    flags: Annotated[str, checked(checks.flags)] = setting(
        "--best-effort --no-wait",
        doc="legacy `deploy.sh` flags, split on whitespace only",
        chart="deploy.flags",
        legacy="deployFlags",
        chart_doc=(
            'Legacy `deploy.sh` flags, split on whitespace: `--best-effort`, `--no-wait`, `--retries N`. Set to "" to '
            "drop the default when using deploy.args; drop `--no-wait` when validating after the install."
        ),
        into="pod",
    )
    args: Annotated[list[str], checked(checks.json_list(checks.argument))] = setting(
        default_factory=list,
        doc="extra `deploy.sh` arguments (JSON array), after the flags",
        chart="deploy.args",
        legacy="deployArgs",
        chart_doc="Extra `deploy.sh` arguments, one argv entry per element, placed after deploy.flags.",
        into="pod",
    )
    enabled: bool = setting(
        True,
        doc="`false` gives an assert-only run: no bundle, verify or deploy",
        chart="deploy.enabled",
        chart_doc=(
            "Bundle, verify and deploy. false gives an assert-only run (pack, recipe and capture, then validation), "
            "which needs validate.enabled."
        ),
        into="pod",
    )
    #: A run whose deploy.sh reported failed components fails (exit 1) even under --best-effort.
    fail_on_component_failure: bool = setting(
        False,
        doc=(
            "fail the run (exit 1, after validation and capture) when deploy.sh reported failed components; `false`: "
            "such a run exits 0 with phase `SucceededWithFailures`"
        ),
        chart="deploy.failOnComponentFailure",
        chart_doc=(
            "Fail the Job (exit 1, after validation and the captures) when deploy.sh reports failed components. false "
            "keeps the bash chart's semantics: under `--best-effort` such a run still completes, with phase "
            "`SucceededWithFailures` in the status ConfigMap and the termination message, a Warning Event on the Job "
            "and the Job annotation `aicr.nvidia.com/outcome`. A runtime setting: changing it does not re-run the "
            "install."
        ),
        into="configmap",
    )
    #: Words, not a boolean: ``auto`` is Helm 4's own third choice. In the pod template (a
    #: change re-runs the install with it), rendered only when not ``client``: a default
    #: render stays byte for byte what it was before the setting (the Job's name).
    helm_apply: HelmApply = setting(
        HelmApply.CLIENT,
        doc=(
            "how deploy.sh's helm applies objects: `client` (`--server-side=false` on each helm install/upgrade), "
            "`server` (`--server-side=true`, Helm 4 only: exit 2 with a Helm 3) or `auto` (no flag: Helm 4's default)"
        ),
        chart="deploy.helmApply",
        chart_doc=(
            "How deploy.sh's helm applies the components' objects; the runner adds the flag to each `helm install` "
            "and `helm upgrade`. `client` (`--server-side=false`): what the bash chart's Helm 3 did, and what the "
            "bundle's values need (aicr's kube-prometheus-stack values set `storageSpec.emptyDir: null`, which the "
            "Prometheus CRD refuses under server-side apply). `server` (`--server-side=true`): Helm 4 only (exit 2 "
            "with a Helm 3). `auto`: no flag, Helm 4's default (a new release server-side, an upgrade the way its "
            "release was last applied). A change gives a new Job (the install runs again with it)."
        ),
        into="pod",
        omit_default=True,
    )

    @property
    def best_effort(self) -> bool:
        """``--best-effort`` in either the flags string or the args list (the bash chart's
        deploy gate reads it from both; docs/migration.md)."""
        return "--best-effort" in self.flags.split() or "--best-effort" in self.args
