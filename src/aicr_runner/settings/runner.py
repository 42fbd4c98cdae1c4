"""``RunnerSettings``: the root of the settings, a pydantic-settings ``BaseSettings``
over the groups of ``settings.model``.

Apart from the groups so that what needs one group only (the release download's
``AicrSettings``, the pack pull's ``PackSettings``) imports pydantic, never
pydantic-settings; ``settings.model`` hands this class out on first use.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aicr_runner.settings.checks import ENV_PREFIX, LogFormat, _choice, _k8s_name, _seconds, absolute_path
from aicr_runner.settings.model import (
    AicrSettings,
    BundleSettings,
    Criteria,
    DeploySettings,
    EnvironmentSettings,
    LeaseSettings,
    MirrorSettings,
    PackSettings,
    RecipeSettings,
    ReportsSettings,
    SnapshotSettings,
    UpgradeCheckSettings,
    ValidateSettings,
    _v,
)

__all__ = ["RunnerSettings"]


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
        status_configmap: Annotated[str, _v(_k8s_name())] = "aicr-run-status"
        #: Namespace of the result ConfigMaps; empty: the pod's.
        namespace: Annotated[str, _v(_k8s_name(63))] = ""
        work_dir: Annotated[str, _v(absolute_path(required=True))] = "/tmp/aicr-runner"  # noqa: S108 - the pod mounts an emptyDir there
        log_format: Annotated[LogFormat, _v(_choice(LogFormat))] = LogFormat.CONSOLE
        #: Empty outside a pod (the chart sets /dev/termination-log): a local run writes
        #: only under its work and results directories.
        termination_message_path: Annotated[str, _v(absolute_path())] = ""
        #: How long a running child (helm inside deploy.sh) may finish after SIGTERM.
        shutdown_grace_seconds: Annotated[float, _v(_seconds(3600, zero=True))] = 60.0
        #: How long one Kubernetes API call may take, retries included (429, 5xx, connection
        #: errors, no answer); no call waits longer, whatever its own budget.
        kube_write_budget_seconds: Annotated[float, _v(_seconds(3600))] = 120.0

        @property
        def work_path(self) -> Path:
            return Path(self.work_dir)
