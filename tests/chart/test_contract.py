"""The chart and the runtime agree on the environment contract.

For each example (and the defaults with criteria), the Job container's env value
entries are fed to ``aicr_runner.settings.config.load``: they must parse, pass the
runtime's own cross-field rules and mean what the values said. The set of
AICR_RUNNER_* names the chart renders must equal ``env_var_names()``: no variable
the runtime does not read, no runtime setting the chart cannot reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.errors import ConfigError
from aicr_runner.settings.config import (
    Arch,
    HelmApply,
    LogFormat,
    Phase,
    PublishMode,
    RunnerSettings,
    env_var_names,
    load,
)
from aicr_runner.settings.model import chart_facts
from aicr_runner.settings.runner import leaves
from aicr_runner.settings.values_file import regrouped
from tests.chart.helm import NAMESPACE, ROOT, Rendered, merge, render, renders

EXAMPLES = sorted((ROOT / "examples" / "values").glob("*.yaml"))
PREFIX = "AICR_RUNNER_"


def settings_of(result: Rendered) -> RunnerSettings:
    return load(result.env)


def runner_names(result: Rendered) -> set[str]:
    names = [entry["name"] for entry in result.env_list] + list(result.env_from)
    return {name for name in names if name.startswith(PREFIX)}


def example_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


#: The variables the chart renders only when their chart value is not its default
#: (``setting(omit_default=True)``), each with a value that is not.
WHEN_NOT_DEFAULT = {"AICR_RUNNER_DEPLOY__HELM_APPLY": ("deploy", "helmApply", "auto")}
ALL_SET = "defaults+criteria, every setting rendered only when not at its default"

CASES: dict[str, dict[str, Any]] = (
    {"defaults+criteria": {"accelerator": "h100"}}
    | {path.name: example_values(path) for path in EXAMPLES}
    | {ALL_SET: merge({"accelerator": "h100"}, {g: {k: v} for g, k, v in WHEN_NOT_DEFAULT.values()})}
)


def test_every_setting_rendered_only_when_not_at_its_default_has_a_sample() -> None:
    marked = {PREFIX + name for name, field in leaves() if chart_facts(field).get("omit_default")}
    assert marked == set(WHEN_NOT_DEFAULT)
    assert {".".join(s[:2]) for s in WHEN_NOT_DEFAULT.values()} == {
        chart_facts(field)["chart"] for name, field in leaves() if PREFIX + name in marked
    }


@pytest.mark.parametrize("name", list(CASES))
def test_every_runtime_setting_is_rendered_and_nothing_else(name: str) -> None:
    result = renders(CASES[name], raw=True)
    rendered = [entry["name"] for entry in result.env_list if entry["name"].startswith(PREFIX)]
    rendered += [name for name in result.env_from if name.startswith(PREFIX)]
    assert len(rendered) == len(set(rendered)), "an AICR_RUNNER_* variable is rendered twice"
    # The examples leave those at their defaults: the runtime's default then applies.
    assert set(rendered) == set(env_var_names()) - (set() if name == ALL_SET else set(WHEN_NOT_DEFAULT))


@pytest.mark.parametrize("name", list(CASES))
def test_the_runtime_parses_what_the_chart_renders(name: str) -> None:
    settings = settings_of(renders(CASES[name], raw=True))
    # The examples give the grouped names, "defaults+criteria" an earlier one: read under the new.
    values = regrouped(CASES[name], name)
    criteria = values.get("criteria", {})
    assert settings.criteria.service == criteria.get("service", "any")
    assert settings.criteria.accelerator == criteria.get("accelerator", "")
    assert settings.criteria.intent == criteria.get("intent", "")
    assert settings.criteria.os == criteria.get("os", "")
    assert settings.pack.ref == values.get("pack", {}).get("ref", "")
    assert settings.deploy.enabled is values.get("deploy", {}).get("enabled", True)
    validate = values.get("validate", {})
    assert settings.validate.enabled is validate.get("enabled", False)
    assert [phase.value for phase in settings.validate.phases] == validate.get("phases", ["deployment"])
    assert settings.validate.publish.enabled is validate.get("publish", {}).get("enabled", False)
    assert settings.namespace == NAMESPACE
    assert settings.work_dir == "/work"
    assert settings.recipe.args == values.get("recipe", {}).get("args", [])
    assert settings.deploy.args == values.get("deploy", {}).get("args", [])
    assert settings.validate.args == validate.get("args", [])
    assert settings.bundle.args == values.get("bundle", {}).get("args", [])


def test_defaults_mean_the_runtime_defaults_except_where_the_chart_decides() -> None:
    settings = settings_of(renders())
    assert settings.criteria.accelerator == "h100"
    assert settings.aicr.version == "v1.2.0"
    assert settings.aicr.arch is Arch.AMD64
    assert settings.aicr.pin == ""
    assert settings.aicr.release_base_url == "https://github.com/NVIDIA/aicr/releases/download"
    assert (settings.aicr.download_attempts, settings.aicr.download_timeout_seconds) == (5, 60.0)
    assert settings.aicr.download_budget_seconds == 600.0
    assert settings.deploy.flags == "--best-effort --no-wait"
    assert settings.deploy.best_effort is True
    assert settings.deploy.helm_apply is HelmApply.CLIENT  # not rendered: the runtime's default
    assert settings.recipe.configmap == "aicr-recipe"
    assert settings.validate.result_configmap == "aicr-validate-result"
    assert settings.validate.evidence_configmap == "aicr-evidence-bundle"
    assert settings.status_configmap == "aicr-run-status"
    assert settings.validate.phases == [Phase.DEPLOYMENT]
    assert settings.validate.publish.mode is PublishMode.SIGNED
    assert settings.log_format is LogFormat.CONSOLE
    assert settings.termination_message_path == "/dev/termination-log"
    assert settings.shutdown_grace_seconds == 1245.0
    assert settings.pack.credentials_file == ""
    assert settings.recipe.expect.any_set is False


def test_credentials_reach_the_runtime_as_file_paths() -> None:
    values = {
        "dataPack": "ghcr.io/acme/aicr-pack:1.0.0",
        "dataPackSecret": "acme",
        "validate": {
            "enabled": True,
            "emitEvidence": True,
            "publish": {
                "enabled": True,
                "ref": "ghcr.io/acme/aicr-evidence",
                "identityTokenSecret": {"name": "oidc"},
                "registrySecret": "push",
            },
        },
    }
    result = renders(values)
    settings = settings_of(result)
    assert settings.pack.credentials_file == "/etc/aicr-runner/pack-auth/config.json"
    assert settings.validate.publish.registry_config_dir == "/etc/aicr-runner/publish-auth"
    assert settings.validate.publish.identity_token_file == "/etc/aicr-runner/identity-token/token"
    mounts = {m["mountPath"] for m in result.mounts.values()}
    assert {"/etc/aicr-runner/pack-auth", "/etc/aicr-runner/publish-auth", "/etc/aicr-runner/identity-token"} <= mounts
    items = {name: vol["secret"]["items"][0]["path"] for name, vol in result.volumes.items() if "secret" in vol}
    assert items == {"pack-auth": "config.json", "publish-auth": "config.json", "identity-token": "token"}


def test_every_value_reaches_the_runtime_typed() -> None:
    values = {
        "service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu", "platform": "kubeflow",
        "aicrArch": "arm64", "aicrSha256": {"amd64": "A" * 64, "arm64": "b" * 64},
        "aicrBinary": {"path": "/opt/aicr/aicr", "sha256": "c" * 64},
        "aicrDownload": {"attempts": 2, "timeoutSeconds": 12.5, "budgetSeconds": 90},
        "recipe": {"expect": {"minComponents": 11, "components": ["gpu-operator"], "overlays": ["k0s"]}},
        "environment": {"preinstalledDriver": True}, "storageClass": "gp3", "logFormat": "json",
        "dataPack": "ghcr.io/acme/p:1", "dataPackPlainHTTP": True, "dataPackInsecureTLS": True,
        "job": {"terminationGracePeriodSeconds": 300},
        "validate": {"enabled": True, "failOnError": True, "emitEvidence": True, "phases": ["", "conformance"],
                     "publish": {"enabled": True, "mode": "unsigned", "ref": "r.example/e", "failOnError": True,
                                 "insecureTLS": True, "plainHTTP": True}},
    }  # fmt: skip
    s = settings_of(renders(values))
    assert s.criteria.platform == "kubeflow"
    assert s.aicr.arch is Arch.ARM64
    assert s.aicr.pin == "b" * 64
    assert s.aicr.sha256.amd64 == "a" * 64
    assert (s.aicr.binary, s.aicr.binary_sha256) == ("/opt/aicr/aicr", "c" * 64)
    assert (s.aicr.download_attempts, s.aicr.download_timeout_seconds, s.aicr.download_budget_seconds) == (
        2,
        12.5,
        90.0,
    )
    assert (s.recipe.expect.min_components, s.recipe.expect.components, s.recipe.expect.overlays) == (
        11,
        ["gpu-operator"],
        ["k0s"],
    )
    assert s.environment.preinstalled_driver is True
    assert s.bundle.storage_class == "gp3"
    assert s.log_format is LogFormat.JSON
    assert (s.pack.plain_http, s.pack.insecure_tls) == (True, True)
    assert s.shutdown_grace_seconds == 285.0
    assert (s.validate.fail_on_error, s.validate.emit_evidence) == (True, True)
    assert s.validate.phases == [Phase.CONFORMANCE]
    publish = s.validate.publish
    assert publish.mode is PublishMode.UNSIGNED
    assert (publish.fail_on_error, publish.insecure_tls, publish.plain_http) == (True, True, True)
    assert publish.identity_token_file == ""


def test_chart_guards_and_runtime_rules_agree_on_a_bad_combination() -> None:
    """A value set the chart refuses is also refused by the runtime (docker run users)."""
    bad = {"intent": "training", "accelerator": "h100"}
    assert not render(bad, raw=True).ok
    forced = renders(merge(bad, {"intent": ""}), raw=True).env | {"AICR_RUNNER_CRITERIA__INTENT": "training"}
    with pytest.raises(ConfigError, match="CRITERIA__INTENT"):
        load(forced)


def test_an_unknown_runtime_variable_would_be_refused() -> None:
    env = renders().env | {"AICR_RUNNER_NOT_A_SETTING": "x"}
    with pytest.raises(ConfigError, match="AICR_RUNNER_NOT_A_SETTING"):
        load(env)
    assert runner_names(renders()) == set(env_var_names()) - set(WHEN_NOT_DEFAULT)
    assert runner_names(renders(CASES[ALL_SET])) == set(env_var_names())
