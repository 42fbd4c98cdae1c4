"""The environment contract: parsing, and one clear line per bad input (exit 2)."""

from __future__ import annotations

import pytest

from aicr_runner.errors import ConfigError, ExitCode
from aicr_runner.settings import config
from aicr_runner.settings.config import Arch, Phase, PublishMode, load

BASE = {"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"}


def problems(env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load({**BASE, **env})
    return caught.value.problems


def test_defaults_match_the_anchor_chart() -> None:
    s = load(BASE)
    assert s.criteria.stated() == {"accelerator": "h100"}
    assert s.aicr.version == "v1.2.0"
    assert s.recipe.configmap == "aicr-recipe"
    assert s.validate.phases == [Phase.DEPLOYMENT]
    assert s.validate.result_configmap == "aicr-validate-result"
    assert s.validate.evidence_configmap == "aicr-evidence-bundle"
    assert s.validate.publish.mode is PublishMode.SIGNED
    assert s.deploy.enabled is True
    assert s.deploy.flags == "--best-effort --no-wait"
    assert s.deploy.best_effort is True
    assert s.status_configmap == "aicr-run-status"


def test_nested_groups_lists_and_empty_strings() -> None:
    s = load(
        {
            **BASE,
            "AICR_RUNNER_VALIDATE__ENABLED": "true",
            "AICR_RUNNER_VALIDATE__PHASES": '["deployment", "conformance"]',
            "AICR_RUNNER_RECIPE__ARGS": '["--nodes", "4", "it\'s *.yaml"]',
            "AICR_RUNNER_RECIPE__CONFIGMAP": "",
            "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "false",
            "AICR_RUNNER_AICR__VERSION": "1.2.0",
            "AICR_RUNNER_AICR__ARCH": "arm64",
            "AICR_RUNNER_AICR__SHA256__ARM64": "A" * 64,
        }
    )
    assert s.validate.enabled is True
    assert s.validate.phases == [Phase.DEPLOYMENT, Phase.CONFORMANCE]
    assert s.recipe.args == ["--nodes", "4", "it's *.yaml"]
    assert s.recipe.configmap == "", "an empty name turns the capture off, as in the anchor"
    assert s.aicr.version == "v1.2.0", "the leading v is added"
    assert s.aicr.arch is Arch.ARM64
    assert s.aicr.pin == "a" * 64


def test_a_pin_never_crosses_architectures() -> None:
    s = load({**BASE, "AICR_RUNNER_AICR__ARCH": "arm64", "AICR_RUNNER_AICR__SHA256__AMD64": "b" * 64})
    assert s.aicr.pin == ""


@pytest.mark.parametrize("word", ["client", "server", "auto"])
def test_helm_apply_takes_its_three_words_and_defaults_to_client(word: str) -> None:
    from aicr_runner.settings.config import HelmApply

    assert load(BASE).deploy.helm_apply is HelmApply.CLIENT
    assert load({**BASE, "AICR_RUNNER_DEPLOY__HELM_APPLY": word}).deploy.helm_apply is HelmApply(word)


def test_best_effort_is_found_in_the_args_list_too() -> None:
    s = load({**BASE, "AICR_RUNNER_DEPLOY__FLAGS": "", "AICR_RUNNER_DEPLOY__ARGS": '["--best-effort"]'})
    assert s.deploy.best_effort is True
    s = load({**BASE, "AICR_RUNNER_DEPLOY__FLAGS": "--retries 1"})
    assert s.deploy.best_effort is False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AICR_RUNNER_AICR__ARCH": "x86"}, "AICR_RUNNER_AICR__ARCH='x86': allowed: 'amd64' or 'arm64'"),
        ({"AICR_RUNNER_DEPLOY__ENABLED": "maybe"}, "AICR_RUNNER_DEPLOY__ENABLED='maybe': allowed: true or false"),
        (
            {"AICR_RUNNER_VALIDATE__PHASES": '["bogus"]'},
            "AICR_RUNNER_VALIDATE__PHASES='[\"bogus\"]' (item 0): allowed: 'deployment', 'performance' or "
            "'conformance'",
        ),
        (
            {"AICR_RUNNER_VALIDATE__PHASES": "deployment"},
            "AICR_RUNNER_VALIDATE__PHASES='deployment': not valid JSON; list values are JSON arrays",
        ),
        (
            {"AICR_RUNNER_VALIDATE__PUBLISH__MODE": "keyless"},
            "AICR_RUNNER_VALIDATE__PUBLISH__MODE='keyless': allowed: 'signed' or 'unsigned'",
        ),
        ({"AICR_RUNNER_AICR__SHA256__AMD64": "abc"}, "AICR_RUNNER_AICR__SHA256__AMD64='abc': must be empty or 64"),
        ({"AICR_RUNNER_AICR__VERSION": "latest"}, "AICR_RUNNER_AICR__VERSION='latest': must be a release tag"),
        ({"AICR_RUNNER_AICR__RELEASE_BASE_URL": "ftp://x"}, "AICR_RUNNER_AICR__RELEASE_BASE_URL='ftp://x': must be"),
        (
            {"AICR_RUNNER_AICR__DOWNLOAD_ATTEMPTS": "0"},
            "AICR_RUNNER_AICR__DOWNLOAD_ATTEMPTS='0': allowed: a whole number from 1 to 20",
        ),
        (
            {"AICR_RUNNER_RECIPE__EXPECT__MIN_COMPONENTS": "x"},
            "RECIPE__EXPECT__MIN_COMPONENTS='x': allowed: a whole number",
        ),
        ({"AICR_RUNNER_LOG_FORMAT": "xml"}, "AICR_RUNNER_LOG_FORMAT='xml': allowed: 'console' or 'json'"),
        (
            {"AICR_RUNNER_DEPLOY__HELM_APPLY": "false"},
            "AICR_RUNNER_DEPLOY__HELM_APPLY='false': allowed: 'client', 'server' or 'auto'",
        ),
        ({"AICR_RUNNER_STATUS_CONFIGMAP": "Bad_Name"}, "AICR_RUNNER_STATUS_CONFIGMAP='Bad_Name': must be empty or"),
        ({"AICR_RUNNER_PACK__REF": "oci://x/y:1"}, "AICR_RUNNER_PACK__REF='oci://x/y:1': must be an OCI reference"),
        ({"AICR_RUNNER_CRITERIA__SERVCE": "eks"}, "AICR_RUNNER_CRITERIA__SERVCE: unknown setting"),
        ({"AICR_RUNNER_TYPO": "1"}, "AICR_RUNNER_TYPO: unknown setting"),
    ],
)
def test_each_bad_value_gets_one_line_naming_the_variable(env: dict[str, str], expected: str) -> None:
    found = problems(env)
    assert len(found) == 1, found
    assert expected in found[0]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AICR_RUNNER_CRITERIA__ACCELERATOR": ""}, "no criteria stated"),
        ({"AICR_RUNNER_CRITERIA__ACCELERATOR": "any"}, "'any' is not an accelerator"),
        ({"AICR_RUNNER_DEPLOY__ENABLED": "false"}, "DEPLOY__ENABLED=false needs AICR_RUNNER_VALIDATE__ENABLED=true"),
        (
            {"AICR_RUNNER_VALIDATE__ENABLED": "true", "AICR_RUNNER_VALIDATE__PHASES": "[]"},
            "name at least one phase",
        ),
        (
            {
                "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__MODE": "unsigned",
                "AICR_RUNNER_VALIDATE__PUBLISH__REF": "r/e",
                "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true",
            },
            "publishing needs a validation run",
        ),
        (
            {
                "AICR_RUNNER_VALIDATE__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__MODE": "unsigned",
                "AICR_RUNNER_VALIDATE__PUBLISH__REF": "r/e",
            },
            "without --emit-attestation there is no bundle to publish",
        ),
        (
            {
                "AICR_RUNNER_VALIDATE__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__MODE": "unsigned",
            },
            "VALIDATE__PUBLISH__REF='': publishing needs an OCI push target",
        ),
        (
            {
                "AICR_RUNNER_VALIDATE__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "true",
                "AICR_RUNNER_VALIDATE__PUBLISH__REF": "r/e",
            },
            "IDENTITY_TOKEN_FILE='' with mode=signed",
        ),
        (
            {"AICR_RUNNER_CRITERIA__SERVICE": "any", "AICR_RUNNER_CRITERIA__INTENT": "training"},
            "a stated intent needs a service whose overlays declare it",
        ),
        ({"AICR_RUNNER_CRITERIA__SERVICE": "self-managed"}, "maps this alias to 'generic'"),
        ({"AICR_RUNNER_PACK__PLAIN_HTTP": "true"}, "pack transport settings need a pack"),
        ({"AICR_RUNNER_AICR__BINARY_SHA256": "c" * 64}, "the hash pins a preinstalled binary"),
        (
            {"AICR_RUNNER_CRITERIA__SERVICE": "k0s", "AICR_RUNNER_AICR__VERSION": "v0.21.0"},
            "service k0s needs aicr v0.22.0 or later",
        ),
    ],
)
def test_cross_field_guards(env: dict[str, str], expected: str) -> None:
    found = problems(env)
    assert any(expected in line for line in found), found


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("v1.2.0", "aicr v1.2.0 maps this alias to 'generic'"),
        ("v0.11.1", "aicr v0.11.1 maps this alias to 'any', so no service overlay applies"),
    ],
)
def test_alias_and_any_refusals_say_what_the_tagged_aicr_does(version: str, said: str) -> None:
    env = {"AICR_RUNNER_AICR__VERSION": version, "AICR_RUNNER_CRITERIA__SERVICE": "self-managed"}
    assert any(said in line for line in problems({**env, "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"}))
    any_accelerator = problems(
        {**env, "AICR_RUNNER_CRITERIA__SERVICE": "eks", "AICR_RUNNER_CRITERIA__ACCELERATOR": "any"}
    )
    expected = "answers 'no criteria provided'" if version == "v1.2.0" else "reads it as no accelerator"
    assert any(expected in line for line in any_accelerator), any_accelerator


def test_a_preinstalled_aicrs_alias_refusal_waits_for_its_version() -> None:
    """Its version is known once the fetch step asked it; the step refuses then, in its words."""
    env = {"AICR_RUNNER_AICR__BINARY": "/opt/aicr", "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"}
    settings = load({**BASE, **env, "AICR_RUNNER_CRITERIA__SERVICE": "self-managed"})
    assert settings.criteria.service == "self-managed"


def test_the_criteria_guard_escapes() -> None:
    load({"AICR_RUNNER_PACK__REF": "reg.example/acme/pack:1"})
    load({"AICR_RUNNER_CRITERIA__SERVICE": "bcm", "AICR_RUNNER_CRITERIA__INTENT": "inference"})
    with pytest.raises(ConfigError):
        load({"AICR_RUNNER_CRITERIA__SERVICE": "self", "AICR_RUNNER_CRITERIA__INTENT": "inference"})


def test_env_var_names_cover_every_leaf() -> None:
    names = config.env_var_names()
    assert "AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE" in names
    assert "AICR_RUNNER_AICR__SHA256__ARM64" in names
    assert "AICR_RUNNER_RECIPE__EXPECT__OVERLAYS" in names
    assert len(names) == len(set(names))
    assert all(n == n.upper() and n.startswith("AICR_RUNNER_") for n in names)


def test_cli_prints_one_line_per_problem_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from aicr_runner.cli import main

    code = main(["run"], environ={"AICR_RUNNER_AICR__ARCH": "x86", "AICR_RUNNER_DEPLOY__ENABLED": "maybe"})
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert int(ExitCode.BAD_INPUT) == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [
        "aicr-runner: invalid setting: AICR_RUNNER_AICR__ARCH='x86': allowed: 'amd64' or 'arm64'",
        "aicr-runner: invalid setting: AICR_RUNNER_DEPLOY__ENABLED='maybe': allowed: true or false",
    ]
    assert "Traceback" not in err


def test_the_release_comes_from_a_registry_or_an_http_folder_not_both() -> None:
    ref = "mirror.example.test/site/nvidia/aicr/release:v1.2.0"
    assert load({**BASE, "AICR_RUNNER_AICR__RELEASE_REF": ref}).aicr.release_ref == ref
    found = problems(
        {
            "AICR_RUNNER_AICR__RELEASE_REF": ref,
            "AICR_RUNNER_AICR__RELEASE_BASE_URL": "http://releases.example.test/aicr",
        }
    )
    assert any(
        line.startswith(f"AICR_RUNNER_AICR__RELEASE_REF={ref!r} with AICR_RUNNER_AICR__RELEASE_BASE_URL")
        for line in found
    )
    assert problems({"AICR_RUNNER_AICR__RELEASE_REF": "oci://mirror.example.test/r:v1"})
