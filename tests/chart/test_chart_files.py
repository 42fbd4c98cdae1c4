"""Chart-level checks: lint, Kubernetes schemas, values.schema.json, docs, examples."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from aicr_runner.settings.values_file import renamed_values
from tests.chart.helm import CHART, ROOT, helm, load_script, merge, render, renders

VENV_BIN = ROOT / ".venv" / "bin"
VALUES_EXAMPLES = sorted((ROOT / "examples" / "values").glob("*.yaml"))
DELIVERY_EXAMPLES = sorted((ROOT / "examples" / "delivery").glob("*.yaml"))
EVERYTHING = {
    "service": "eks",
    "accelerator": "h100",
    "intent": "training",
    "os": "ubuntu",
    "dataPack": "ghcr.io/acme/aicr-pack@sha256:" + "c" * 64,
    "dataPackAuth": {"dockerconfigjson": '{"auths":{"ghcr.io":{"auth":"eDp5"}}}'},
    "imagePullSecrets": [{"name": "regcred"}],
    "image": {"digest": "sha256:" + "d" * 64},
    "validate": {
        "enabled": True,
        "emitEvidence": True,
        "phases": ["deployment", "performance"],
        "publish": {
            "enabled": True,
            "mode": "signed",
            "ref": "ghcr.io/acme/aicr-evidence",
            "identityTokenSecret": {"name": "oidc"},
            "registrySecret": "push",
        },
    },
    "global": {"imageRegistry": "mirror.example.com/ghcr", "imagePullSecrets": ["fleet-regcred"]},
    "serviceAccount": {"name": "gpu-installer", "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    "job": {
        "ttlSecondsAfterFinished": 86400,
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {}},
        "priorityClassName": "high",
        "podLabels": {"example.com/team": "gpu"},
        "podAnnotations": {"a": "b"},
        "extraEnv": [{"name": "AICR_NCCL_FABRIC", "value": "roce"}],
        "extraVolumes": [{"name": "sigstore-root", "configMap": {"name": "sigstore-trusted-root"}}],
        "extraVolumeMounts": [{"name": "sigstore-root", "mountPath": "/etc/sigstore", "readOnly": True}],
    },
}


def version_pins() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())  # type: ignore[no-any-return]


# -- Chart.yaml -------------------------------------------------------------------------------------------


def supported_minors() -> list[str]:
    """IMAGE_KUBERNETES_MINORS of tools/versions.env, oldest first (the one statement of the range)."""
    text = (ROOT / "tools" / "versions.env").read_text()
    match = re.search(r'^IMAGE_KUBERNETES_MINORS="([^"]*)"$', text, re.M)
    assert match is not None, "tools/versions.env has no IMAGE_KUBERNETES_MINORS"
    return match.group(1).split()


def test_chart_metadata() -> None:
    chart = version_pins()
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "nvidia-aicr"
    assert chart["type"] == "application"
    assert chart["version"] == "0.4.0"
    assert chart["kubeVersion"] == ">= 1.33.0-0"
    assert chart["appVersion"] == "0.1.0"
    assert 'appVersion: "0.1.0"' in (CHART / "Chart.yaml").read_text(), "appVersion is quoted"


def test_kube_version_floor_is_enforced_by_helm() -> None:
    """helm refuses the minor below the supported range and admits its oldest
    (a managed cluster's pre-release version too, EKS style)."""
    oldest = supported_minors()[0]
    major, minor = oldest.split(".")
    below = f"{major}.{int(minor) - 1}.99"
    proc = helm("template", "t", str(CHART), "--set", "accelerator=h100", "--kube-version", below)
    assert proc.returncode != 0
    assert "kubeVersion" in proc.stderr or "incompatible" in proc.stderr.lower(), proc.stderr
    for admitted in (f"v{oldest}.0", f"v{oldest}.3-eks-1"):
        proc = helm("template", "t", str(CHART), "--set", "accelerator=h100", "--kube-version", admitted)
        assert proc.returncode == 0, f"{admitted}: {proc.stderr}"


@pytest.mark.parametrize("end", ["oldest", "newest"])
def test_every_object_renders_the_same_at_both_ends_of_the_supported_range(end: str) -> None:
    """With every optional object on, the render at the oldest and the newest
    supported minor (--kube-version) is the render helm gives by default: nothing
    in the chart depends on the cluster's minor inside the range."""
    minors = supported_minors()
    minor = minors[0] if end == "oldest" else minors[-1]
    every_object = merge(EVERYTHING, {"rbac": {"clusterAdmin": False}})  # the narrower ClusterRole too
    at_end = renders(every_object, args=("--kube-version", f"v{minor}.0"))
    assert sorted(set(at_end.kinds())) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Job",
        "Role",
        "RoleBinding",
        "Secret",
        "ServiceAccount",
    ], at_end.kinds()
    assert at_end.docs == renders(every_object).docs


# -- lint ---------------------------------------------------------------------------------------------------


def test_helm_lint_strict_is_clean_with_criteria() -> None:
    proc = helm("lint", "--strict", str(CHART), "--set", "accelerator=h100")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout
    assert "[ERROR]" not in proc.stdout


@pytest.mark.parametrize("example", VALUES_EXAMPLES, ids=lambda p: p.name)
def test_helm_lint_strict_is_clean_for_each_example(example: Path) -> None:
    proc = helm("lint", "--strict", str(CHART), "-f", str(example))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout


# -- Kubernetes schemas (offline) -----------------------------------------------------------------------------

RENDERINGS = {
    "defaults": {},
    "everything": EVERYTHING,
    "unsigned-existing-pack-secret": merge(
        {k: v for k, v in EVERYTHING.items() if k != "dataPackAuth"},
        {
            "dataPackSecret": "regcred",
            "validate": {"publish": {"mode": "unsigned", "identityTokenSecret": {"name": ""}}},
        },
    ),
    "least-privilege": {
        "rbac": {
            "clusterAdmin": False,
            "extraRules": [
                {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": ["get", "create"]}
            ],
        }
    },
    "rbac-managed-elsewhere": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "installer"}},
}


@pytest.mark.parametrize("kube", ["1.32.0", "1.34.0", "1.37.0"])
@pytest.mark.parametrize("name", list(RENDERINGS))
def test_rendered_objects_match_the_kubernetes_schemas(name: str, kube: str) -> None:
    result = renders(RENDERINGS[name])
    assert result.docs
    for doc in result.docs:
        kubernetes_validate.validate(doc, kube, strict=True)


@pytest.mark.parametrize("example", VALUES_EXAMPLES, ids=lambda p: p.name)
def test_examples_match_the_kubernetes_schemas(example: Path) -> None:
    result = renders(yaml.safe_load(example.read_text()), raw=True)
    assert result.docs
    for doc in result.docs:
        kubernetes_validate.validate(doc, "1.32.0", strict=True)


def test_the_schema_check_catches_a_broken_object() -> None:
    job = renders().job
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.32.0", strict=True)


# -- values.schema.json -----------------------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())  # type: ignore[no-any-return]


def test_values_schema_is_a_valid_self_contained_2020_12_schema() -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "check-jsonschema"), "--check-metaschema", str(CHART / "values.schema.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = schema()
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert '"$ref"' not in (CHART / "values.schema.json").read_text(), "no remote (or any) $ref"


def test_values_yaml_and_the_examples_satisfy_the_schema() -> None:
    files = [CHART / "values.yaml", *VALUES_EXAMPLES]
    proc = subprocess.run(
        [str(VENV_BIN / "check-jsonschema"), "--schemafile", str(CHART / "values.schema.json"), *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for key, child in (node.get("properties") or {}).items():
        out += _walk(child, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_every_schema_property_has_a_description_and_a_type() -> None:
    untyped = {"runtimeImage", "orasImage", "environment.k0sContainerd"}  # any type, to reach the guard
    nodes = _walk(schema())
    assert len(nodes) > 1, "the schema has no properties"
    for path, node in nodes:
        assert node.get("description"), f"{path or '<root>'} has no description"
        if path not in untyped:
            assert node.get("type"), f"{path} has no type"


def _keys(values: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(values, dict):
        for key, value in values.items():
            dotted = f"{prefix}.{key}" if prefix else key
            keys.add(dotted)
            if key not in ("resources", "nodeSelector", "affinity", "podAnnotations", "podLabels", "annotations"):
                keys |= _keys(value, dotted)
    return keys


def test_values_yaml_and_the_schema_describe_the_same_keys() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    in_values = _keys(values) | {"job.ttlSecondsAfterFinished"}  # null defaults vanish on load: kept here
    in_schema = {path for path, _ in _walk(schema()) if path and "[]" not in path and "{}" not in path}
    removed = {"runtimeImage", "orasImage", "environment.k0sContainerd"}
    # Earlier names of renamed values (and their old groups): in the schema, not in values.yaml.
    renamed = {item.old for item in renamed_values()} | {item.old.rpartition(".")[0] for item in renamed_values()}
    assert in_values == in_schema - removed - (renamed - {""})
    assert removed <= in_schema


def test_sub_objects_refuse_unknown_keys() -> None:
    open_objects = {
        "global",
        "job.resources",
        "job.affinity",
        "job.nodeSelector",
        "snapshot.nodeSelector",
        "job.podLabels",
        "job.podAnnotations",
        "job.annotations",
        "serviceAccount.annotations",
        "monitoring.prometheusRule.additionalLabels",
        "monitoring.dashboards.annotations",
    }
    closed = [
        (path, node)
        for path, node in _walk(schema())
        if (node.get("type") == "object" or (isinstance(node.get("type"), list) and "object" in node["type"]))
        and path not in open_objects
        and "[]" not in path
    ]
    assert len(closed) > 1, "no sub-object was checked"
    for path, node in closed:
        assert node.get("additionalProperties") is False, f"{path or '<root>'} accepts unknown keys"


# -- values docs -----------------------------------------------------------------------------------------------------


def test_every_value_has_a_description_comment() -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "python"), str(ROOT / "scripts" / "gen-values-table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr


def test_values_table_generator_reads_the_comments(tmp_path: Path) -> None:
    gen = load_script("gen-values-table")
    text = (CHART / "values.yaml").read_text()
    rows = {row.key: row for row in gen.rows(text, schema())}
    assert rows["criteria.service"].default == '`"any"`'
    assert rows["job.ttlSecondsAfterFinished"].type == "int or null"
    assert rows["deploy.flags"].default == '`"--best-effort --no-wait"`'
    assert "job.resources.requests" not in rows
    assert rows["job.resources"].type == "object"
    with pytest.raises(gen.DocError, match="undocumented values"):
        gen.rows(text.replace("# -- Storage class passed", "# Storage class passed"), schema())
    document = "intro\n<!-- values-table:start -->\nold\n<!-- values-table:end -->\noutro\n"
    spliced = gen.splice(document, "NEW")
    assert spliced == "intro\n<!-- values-table:start -->\nNEW\n<!-- values-table:end -->\noutro\n"


def test_docs_carry_the_generated_table_and_the_sections_the_readme_links_to() -> None:
    docs = ROOT / "docs"
    sections = {
        "configuration.md": ("## Values", "## Environment", "## Exit codes"),
        "criteria.md": ("## What the chart refuses", "## Good starting points"),
        "migration.md": ("# Migration from the bash chart",),
        "installing.md": ("## Delivery paths", "### Argo CD", "### Flux", "### k0rdent", "## Change safety"),
        "runs.md": ("## The steps", "## Where results land", "## Local dry runs"),
    }
    for page, headings in sections.items():
        text = (docs / page).read_text()
        for heading in headings:
            assert f"\n{heading}\n" in f"\n{text}", f"{page}: {heading}"
    assert '| `criteria.service` | string | `"any"` |' in (docs / "configuration.md").read_text()
    assert "docker run --rm --read-only --tmpfs /tmp --tmpfs /work --tmpfs /home/aicr" in (docs / "runs.md").read_text()


# -- examples -----------------------------------------------------------------------------------------------------


def test_there_are_examples_for_each_posture_and_delivery_path() -> None:
    assert {p.name for p in VALUES_EXAMPLES} >= {
        "day1-install.yaml",
        "qualify-hardware.yaml",
        "drift-check.yaml",
        "full-acceptance.yaml",
    }
    assert {p.name for p in DELIVERY_EXAMPLES} == {
        "argocd-application.yaml",
        "flux-helmrelease.yaml",
        "k0rdent-multiclusterservice.yaml",
        "fleet-secret-distribution.yaml",
    }


@pytest.mark.parametrize("example", VALUES_EXAMPLES, ids=lambda p: p.name)
def test_every_values_example_renders(example: Path) -> None:
    proc = helm("template", "aicr", str(CHART), "-n", "aicr", "-f", str(example))
    assert proc.returncode == 0, proc.stderr
    assert "kind: Job" in proc.stdout


def _delivery_values(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind == "HelmRelease":
        values = dict(doc["spec"]["values"])
        for ref in doc["spec"].get("valuesFrom", []):
            path = ref["targetPath"].split(".")
            assert path == ["pack", "auth", "dockerconfigjson"]
            values = merge(values, {"pack": {"auth": {"dockerconfigjson": '{"auths":{}}'}}})
        return values
    if kind == "Application":
        return doc["spec"]["source"]["helm"]["valuesObject"]  # type: ignore[no-any-return]
    if kind == "MultiClusterService":
        [service] = doc["spec"]["serviceSpec"]["services"]
        return yaml.safe_load(service["values"])  # type: ignore[no-any-return]
    return None


@pytest.mark.parametrize("example", DELIVERY_EXAMPLES, ids=lambda p: p.name)
def test_delivery_manifests_parse_and_their_chart_values_render(example: Path) -> None:
    docs = [doc for doc in yaml.safe_load_all(example.read_text()) if doc]
    assert docs
    for doc in docs:
        assert doc.get("apiVersion")
        assert doc.get("kind")
        values = _delivery_values(doc)
        if values is not None:
            result = render(values, raw=True)
            assert result.ok, f"{example.name} {doc['kind']}: {result.stderr}"
    text = example.read_text()
    if "nvidia-aicr" in text and example.name != "fleet-secret-distribution.yaml":
        version = version_pins()["version"]
        assert version in text or version.replace(".", "-") in text, f"{example.name} pins another chart version"


def duration_seconds(text: str) -> int:
    """A Go duration of hours, minutes and seconds ("3h10m") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", text)
    assert "".join(n + u for n, u in parts) == text, f"not an h/m/s duration: {text}"
    return sum(int(n) * units[u] for n, u in parts)


def test_flux_timeout_covers_the_job_deadline() -> None:
    docs = list(yaml.safe_load_all((ROOT / "examples" / "delivery" / "flux-helmrelease.yaml").read_text()))
    release = next(doc for doc in docs if doc and doc["kind"] == "HelmRelease")
    assert duration_seconds(release["spec"]["timeout"]) > release["spec"]["values"]["job"]["activeDeadlineSeconds"]
    assert release["spec"]["install"]["remediation"]["retries"] == 0


def test_flux_example_creates_its_namespace_and_refers_to_nothing_outside_it() -> None:
    # `flux bootstrap --no-cross-namespace-refs` (multi-tenancy lockdown) refuses a
    # HelmRelease whose chart source or values live in another namespace.
    docs = [
        doc for doc in yaml.safe_load_all((ROOT / "examples" / "delivery" / "flux-helmrelease.yaml").read_text()) if doc
    ]
    [namespace] = [doc for doc in docs if doc["kind"] == "Namespace"]
    assert docs[0] is namespace, "the Namespace comes first"
    name = namespace["metadata"]["name"]
    assert {doc["metadata"]["namespace"] for doc in docs if doc["kind"] != "Namespace"} == {name}
    release = next(doc for doc in docs if doc["kind"] == "HelmRelease")
    assert release["spec"]["chartRef"].get("namespace", name) == name
    assert all(ref.get("namespace", name) == name for ref in release["spec"].get("valuesFrom", []))
    assert release["spec"]["targetNamespace"] == name


def test_k0rdent_example_waits_for_the_job_longer_than_its_deadline_and_never_rolls_back() -> None:
    docs = list(yaml.safe_load_all((ROOT / "examples" / "delivery" / "k0rdent-multiclusterservice.yaml").read_text()))
    mcs = next(doc for doc in docs if doc and doc["kind"] == "MultiClusterService")
    [service] = mcs["spec"]["serviceSpec"]["services"]
    options = service["helmOptions"]
    # Without helmOptions KCM installs with atomic: true (a failed run is uninstalled, logs and all).
    assert options["atomic"] is False
    # Helm's wait ignores Jobs unless waitForJobs is set: only then does the status reflect the run.
    assert options["wait"] is True
    assert options["waitForJobs"] is True
    values = yaml.safe_load(service["values"])
    assert duration_seconds(options["timeout"]) > values["job"]["activeDeadlineSeconds"]


# -- the example pack ---------------------------------------------------------------------------------------------


def test_the_example_pack_resolves_with_aicr(tmp_path: Path) -> None:
    from tests.fake_aicr import install_fake_aicr

    aicr = install_fake_aicr(tmp_path / "bin")
    pack = ROOT / "packs" / "k0s-h200-training"
    registry = yaml.safe_load((pack / "registry.yaml").read_text())
    assert (registry["apiVersion"], registry["kind"]) == ("aicr.run/v1beta1", "ComponentRegistry")
    overlay = yaml.safe_load((pack / "overlays" / "k0s-h200-training.yaml").read_text())
    assert (overlay["apiVersion"], overlay["kind"]) == ("aicr.run/v1beta1", "RecipeMetadata")
    for extra in ([], ["--os", "ubuntu"]):
        out = tmp_path / "recipe.yaml"
        proc = subprocess.run(
            [str(aicr), "recipe", "--data", str(pack), "--service", "k0s", "--accelerator", "h200",
             "--intent", "training", *extra, "-o", str(out)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        recipe = yaml.safe_load(out.read_text())
        names = [ref["name"] for ref in recipe["componentRefs"]]
        assert len(names) == 11, names
        assert "nodewright-operator" not in names
        gpu = next(ref for ref in recipe["componentRefs"] if ref["name"] == "gpu-operator")
        assert gpu["overrides"]["driver"]["enabled"] is False
        assert {"name": "CONTAINERD_SOCKET", "value": "/run/k0s/containerd.sock"} in gpu["overrides"]["toolkit"]["env"]
    readme = (pack / "README.md").read_text()
    assert "oras push" in readme


def test_the_packaged_chart_carries_its_schema_and_catalog_and_renders(tmp_path: Path) -> None:
    import tarfile

    proc = helm("package", str(CHART), "--destination", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    package = tmp_path / f"nvidia-aicr-{version_pins()['version']}.tgz"
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
    for member in (
        "values.schema.json",
        "files/criteria-catalog.json",
        "templates/_criteria.tpl",
        "templates/NOTES.txt",
    ):
        assert f"nvidia-aicr/{member}" in names, member
    bad = helm("template", "t", str(package), "--set", "service=gke", "--set", "intent=training")
    assert "no recipe provides" in bad.stderr or "requires additional criteria" in bad.stderr, bad.stderr
    good = helm("template", "t", str(package), "--set", "accelerator=h100")
    assert good.returncode == 0, good.stderr
