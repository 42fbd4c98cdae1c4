"""The fake aicr behaves as the aicr CLI contract (v1.2.0) says.

Other tests trust the fake in place of the real binary, so each fact they rely
on is pinned here against the contract: flags, exit codes, log lines, files.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.fake_aicr import install_fake_aicr
from tests.fake_aicr.packs import write_acme_pack, write_pack

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def aicr_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("bin"))


@pytest.fixture
def aicr(aicr_path: Path, tmp_path: Path) -> Run:
    def run(
        *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_AICR_", "AICR_"))}
        full_env.update(env or {})
        return subprocess.run(
            [str(aicr_path), *args],
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd or tmp_path,
            check=False,
            timeout=60,
        )

    return run


def json_records(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def last_record(stderr: str) -> dict[str, Any]:
    return json_records(stderr)[-1]


# ---------------------------------------------------------------------------
# global flags and logging
# ---------------------------------------------------------------------------


def test_version_flag_prints_the_release_string(aicr: Run) -> None:
    result = aicr("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("aicr version 1.2.0 (commit: fake000, date: ")


def test_json_logs_carry_the_slog_fields(aicr: Run) -> None:
    result = aicr("--log-json", "recipe", "--accelerator", "a100", "-o", "r.yaml")
    assert result.returncode == 0
    records = json_records(result.stderr)
    assert records, result.stderr
    for record in records:
        assert {"time", "level", "msg", "module", "version"} <= record.keys()
        assert record["module"] == "aicr"
        assert record["version"] == "1.2.0"


def test_text_logs_have_the_cli_prefix_and_no_level(aicr: Run) -> None:
    result = aicr("recipe", "--accelerator", "a100", "-o", "r.yaml")
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("[cli] recipe generation completed: output=r.yaml components=12 overlays=2 ")
    assert all("level=" not in line for line in lines)
    assert "\033[" not in result.stderr


def test_failure_ends_with_command_failed_and_the_exit_code(aicr: Run) -> None:
    result = aicr("--log-json", "recipe", "--service", "foo")
    assert result.returncode == 2
    record = last_record(result.stderr)
    assert record["msg"] == "command failed"
    assert record["error"] == "[INVALID_REQUEST] invalid service type: foo"
    assert record["exitCode"] == 2


def test_unknown_flag_is_a_usage_error_with_exit_1(aicr: Run) -> None:
    result = aicr("recipe", "--bogus")
    assert result.returncode == 1
    assert "Incorrect Usage: flag provided but not defined: -bogus" in result.stderr


def test_unknown_subcommand_exits_3(aicr: Run) -> None:
    assert aicr("nope").returncode == 3


def test_env_log_records_argv_and_watched_variables_only(aicr: Run, tmp_path: Path) -> None:
    env_log = tmp_path / "env.jsonl"
    aicr(
        "--version",
        env={
            "FAKE_AICR_ENV_LOG": str(env_log),
            "DOCKER_CONFIG": "/auth",
            "AICR_RUNNER_WORK_DIR": "/w",
            "UNRELATED": "x",
        },
    )
    entry = json.loads(env_log.read_text().splitlines()[-1])
    assert entry == {"argv": ["--version"], "env": {"DOCKER_CONFIG": "/auth", "AICR_RUNNER_WORK_DIR": "/w"}}


# ---------------------------------------------------------------------------
# recipe
# ---------------------------------------------------------------------------


def recipe_doc(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_a100_alone_resolves_12_components_from_two_overlays(aicr: Run, tmp_path: Path) -> None:
    result = aicr("--log-json", "recipe", "--accelerator", "a100", "-o", "recipe.yaml")
    assert result.returncode == 0, result.stderr
    done = last_record(result.stderr)
    assert done["msg"] == "recipe generation completed"
    assert (done["output"], done["components"], done["overlays"]) == ("recipe.yaml", 12, 2)
    doc = recipe_doc(tmp_path / "recipe.yaml")
    assert doc["metadata"]["appliedOverlays"] == ["base", "a100-any"]
    assert done["componentNames"].split(", ") == [c["name"] for c in doc["componentRefs"]]


def test_full_eks_training_leaf_resolves_15_components(aicr: Run, tmp_path: Path) -> None:
    result = aicr(
        "--log-json",
        "recipe",
        "--service",
        "eks",
        "--accelerator",
        "h100",
        "--os",
        "ubuntu",
        "--intent",
        "training",
        "-o",
        "recipe.yaml",
    )
    assert result.returncode == 0, result.stderr
    doc = recipe_doc(tmp_path / "recipe.yaml")
    assert doc["kind"] == "RecipeResult"
    assert doc["apiVersion"] == "aicr.run/v1"
    assert doc["criteria"] == {
        "service": "eks",
        "accelerator": "h100",
        "intent": "training",
        "os": "ubuntu",
        "platform": "any",
    }
    assert len(doc["componentRefs"]) == 15
    assert {"aws-ebs-csi-driver", "aws-efa", "kubeflow-trainer"} <= {c["name"] for c in doc["componentRefs"]}
    assert doc["metadata"]["appliedOverlays"][0] == "base"
    assert doc["metadata"]["appliedOverlays"][-1] == "h100-eks-ubuntu-training"
    for ref in doc["componentRefs"]:
        assert {"name", "namespace", "chart", "type", "source", "version"} <= ref.keys()
    order = doc["deploymentOrder"]
    assert sorted(order) == sorted(c["name"] for c in doc["componentRefs"])
    for ref in doc["componentRefs"]:
        for dep in ref.get("dependencyRefs", []):
            assert order.index(dep) < order.index(ref["name"])


def test_recipe_without_output_goes_to_stdout_and_logs_empty_output(aicr: Run) -> None:
    result = aicr("--log-json", "recipe", "--accelerator", "h100", "--format", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["criteria"]["accelerator"] == "h100"
    assert last_record(result.stderr)["output"] == ""


def test_v011_log_style_drops_component_names_and_colours_lines(aicr: Run) -> None:
    result = aicr("recipe", "--accelerator", "a100", "-o", "r.yaml", env={"FAKE_AICR_LOG_STYLE": "0.11"})
    last = result.stderr.splitlines()[-1]
    assert last == "\033[32m[cli] recipe generation completed: output=r.yaml components=12 overlays=2\033[0m"


@pytest.mark.parametrize("service", ["aks", "bcm", "eks", "kind", "lke", "ocp", "rke2"])
def test_services_that_declare_an_intent_on_their_own(aicr: Run, service: str) -> None:
    assert aicr("recipe", "--service", service, "--intent", "training").returncode == 0


@pytest.mark.parametrize(
    ("service", "os_name"), [("cks", "ubuntu"), ("gke", "cos"), ("oke", "ol"), ("k0s", "ubuntu")]
)
def test_services_that_declare_an_intent_only_with_their_os(aicr: Run, service: str, os_name: str) -> None:
    without = aicr("--log-json", "recipe", "--service", service, "--intent", "training")
    assert without.returncode == 2
    # gke has no service-only overlay, so the service dimension is the one reported.
    assert f"os={os_name})" in last_record(without.stderr)["error"]
    assert aicr("recipe", "--service", service, "--intent", "training", "--os", os_name).returncode == 0


def test_k0s_h200_training_needs_os_ubuntu(aicr: Run) -> None:
    base = ["--log-json", "recipe", "--service", "k0s", "--accelerator", "h200", "--intent", "training"]
    rejected = aicr(*base)
    assert rejected.returncode == 2
    error = last_record(rejected.stderr)["error"]
    assert error.startswith(
        "[INVALID_REQUEST] intent 'training' requires additional criteria; supported combinations: ("
    )
    assert aicr(*base, "--os", "ubuntu").returncode == 0


def test_os_without_a_service_lists_the_combinations(aicr: Run) -> None:
    result = aicr("--log-json", "recipe", "--os", "ubuntu")
    assert result.returncode == 2
    error = last_record(result.stderr)["error"]
    assert "os 'ubuntu' requires additional criteria; supported combinations: " in error
    assert "(service=aks), " in error
    assert "(service=eks)" in error


@pytest.mark.parametrize("service", ["metal3", "generic", "self-managed", "vanilla"])
def test_generic_and_metal3_have_no_recipe_for_most_accelerators(aicr: Run, service: str) -> None:
    result = aicr("--log-json", "recipe", "--service", service, "--accelerator", "h100")
    assert result.returncode == 2
    assert "no recipe provides service '" in last_record(result.stderr)["error"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--service", "foo"),
        ("--accelerator", "x9000"),
        ("--intent", "gaming"),
        ("--os", "plan9"),
        ("--platform", "k"),
    ],
)
def test_unknown_criteria_values_are_invalid_input(aicr: Run, flag: str, value: str) -> None:
    result = aicr("--log-json", "recipe", flag, value)
    assert result.returncode == 2
    assert last_record(result.stderr)["error"] == f"[INVALID_REQUEST] invalid {flag[2:]} type: {value}"


def test_no_criteria_is_invalid_input(aicr: Run) -> None:
    result = aicr("--log-json", "recipe")
    assert result.returncode == 2
    assert "no criteria provided" in last_record(result.stderr)["error"]


def test_a_platform_nothing_provides_is_rejected(aicr: Run) -> None:
    result = aicr(
        "--log-json",
        "recipe",
        "--service",
        "eks",
        "--accelerator",
        "h100",
        "--os",
        "ubuntu",
        "--intent",
        "training",
        "--platform",
        "runai",
    )
    assert result.returncode == 2
    assert last_record(result.stderr)["error"] == "[INVALID_REQUEST] no recipe provides platform 'runai'"


def test_a_criteria_flag_given_twice_is_invalid_input(aicr: Run) -> None:
    assert aicr("recipe", "--service", "eks", "--service", "gke").returncode == 2


def test_unknown_format_is_invalid_input(aicr: Run) -> None:
    assert aicr("recipe", "--accelerator", "h100", "--format", "xml").returncode == 2


def test_pack_registers_a_new_service_value(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    result = aicr(
        "--log-json",
        "recipe",
        "--service",
        "acme",
        "--accelerator",
        "h100",
        "--intent",
        "training",
        "--data",
        str(pack),
        "-o",
        "recipe.yaml",
    )
    assert result.returncode == 0, result.stderr
    merged = next(r for r in json_records(result.stderr) if r["msg"] == "merged component registries")
    assert (merged["embedded_components"], merged["external_components"]) == (19, 1)
    doc = recipe_doc(tmp_path / "recipe.yaml")
    assert doc["metadata"]["appliedOverlays"] == ["base", "h100-any", "acme-h100-training"]
    acme = next(c for c in doc["componentRefs"] if c["name"] == "acme-agent")
    assert acme == {
        "name": "acme-agent",
        "namespace": "acme-system",
        "chart": "acme-agent",
        "type": "Helm",
        "source": "oci://registry.example/charts",
        "version": "1.0.0",
        "valuesFile": "components/acme-agent/values.yaml",
    }
    assert last_record(result.stderr)["components"] == 13


def test_criteria_strict_ignores_pack_registrations(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    result = aicr("--log-json", "recipe", "--service", "acme", "--data", str(pack), "--criteria-strict")
    assert result.returncode == 2
    assert last_record(result.stderr)["error"] == "[INVALID_REQUEST] invalid service type: acme"


def test_pack_without_registry_yaml_is_rejected(aicr: Run, tmp_path: Path) -> None:
    (tmp_path / "pack").mkdir()
    result = aicr("--log-json", "recipe", "--accelerator", "h100", "--data", str(tmp_path / "pack"))
    assert result.returncode == 2
    assert "registry.yaml is required in external data directory" in last_record(result.stderr)["error"]


def test_missing_pack_directory_is_not_found(aicr: Run, tmp_path: Path) -> None:
    assert aicr("recipe", "--accelerator", "h100", "--data", str(tmp_path / "nope")).returncode == 3


def test_pack_with_a_retired_api_version_is_rejected(aicr: Run, tmp_path: Path) -> None:
    pack = write_pack(tmp_path / "pack", overlays={"x": {"criteria": {"service": "acme"}}})
    overlay = pack / "overlays" / "x.yaml"
    overlay.write_text(overlay.read_text().replace("aicr.run/v1beta1", "aicr.run/v1alpha2"))
    result = aicr("--log-json", "recipe", "--service", "acme", "--data", str(pack))
    assert result.returncode == 2
    assert "aicr.run/v1alpha2" in last_record(result.stderr)["error"]


def test_pack_component_without_a_version_is_rejected(aicr: Run, tmp_path: Path) -> None:
    pack = write_pack(
        tmp_path / "pack",
        components=[{"name": "nover", "helm": {"defaultRepository": "oci://r/c", "defaultChart": "nover"}}],
        overlays={"acme": {"criteria": {"service": "acme"}, "componentRefs": [{"name": "nover"}]}},
    )
    result = aicr("--log-json", "recipe", "--service", "acme", "--data", str(pack))
    assert result.returncode == 2
    assert 'component "nover" has no effective chart version' in last_record(result.stderr)["error"]


# ---------------------------------------------------------------------------
# recipe list
# ---------------------------------------------------------------------------


def test_recipe_list_json_entries_have_the_catalog_shape(aicr: Run) -> None:
    result = aicr("recipe", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == sorted(e["name"] for e in entries)
    for entry in entries:
        assert set(entry) == {"name", "criteria", "is_leaf", "source", "health"}
        assert set(entry["criteria"]) == {"Service", "Accelerator", "Intent", "OS", "Platform"}
        assert entry["source"] == "embedded"
    leaf = next(e for e in entries if e["name"] == "h100-eks-ubuntu-training")
    assert leaf["criteria"] == {
        "Service": "eks",
        "Accelerator": "h100",
        "Intent": "training",
        "OS": "ubuntu",
        "Platform": "any",
    }
    assert leaf["is_leaf"] is False  # the kubeflow and slurm leaves extend it
    assert next(e for e in entries if e["name"] == "h200-k0s-ubuntu-training")["is_leaf"] is True
    assert next(e for e in entries if e["name"] == "a100-any")["criteria"]["Service"] == "any"


def test_every_listed_leaf_resolves(aicr: Run) -> None:
    entries = json.loads(aicr("recipe", "list", "--format", "json").stdout)
    leaves = [e for e in entries if e["is_leaf"]]
    assert len(leaves) >= 30
    assert all(e["health"]["status"] == "pass" for e in leaves)


def test_recipe_list_no_health_drops_health(aicr: Run) -> None:
    entries = json.loads(aicr("recipe", "list", "--format", "json", "--no-health").stdout)
    assert all("health" not in entry for entry in entries)


def test_recipe_list_marks_pack_overlays_external(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    entries = json.loads(aicr("recipe", "list", "--format", "json", "--data", str(pack)).stdout)
    acme = next(e for e in entries if e["name"] == "acme-h100-training")
    assert acme["source"] == "external"
    assert acme["is_leaf"] is True
    assert acme["criteria"]["Service"] == "acme"


def test_recipe_list_filters_by_criteria(aicr: Run) -> None:
    entries = json.loads(aicr("recipe", "list", "--format", "json", "--service", "k0s").stdout)
    assert {e["criteria"]["Service"] for e in entries} == {"k0s", "any"}
    assert "h200-k0s-ubuntu-training" in {e["name"] for e in entries}


def test_recipe_list_table_has_the_documented_columns(aicr: Run) -> None:
    lines = aicr("recipe", "list").stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "SERVICE",
        "ACCELERATOR",
        "INTENT",
        "OS",
        "PLATFORM",
        "IS_LEAF",
        "STATUS",
        "COVERAGE",
        "SOURCE",
    ]
    assert lines[-1].startswith("any = wildcard")
    base_row = next(line for line in lines if line.startswith("base "))
    assert base_row.split()[7:9] == ["-", "-"]
