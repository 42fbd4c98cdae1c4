"""Recipe document, expectations, thin resolution, rejection."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from aicr_runner.aicr import recipe
from aicr_runner.aicr.recipe import (
    Component,
    RecipeSummary,
    check_expectations,
    dropped_values,
    last_error,
    load_recipe,
    pack_overlay_criteria,
    parse_recipe,
    parse_rejection,
    thin_resolution_warnings,
    unknown_value,
)
from aicr_runner.errors import RecipeFormatError, RunnerError
from aicr_runner.settings import config
from aicr_runner.settings.config import Criteria, RecipeExpectations
from tests.fake_aicr import install_fake_aicr

NAMES = ("cert-manager", "nfd", "gpu-operator")


@pytest.fixture(scope="module")
def fake_aicr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("bin"))


# ---------------------------------------------------------------------------
# recipe document
# ---------------------------------------------------------------------------

RECIPE = {
    "kind": "RecipeResult",
    "apiVersion": "aicr.run/v1",
    "metadata": {"version": "v1.2.0", "appliedOverlays": ["base", "h100-any", "eks"]},
    "criteria": {"service": "eks", "accelerator": "h100", "intent": "any", "os": "any", "platform": "any"},
    "constraints": [{"name": "K8s.server.version", "value": ">= 1.32"}],
    "componentRefs": [
        {
            "name": "gpu-operator",
            "namespace": "gpu-operator",
            "chart": "gpu-operator",
            "type": "Helm",
            "source": "https://helm.ngc.nvidia.com/nvidia",
            "version": "v25.10.1",
        },
        {"name": "nfd", "namespace": "node-feature-discovery", "version": "0.17.3"},
    ],
    "deploymentOrder": ["nfd", "gpu-operator"],
}


def test_parse_recipe_reads_components_overlays_and_criteria() -> None:
    summary = parse_recipe(yaml.safe_dump(RECIPE))
    assert summary.component_names == ["gpu-operator", "nfd"]
    assert summary.components[0] == Component(
        "gpu-operator", "gpu-operator", "gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia", "Helm"
    )
    assert summary.components[1].namespace == "node-feature-discovery"
    assert summary.components[1].chart == ""
    assert summary.applied_overlays == ("base", "h100-any", "eks")
    assert summary.criteria["service"] == "eks"
    assert summary.deployment_order == ("nfd", "gpu-operator")
    assert summary.constraints == {"K8s.server.version": ">= 1.32"}
    assert summary.legacy is False


@pytest.mark.parametrize("api_version", ["aicr.run/v1", "aicr.run/v1beta2", "aicr.nvidia.com/v1alpha1"])
def test_accepted_api_versions(api_version: str) -> None:
    summary = parse_recipe(json.dumps({**RECIPE, "apiVersion": api_version}))
    assert summary.api_version == api_version
    assert summary.legacy is (api_version == "aicr.nvidia.com/v1alpha1")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**RECIPE, "apiVersion": "aicr.run/v2"}, "apiVersion 'aicr.run/v2'"),
        ({**RECIPE, "apiVersion": None}, "apiVersion ''"),
        ({**RECIPE, "kind": "ComponentRegistry"}, "kind 'ComponentRegistry'"),
        ({**RECIPE, "componentRefs": [{"namespace": "x"}]}, "componentRefs"),
        ({**RECIPE, "componentRefs": "nfd"}, "componentRefs"),
    ],
)
def test_parse_recipe_rejects_what_it_cannot_read(document: dict[str, object], message: str) -> None:
    with pytest.raises(RecipeFormatError, match=message):
        parse_recipe(yaml.safe_dump(document))


def test_parse_recipe_rejects_non_mappings_and_bad_yaml() -> None:
    with pytest.raises(RecipeFormatError, match="expected a RecipeResult mapping"):
        parse_recipe("- a\n- b\n")
    with pytest.raises(RecipeFormatError, match="not valid YAML"):
        parse_recipe("a: [b\n")


def test_load_recipe_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeFormatError, match="cannot read the recipe") as caught:
        load_recipe(tmp_path / "recipe.yaml")
    assert caught.value.exit_code == 70


def test_rows_round_trip_through_the_report() -> None:
    summary = parse_recipe(yaml.safe_dump(RECIPE))
    rows = [component.as_row() for component in summary.components]
    assert json.loads(json.dumps(rows)) == rows
    assert RecipeSummary.from_rows(rows).components == summary.components


# ---------------------------------------------------------------------------
# expectations
# ---------------------------------------------------------------------------


def summary_of(names: list[str], overlays: list[str], criteria: dict[str, str] | None = None) -> RecipeSummary:
    return RecipeSummary(
        components=tuple(Component(name) for name in names),
        applied_overlays=tuple(overlays),
        criteria=criteria or {},
    )


TWELVE = [f"c{i}" for i in range(12)]


@pytest.mark.parametrize(
    ("expect", "problems"),
    [
        (RecipeExpectations(), []),
        (RecipeExpectations(min_components=12, components=["c0"], overlays=["base"]), []),
        (
            RecipeExpectations(min_components=15),
            ["resolved 12 components, expected at least 15 (resolved: " + ", ".join(TWELVE) + ")"],
        ),
        (
            RecipeExpectations(components=["c1", "aws-efa", "kubeflow-trainer"]),
            ["expected components missing: aws-efa, kubeflow-trainer (resolved: " + ", ".join(TWELVE) + ")"],
        ),
        (
            RecipeExpectations(overlays=["h100-eks-ubuntu-training"]),
            ["expected overlays not applied: h100-eks-ubuntu-training (applied: base, a100-any)"],
        ),
    ],
)
def test_check_expectations(expect: RecipeExpectations, problems: list[str]) -> None:
    assert check_expectations(summary_of(TWELVE, ["base", "a100-any"]), expect) == problems


def test_every_unmet_expectation_is_reported() -> None:
    expect = RecipeExpectations(min_components=20, components=["x"], overlays=["y"])
    problems = check_expectations(summary_of(TWELVE, ["base"]), expect)
    assert [p.split(" ")[0] for p in problems] == ["resolved", "expected", "expected"]


# ---------------------------------------------------------------------------
# thin resolution
# ---------------------------------------------------------------------------

FULL = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu", "platform": "any"}


def test_a_full_leaf_has_no_warnings() -> None:
    criteria = Criteria(service="eks", accelerator="h100", intent="training", os="ubuntu")
    summary = summary_of(["c"] * 15, ["base", "eks", "h100-eks-ubuntu-training"], FULL)
    assert thin_resolution_warnings(summary, criteria) == []


def test_under_specified_criteria_warn_naming_the_unstated_dimensions() -> None:
    summary = summary_of(TWELVE, ["base", "a100-any"], {**FULL, "service": "any", "accelerator": "a100"})
    *dropped, warning = thin_resolution_warnings(
        summary, Criteria(accelerator="a100", intent="training", os="ubuntu", service="")
    )
    assert warning.startswith("criteria leave service as any")
    assert "12 components from overlays base, a100-any" in warning
    assert [w.split(" ")[0] for w in dropped] == ["os='ubuntu'", "intent='training'"], "a100-any carries neither"


def test_only_base_overlays_warns() -> None:
    # aicr 0.11: an over-specified query silently falls back to the base overlays.
    summary = summary_of(["c"] * 9, ["base", "monitoring-hpa"], {"service": "gke", "accelerator": "h100"})
    criteria = Criteria(service="gke", accelerator="h100", intent="training", os="ubuntu")
    warnings = thin_resolution_warnings(summary, criteria)
    assert (
        warnings[0]
        == "only base overlays applied (base, monitoring-hpa): the criteria matched no specific overlay, 9 components"
    )


def test_a_stated_value_that_resolved_as_any_or_otherwise_warns() -> None:
    criteria = Criteria(service="self-managed", accelerator="h100", intent="training", os="ubuntu")
    summary = summary_of(["c"], ["base", "h100-any"], {**FULL, "service": "any"})
    assert "service='self-managed' was stated but the recipe resolved service=any" in thin_resolution_warnings(
        summary, criteria
    )
    summary = summary_of(["c"], ["base", "h100-any"], {**FULL, "service": "generic"})
    assert "service='self-managed' resolved as service='generic'" in thin_resolution_warnings(summary, criteria)


def test_settings_criteria_feed_the_warnings() -> None:
    settings = config.load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "a100"})
    warnings = thin_resolution_warnings(summary_of(TWELVE, ["base", "a100-any"]), settings.criteria)
    assert warnings
    assert "service, intent, os" in warnings[-1]


# ---------------------------------------------------------------------------
# rejection
# ---------------------------------------------------------------------------

COMBOS_ERROR = (
    "[INVALID_REQUEST] intent 'training' requires additional criteria; supported combinations: "
    "(service=aks), (service=cks, os=ubuntu), (service=k0s, os=ubuntu)"
)
COMBOS = ["service=aks", "service=cks, os=ubuntu", "service=k0s, os=ubuntu"]
COMBOS_MESSAGE = COMBOS_ERROR.removeprefix("[INVALID_REQUEST] ")


@pytest.mark.parametrize(
    ("lines", "message", "supported"),
    [
        pytest.param(
            [
                '{"level":"INFO","msg":"building recipe from criteria","criteria":"criteria(service=k0s)"}',
                json.dumps({"level": "ERROR", "msg": "command failed", "error": COMBOS_ERROR, "exitCode": 2}),
            ],
            COMBOS_MESSAGE,
            COMBOS,
            id="json",
        ),
        pytest.param([f"[cli] command failed: error={COMBOS_ERROR} exitCode=2"], COMBOS_MESSAGE, COMBOS, id="text"),
        pytest.param(
            [f"\x1b[31m[cli] command failed: error={COMBOS_ERROR} exitCode=2\x1b[0m"],
            COMBOS_MESSAGE,
            COMBOS,
            id="text-ansi",
        ),
        pytest.param(
            [f'time=t level=ERROR msg="command failed" error={json.dumps(COMBOS_ERROR)} exitCode=2'],
            COMBOS_MESSAGE,
            COMBOS,
            id="slog-debug",
        ),
        pytest.param(
            [
                "[cli] command failed: error=[INTERNAL] error building recipe: [INVALID_REQUEST] "
                "invalid service type: foo exitCode=8"
            ],
            "invalid service type: foo",
            [],
            id="0.11-wrapped",
        ),
        pytest.param(
            [
                '{"msg":"command failed","error":"[INVALID_REQUEST] platform \'kubeflow\' requires os '
                '(valid: ubuntu, rhel)","exitCode":2}'
            ],
            "platform 'kubeflow' requires os (valid: ubuntu, rhel)",
            ["os=ubuntu", "os=rhel"],
            id="valid-values",
        ),
        pytest.param(
            ["some output", "Incorrect Usage: flag provided but not defined: -x", ""],
            "Incorrect Usage: flag provided but not defined: -x",
            [],
            id="no-failure-record",
        ),
        pytest.param(['{"level":"ERROR","msg":"panic: boom"}'], "panic: boom", [], id="json-without-failure"),
        pytest.param([], "", [], id="nothing"),
    ],
)
def test_parse_rejection(lines: list[str], message: str, supported: list[str]) -> None:
    assert parse_rejection(lines) == (message, supported)


def test_the_last_failure_record_wins() -> None:
    lines = [
        '{"msg":"command failed","error":"[INTERNAL] first","exitCode":8}',
        '{"msg":"command failed","error":"[INVALID_REQUEST] second","exitCode":2}',
        '{"msg":"after"}',
    ]
    assert parse_rejection(lines) == ("second", [])


def test_rejection_from_the_fake_lists_the_k0s_combination(fake_aicr: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_AICR_", "AICR_"))}
    proc = subprocess.run(
        [str(fake_aicr), "--log-json", "recipe", "--service", "k0s", "--accelerator", "h200", "--intent", "training"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    message, supported = parse_rejection(proc.stderr.splitlines())
    assert message.startswith("intent 'training' requires additional criteria")
    assert "service=k0s, os=ubuntu" in supported


# The overlays aicr v0.11.1 applied for these criteria (observed running it; the
# real-aicr tests check the same with the binary).
EKS_A100 = ["base", "monitoring-hpa", "eks", "eks-training"]
A100_FULL = {"service": "eks", "accelerator": "a100", "intent": "training", "os": "ubuntu", "platform": "any"}


def test_a_stated_accelerator_no_applied_overlay_carries_is_a_dropped_value_though_the_criteria_echo_it() -> None:
    criteria = Criteria(service="eks", accelerator="a100", intent="training", os="ubuntu")
    summary = summary_of(["c"] * 11, EKS_A100, A100_FULL)
    assert dropped_values(summary, criteria) == ["accelerator", "os"]
    warnings = thin_resolution_warnings(summary, criteria)
    assert warnings[0] == (
        "accelerator='a100' was stated but no applied overlay carries it (applied: base, monitoring-hpa, eks, "
        "eks-training): aicr resolved a recipe without it (11 components)"
    )
    assert not any("resolved accelerator" in w for w in warnings), "the echoed criteria say nothing more"


def test_known_overlay_criteria_win_over_the_overlay_names() -> None:
    criteria = Criteria(service="acme", accelerator="h100", intent="training")
    summary = summary_of(["c"], ["base", "acme-gpu-nodes"], {})
    assert dropped_values(summary, criteria) == ["accelerator", "intent"], "the name carries only acme"
    known = {"acme-gpu-nodes": {"service": "acme", "accelerator": "h100", "intent": "training"}}
    assert dropped_values(summary, criteria, known) == []
    assert dropped_values(summary, criteria, {"acme-gpu-nodes": {"service": "acme"}}) == ["accelerator", "intent"]


def test_no_applied_overlays_listed_means_nothing_can_be_said() -> None:
    assert dropped_values(summary_of(["c"], []), Criteria(accelerator="a100")) == []


def test_a_packs_overlays_are_read_for_their_criteria(tmp_path: Path) -> None:
    (tmp_path / "overlays" / "nested").mkdir(parents=True)
    (tmp_path / "overlays" / "nested" / "a.yaml").write_text(
        "kind: RecipeMetadata\nmetadata: {name: acme-gpu-nodes}\n"
        "spec: {criteria: {service: acme, accelerator: h100, os: any}}\n"
    )
    (tmp_path / "overlays" / "broken.yaml").write_text("spec: [unclosed\n")
    (tmp_path / "overlays" / "plain.yml").write_text("metadata: {name: bare}\nspec: {}\n")
    assert pack_overlay_criteria(tmp_path) == {
        "acme-gpu-nodes": {"service": "acme", "accelerator": "h100"},
        "bare": {},
    }
    assert pack_overlay_criteria(None) == {}
    assert pack_overlay_criteria(tmp_path / "missing") == {}


# What aicr v0.11.1 printed for `--log-json recipe --service lke` (exit 8) and for
# `--log-json bundle ... --storage-class gp3` (exit 1, before its logger existed).
UNKNOWN_SERVICE = (
    '{"time":"t","level":"ERROR","msg":"command failed","module":"aicr","version":"0.11.1","error":"[INTERNAL] '
    "error building recipe: [INVALID_REQUEST] error parsing criteria: [INVALID_REQUEST] failed to apply criteria "
    "option: [INVALID_REQUEST] failed to parse service type: [INVALID_REQUEST] invalid service type: lke"
    '","exitCode":8}'
)
FLAG_NOT_DEFINED = [
    "Incorrect Usage: flag provided but not defined: -storage-class",
    "",
    '2026/12/03 18:12:50 ERROR command failed error="flag provided but not defined: -storage-class" exitCode=1',
]


def test_an_unknown_criteria_value_is_recognised_in_the_innermost_error() -> None:
    message, supported = parse_rejection([UNKNOWN_SERVICE])
    assert (message, supported) == ("invalid service type: lke", [])
    assert unknown_value(message) == ("service", "lke")
    assert unknown_value("invalid os type: ol") == ("os", "ol")
    assert unknown_value("no criteria provided: specify at least one of --service") is None


def test_last_error_keeps_every_code_and_reads_gos_default_log_line() -> None:
    assert last_error([UNKNOWN_SERVICE]).startswith("[INTERNAL] error building recipe: [INVALID_REQUEST]")
    assert last_error(FLAG_NOT_DEFINED) == "flag provided but not defined: -storage-class"
    assert parse_rejection(FLAG_NOT_DEFINED)[0] == "flag provided but not defined: -storage-class"
    assert last_error(["plain", "lines"]) == ""


def _zeros_gz(path: Path, compressed_bytes: int) -> int:
    """A gzip file of zeros about ``compressed_bytes`` long; returns its decompressed size."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk, written, size = b"\0" * (1 << 20), 0, 0
    with path.open("wb") as handle:
        while written < compressed_bytes:
            out = packer.compress(chunk)
            handle.write(out)
            written += len(out)
            size += len(chunk)
        handle.write(packer.flush())
    return size


def test_a_compression_bomb_as_recorded_recipe_is_exit_2_and_its_memory_bounded(tmp_path: Path) -> None:
    """Issue 35 finding 9: a 1 MiB .gz of zeros took 3.1 GB of RSS, then exit 70."""
    import sys

    bomb = tmp_path / "recipe.yaml.gz"
    size = _zeros_gz(bomb, 1 << 20)
    assert size > 900 * (1 << 20)
    # The peak the read adds, over the process's peak once everything is imported:
    # imports, bytecode compilation and a coverage tracer are not the read's.
    probe = (
        "import resource, sys\nfrom pathlib import Path\nfrom aicr_runner.aicr.recipe import read_recorded\n"
        "from aicr_runner.errors import RunnerError\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n    read_recorded(Path(sys.argv[1]))\nexcept RunnerError as exc:\n"
        "    print(exc.exit_code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, exc.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "recipe.yaml")], capture_output=True, text=True, check=True
    )
    code, added_rss_kib, message = done.stdout.split(" ", 2)
    assert int(code) == 2
    assert f"--recipe {tmp_path / 'recipe.yaml'}: the recorded recipe is over" in message
    assert int(added_rss_kib) < 100 * 1024, f"the read added {int(added_rss_kib) // 1024} MiB"


@pytest.mark.parametrize("given", ["/", ""])
def test_a_recorded_recipe_path_without_a_name_is_exit_2(given: str) -> None:
    with pytest.raises(RunnerError) as refused:
        recipe.read_recorded(Path(given))
    assert refused.value.exit_code == 2
