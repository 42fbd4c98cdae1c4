"""argv builders: order, optional flags, and verbatim pass-through (anchor R-07..R-19)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicr_runner.aicr import argv as commands
from aicr_runner.settings import config
from aicr_runner.settings.config import RunnerSettings
from aicr_runner.settings.names import CRITERIA_DIMENSIONS, CRITERIA_FLAG_ORDER

AICR = Path("/opt/aicr")
RECIPE = Path("/w/recipe.yaml")
PACK = Path("/data/pack")
BUNDLE = Path("/w/bundle")
CTRF = Path("/w/ctrf.json")
EVIDENCE = Path("/w/evidence")


def load(**env: str) -> RunnerSettings:
    base = {"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"}
    base.update({f"AICR_RUNNER_{key.upper()}": value for key, value in env.items()})
    return config.load({k: v for k, v in base.items() if v is not None})


# ---------------------------------------------------------------------------
# recipe
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "expected"),
    [
        ({"accelerator": "h100"}, ["--accelerator", "h100"]),
        (
            {
                "service": "eks",
                "accelerator": "h100",
                "os": "ubuntu",
                "intent": "training",
                "platform": "kubeflow",
            },
            [
                "--service",
                "eks",
                "--accelerator",
                "h100",
                "--os",
                "ubuntu",
                "--intent",
                "training",
                "--platform",
                "kubeflow",
            ],
        ),
        (
            {
                "platform": "dynamo",
                "intent": "inference",
                "service": "gke",
                "os": "cos",
                "accelerator": "b200",
            },
            [
                "--service",
                "gke",
                "--accelerator",
                "b200",
                "--os",
                "cos",
                "--intent",
                "inference",
                "--platform",
                "dynamo",
            ],
        ),
        (
            {"service": "bcm", "intent": "inference", "accelerator": ""},
            ["--service", "bcm", "--intent", "inference"],
        ),
    ],
)
def test_recipe_states_only_nonempty_criteria_in_the_anchor_order(
    criteria: dict[str, str], expected: list[str]
) -> None:
    env = {f"criteria__{name}": value for name, value in criteria.items()}
    env.setdefault("criteria__accelerator", "")
    argv = commands.recipe_argv(load(**env), AICR, None, RECIPE)
    assert argv == [str(AICR), "--log-json", "recipe", *expected, "--output", str(RECIPE)]


def test_recipe_adds_the_pack_then_flags_then_args() -> None:
    s = load(recipe__flags="--nodes 4  --criteria-strict", recipe__args=json.dumps(["--profile", "gpuStack=a b"]))
    assert commands.recipe_argv(s, AICR, PACK, RECIPE) == [
        str(AICR),
        "--log-json",
        "recipe",
        "--accelerator",
        "h100",
        "--data",
        str(PACK),
        "--output",
        str(RECIPE),
        "--nodes",
        "4",
        "--criteria-strict",
        "--profile",
        "gpuStack=a b",
    ]


# ---------------------------------------------------------------------------
# bundle
# ---------------------------------------------------------------------------


def test_bundle_minimal() -> None:
    assert commands.bundle_argv(load(), AICR, RECIPE, BUNDLE, None) == [
        str(AICR),
        "--log-json",
        "bundle",
        "--recipe",
        str(RECIPE),
        "--deployer",
        "helm",
        "--output",
        str(BUNDLE),
    ]


def test_bundle_orders_storage_class_data_profile_flags_args() -> None:
    s = load(
        bundle__storage_class="gp3",
        environment__preinstalled_driver="true",
        bundle__flags="--set gpuoperator:driver.enabled=true",
        bundle__args=json.dumps(["--system-node-selector", "role=system"]),
    )
    argv = commands.bundle_argv(s, AICR, RECIPE, BUNDLE, PACK)
    assert argv[9:] == [
        "--storage-class",
        "gp3",
        "--data",
        str(PACK),
        "--set",
        "gpuoperator:driver.enabled=false",
        "--set",
        "dradriver:nvidiaDriverRoot=/",
        "--set",
        "nvsentinel:labeler.assumeDriverInstalled=true",
        "--set",
        "gpuoperator:driver.enabled=true",
        "--system-node-selector",
        "role=system",
    ]
    # The user's override comes after the profile's, so it wins.
    sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
    assert sets.index("gpuoperator:driver.enabled=true") > sets.index("gpuoperator:driver.enabled=false")


def test_bundle_without_the_profile_sets_nothing() -> None:
    assert "--set" not in commands.bundle_argv(load(), AICR, RECIPE, BUNDLE, PACK)


# ---------------------------------------------------------------------------
# verify, deploy
# ---------------------------------------------------------------------------


def test_verify() -> None:
    assert commands.verify_argv(load(), AICR, BUNDLE) == [str(AICR), "--log-json", "verify", str(BUNDLE)]


@pytest.mark.parametrize(
    ("flags", "args", "expected"),
    [
        (None, None, ["--best-effort", "--no-wait"]),
        ("", None, []),
        ("--retries 1", json.dumps(["--best-effort"]), ["--retries", "1", "--best-effort"]),
        ("  --no-wait\t--retries  2 ", "[]", ["--no-wait", "--retries", "2"]),
    ],
)
def test_deploy_runs_deploy_sh_with_flags_then_args(flags: str | None, args: str | None, expected: list[str]) -> None:
    env = {key: value for key, value in (("deploy__flags", flags), ("deploy__args", args)) if value is not None}
    assert commands.deploy_argv(load(**env), BUNDLE) == ["bash", str(BUNDLE / "deploy.sh"), *expected]


# ---------------------------------------------------------------------------
# validate, publish
# ---------------------------------------------------------------------------


def test_validate_defaults() -> None:
    s = load(validate__enabled="true")
    assert commands.validate_argv(s, AICR, RECIPE, None, CTRF, EVIDENCE) == [
        str(AICR),
        "--log-json",
        "validate",
        "--recipe",
        str(RECIPE),
        "--phase",
        "deployment",
        "--output",
        str(CTRF),
    ]


def test_validate_full() -> None:
    s = load(
        validate__enabled="true",
        validate__phases=json.dumps(["deployment", "conformance"]),
        validate__emit_evidence="true",
        validate__flags="--namespace aicr-validation",
        validate__args=json.dumps(["--image-pull-secret", "regcred"]),
    )
    assert commands.validate_argv(s, AICR, RECIPE, PACK, CTRF, EVIDENCE) == [
        str(AICR),
        "--log-json",
        "validate",
        "--recipe",
        str(RECIPE),
        "--phase",
        "deployment",
        "--phase",
        "conformance",
        "--data",
        str(PACK),
        "--emit-attestation",
        str(EVIDENCE),
        "--output",
        str(CTRF),
        "--namespace",
        "aicr-validation",
        "--image-pull-secret",
        "regcred",
    ]


PUBLISH = {
    "validate__enabled": "true",
    "validate__emit_evidence": "true",
    "validate__publish__enabled": "true",
    "validate__publish__ref": "ghcr.io/acme/evidence",
}


@pytest.mark.parametrize(
    ("extra", "tail"),
    [
        ({"validate__publish__mode": "unsigned"}, ["--no-sign"]),
        ({"validate__publish__identity_token_file": "/var/run/oidc/token"}, []),
        (
            {
                "validate__publish__mode": "unsigned",
                "validate__publish__insecure_tls": "true",
                "validate__publish__plain_http": "true",
            },
            ["--no-sign", "--insecure-tls", "--plain-http"],
        ),
    ],
)
def test_publish(extra: dict[str, str], tail: list[str]) -> None:
    argv = commands.publish_argv(load(**PUBLISH, **extra), AICR, EVIDENCE)
    assert argv == [
        str(AICR),
        "--log-json",
        "evidence",
        "publish",
        str(EVIDENCE),
        "--push",
        "ghcr.io/acme/evidence",
        "--yes",
        *tail,
    ]


def test_publish_never_puts_credentials_on_the_command_line() -> None:
    s = load(**PUBLISH, validate__publish__identity_token_file="/t", validate__publish__registry_config_dir="/auth")
    argv = commands.publish_argv(s, AICR, EVIDENCE)
    assert not any(word in argv for word in ("/t", "/auth", "--identity-token"))


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------

WORDS = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)


@given(st.text(alphabet=st.sampled_from(list("ab*?[]{}~$' \"\t\n-=")), max_size=40))
def test_split_flags_is_a_plain_whitespace_split(flags: str) -> None:
    assert commands.split_flags(flags) == flags.split()


def test_split_flags_never_expands_globs(tmp_path: Path) -> None:
    (tmp_path / "match-me").write_text("")
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert commands.split_flags("--set a=* match-* ~ $HOME") == ["--set", "a=*", "match-*", "~", "$HOME"]
    finally:
        os.chdir(cwd)


@settings(max_examples=40, deadline=None)
@given(st.lists(WORDS, max_size=5), st.lists(WORDS, max_size=5), st.lists(WORDS, max_size=5))
def test_args_lists_are_appended_verbatim_and_last(recipe: list[str], bundle: list[str], deploy: list[str]) -> None:
    s = load(
        recipe__args=json.dumps(recipe),
        bundle__args=json.dumps(bundle),
        deploy__args=json.dumps(deploy),
        deploy__flags="--no-wait",
    )
    recipe_argv = commands.recipe_argv(s, AICR, PACK, RECIPE)
    bundle_argv = commands.bundle_argv(s, AICR, RECIPE, BUNDLE, PACK)
    deploy_argv = commands.deploy_argv(s, BUNDLE)
    assert recipe_argv[len(recipe_argv) - len(recipe) :] == recipe
    assert bundle_argv[len(bundle_argv) - len(bundle) :] == bundle
    assert deploy_argv == ["bash", str(BUNDLE / "deploy.sh"), "--no-wait", *deploy]


def test_the_flag_order_names_each_criteria_dimension_once() -> None:
    assert len(set(CRITERIA_FLAG_ORDER)) == len(CRITERIA_FLAG_ORDER)
    assert sorted(CRITERIA_FLAG_ORDER) == sorted(CRITERIA_DIMENSIONS)


# ---------------------------------------------------------------------------
# snapshot
# ---------------------------------------------------------------------------


def test_snapshot_defaults_run_aicrs_own_agent_image_under_the_runners_names() -> None:
    s = load(snapshot__enabled="true")
    assert commands.snapshot_argv(s, AICR, "cm://aicr-validation/aicr-runner-snapshot", "0.11.1") == [
        str(AICR),
        "--log-json",
        "snapshot",
        "--namespace",
        "aicr-validation",
        "--image",
        "ghcr.io/nvidia/aicr:v0.11.1",
        "--job-name",
        "aicr-runner-snapshot",
        "--service-account-name",
        "aicr-runner-snapshot",
        "--privileged=true",
        "--timeout",
        "300s",
        "--output",
        "cm://aicr-validation/aicr-runner-snapshot",
    ]


def test_snapshot_full() -> None:
    s = load(
        snapshot__image="registry.local:5000/nvidia/aicr:v0.11.1",
        snapshot__privileged="false",
        snapshot__timeout_seconds="90",
        snapshot__namespace="diag",
        snapshot__node_selector=json.dumps(["nvidia.com/gpu.present=true", "pool=gpu"]),
        snapshot__tolerations=json.dumps(["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]),
    )
    argv = commands.snapshot_argv(s, AICR, "/w/snapshot.yaml", "v0.11.1")
    assert argv[argv.index("--image") + 1] == "registry.local:5000/nvidia/aicr:v0.11.1"
    assert argv[argv.index("--namespace") + 1] == "diag"
    assert "--privileged=false" in argv
    assert argv[argv.index("--timeout") + 1] == "90s"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--node-selector"] == [
        "nvidia.com/gpu.present=true",
        "pool=gpu",
    ]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--toleration"] == [
        "nvidia.com/gpu=present:NoSchedule",
        "dedicated:NoExecute",
    ]
    assert argv[-2:] == ["--output", "/w/snapshot.yaml"]


def test_validate_with_the_runs_snapshot_starts_no_agent_of_its_own() -> None:
    s = load(validate__enabled="true", validate__args=json.dumps(["--x"]))
    argv = commands.validate_argv(s, AICR, RECIPE, None, CTRF, EVIDENCE, snapshot="cm://ns/snap")
    assert argv[3:7] == ["--recipe", str(RECIPE), "--snapshot", "cm://ns/snap"]
    assert "--snapshot" not in commands.validate_argv(s, AICR, RECIPE, None, CTRF, EVIDENCE)
