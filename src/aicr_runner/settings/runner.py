"""``RunnerSettings``: the root of the settings, a pydantic-settings ``BaseSettings``
over the groups of ``settings.model`` and ``settings.groups``, and ``leaves``, which
walks it.

Apart from the groups so that what needs one group only (the release download's
``AicrSettings``, the pack pull's ``PackSettings``) imports pydantic, never
pydantic-settings; ``settings.config`` hands this class out on first use.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, ValidationInfo, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aicr_runner.settings import checks, rules
from aicr_runner.settings.checks import ENV_PREFIX, LogFormat, absolute_path
from aicr_runner.settings.groups import (
    AicrSettings,
    BundleSettings,
    Criteria,
    DeploySettings,
    PackSettings,
    RecipeSettings,
    Seconds,
    checked,
    setting,
)
from aicr_runner.settings.model import (
    EnvironmentSettings,
    LeaseSettings,
    MirrorSettings,
    ReportsSettings,
    SnapshotSettings,
    UpgradeCheckSettings,
    ValidateSettings,
)

__all__ = ["RunnerSettings", "leaves"]


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
            chart="status.configMap",
            legacy="statusConfigMap",
            chart_doc=(
                "ConfigMap the runtime writes its run report to (`report.json`, `summary.txt`) after every step. Empty "
                "turns it off."
            ),
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
            LogFormat.CONSOLE,
            doc="`console` (readable) or `json`",
            chart="log.format",
            legacy="logFormat",
            chart_doc="Runtime log format: `console` (readable) or `json` (one object per line, for log pipelines).",
            into="configmap",
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
            chart="kubeApi.writeBudgetSeconds",
            legacy="kubeWriteBudgetSeconds",
            chart_doc=(
                "Seconds one Kubernetes API call (a result ConfigMap write, a read) may take, retrying an API server "
                "that answers 429 or 5xx, cannot be reached or does not answer (an upgrade, a blip), honouring "
                "Retry-After, before the run fails with exit 26. Each request is bounded on its own too (15 s, connect "
                "5 s); once a call ran out of this budget, later calls get 15 s until one gets through; SIGTERM stops "
                "a call in flight."
            ),
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
