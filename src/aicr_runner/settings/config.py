"""The environment contract: every runtime input, typed, in one settings model.

Variables use the prefix ``AICR_RUNNER_``; nested groups are joined with ``__``
(``AICR_RUNNER_VALIDATE__PUBLISH__MODE``); list values are JSON arrays. An empty
string is a value, not "unset" (an empty ConfigMap name turns that capture off, as
in the chart this replaces).

The settings are a pydantic-settings tree (``settings.model``); every field carries
one of the checks of ``settings.checks``, which run whether a value comes from the environment or
from code (``AicrSettings(version="1.2.0")``). ``load`` (``settings.load``) reads
the variables and turns pydantic's errors into one line per problem
(``settings.problems``): the variable that is actually wrong, its value (cut and
escaped) and what is allowed. Every pattern is matched whole (``fullmatch``),
every value must be UTF-8 without control characters, JSON lists are size- and
depth-bounded, numbers finite and bounded. Credentials never go in a URL: a URL
with a user or password is refused and shown with them masked.

This module is the contract's one import point. The checks, the enums and the
message helpers (``settings.checks``) need only the standard library; the settings
classes are imported from here on first use and ``load`` imports its module
when called, so what needs only a name or an enum (the log format, a values file
refused before any setting is read) does not pay for pydantic.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aicr_runner.settings.checks import (
    DEFAULT_RELEASE_BASE_URL,
    ENV_PREFIX,
    MAX_FLAGS_CHARS,
    MAX_LINE_CHARS,
    MAX_LIST_CHARS,
    MAX_LIST_ITEMS,
    MAX_PROBLEMS,
    MAX_TEXT_CHARS,
    MIN_SECONDS,
    NON_CONCRETE_SERVICES,
    SHOW_CHARS,
    Arch,
    HelmApply,
    Invalid,
    LogFormat,
    Phase,
    ProvenanceMode,
    PublishMode,
    ReportsApi,
    UnknownPolicy,
    absolute_path,
    escaped,
    problem_line,
    shown,
)

if TYPE_CHECKING:
    from aicr_runner.settings.model import (
        AICR_RELEASE_IDENTITY,
        GITHUB_ACTIONS_ISSUER,
        AicrSettings,
        BundleSettings,
        Criteria,
        DeploySettings,
        EnvironmentSettings,
        LeaseSettings,
        PackSettings,
        ProvenanceSettings,
        PublishSettings,
        RecipeExpectations,
        RecipeSettings,
        ReportsSettings,
        Sha256Pins,
        SnapshotSettings,
        StepArgs,
        UpgradeCheckSettings,
        ValidateSettings,
    )
    from aicr_runner.settings.runner import RunnerSettings

__all__ = [
    "AICR_RELEASE_IDENTITY",
    "DEFAULT_RELEASE_BASE_URL",
    "ENV_PREFIX",
    "GITHUB_ACTIONS_ISSUER",
    "MAX_FLAGS_CHARS",
    "MAX_LINE_CHARS",
    "MAX_LIST_CHARS",
    "MAX_LIST_ITEMS",
    "MAX_PROBLEMS",
    "MAX_TEXT_CHARS",
    "MIN_SECONDS",
    "NON_CONCRETE_SERVICES",
    "SHOW_CHARS",
    "AicrSettings",
    "Arch",
    "BundleSettings",
    "Criteria",
    "DeploySettings",
    "EnvironmentSettings",
    "HelmApply",
    "Invalid",
    "LeaseSettings",
    "LogFormat",
    "PackSettings",
    "Phase",
    "ProvenanceMode",
    "ProvenanceSettings",
    "PublishMode",
    "PublishSettings",
    "RecipeExpectations",
    "RecipeSettings",
    "ReportsApi",
    "ReportsSettings",
    "RunnerSettings",
    "Sha256Pins",
    "SnapshotSettings",
    "StepArgs",
    "UnknownPolicy",
    "UpgradeCheckSettings",
    "ValidateSettings",
    "absolute_path",
    "env_var_names",
    "escaped",
    "load",
    "problem_line",
    "shown",
]

#: The settings classes, handed out from ``settings.model`` on first use.
_MODEL_NAMES = frozenset(
    {
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
    }
)


def load(environ: Mapping[str, str] | None = None, *, local_pack: bool = False) -> RunnerSettings:
    """Read settings from ``environ`` (default ``os.environ``); see ``settings.load.load``.

    Imported when called, so a command refused before its settings are read (a
    bad values file, a bad flag) never imports pydantic.
    """
    from aicr_runner.settings import load as config_load

    return config_load.load(environ, local_pack=local_pack)


def env_var_names() -> list[str]:
    """Every environment variable the runtime reads (the contract test uses this)."""
    from aicr_runner.settings import load as config_load

    return config_load.env_var_names()


def __getattr__(name: str) -> Any:
    """The settings classes, imported (with pydantic) when first asked for."""
    if name not in _MODEL_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # RunnerSettings comes with pydantic-settings; a group alone needs pydantic only.
    module = importlib.import_module(
        "aicr_runner.settings.runner" if name == "RunnerSettings" else "aicr_runner.settings.model"
    )
    value = getattr(module, name)
    globals()[name] = value
    return value
