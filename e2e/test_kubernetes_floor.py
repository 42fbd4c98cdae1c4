"""The oldest Kubernetes minor the chart supports, proven against its API server.

``floor_control_plane`` is etcd and the kube-apiserver of KUBE_APISERVER_FLOOR_VERSION
(the oldest of IMAGE_KUBERNETES_MINORS, the chart's ``kubeVersion``), built like
the main one; the newest end of the range is the main suite's API server. Against
it, with the image's own helm and kubectl (the tests' ``helm`` and ``kubectl`` are
that binary):

- the chart with every optional object: each rendered object created with a
  server-side dry run (strict field validation: a field the 1.33 API does not
  know fails), then ``helm install --dry-run=server``, ``install``, ``upgrade``
  and ``uninstall``;
- a whole run: the chart installed, and the runner run on this host as the Job's
  pod would run (its environment from the installed Job, the chart's
  ServiceAccount's token) with the real aicr v0.11.1 from a release mirror, the
  bundle's real deploy.sh with the image's helm and kubectl, and the real
  ``aicr validate`` (its readiness pre-flight reads the server's version); the
  results in ConfigMaps.

No node and no controllers run here: kube-controller-manager of the image's minor
would be outside its skew against an older API server, and none of this needs
a pod. The component charts stand in as in e2e/test_real_aicr.py (the same
redirecting helm; this machine cannot reach the public chart repositories).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.helm_redirect import HELM_REDIRECT, STAND_IN_TEMPLATE
from e2e.scenarios import CHART, RELEASE, RunResults, releases_in
from e2e.tools import pinned_versions, tool
from tests.support.real_aicr import TAG, FolderMirror, extract_binary

pytestmark = pytest.mark.e2e

#: A recipe whose readiness constraint a 1.33 server meets (aicr v0.11.1's kind + h100
#: + training asks for K8s.server.version >= 1.34; this one, overlays base,
#: monitoring-hpa and kind, for >= 1.25) and whose bundle has no raw manifests
#: (inference's kgateway and eks's skyhook manifests need the CRDs of the real
#: charts, which the stand-ins do not have).
CRITERIA = {"service": "kind", "accelerator": "h100"}
SNAPSHOT = "aicr-floor-snapshot"
#: What `kubectl version` prints on stderr against a server outside its skew.
SKEW_WARNING = re.compile(
    r"^Warning: version difference between client \(1\.(\d+)\) and server \(1\.(\d+)\) exceeds the supported "
    r"minor version skew of \+/-1$",
    re.M,
)
#: Every optional object of the chart (the narrower ClusterRole, the pack Secret,
#: the publish mounts); the Secrets it names need not exist for a dry run.
EVERY_OBJECT: dict[str, Any] = {
    **CRITERIA,
    "dataPack": "registry.example.com/acme/aicr-pack@sha256:" + "c" * 64,
    "dataPackAuth": {"dockerconfigjson": '{"auths":{"registry.example.com":{"auth":"eDp5"}}}'},
    "imagePullSecrets": [{"name": "regcred"}],
    "rbac": {"clusterAdmin": False},
    "job": {"ttlSecondsAfterFinished": 86400},
    "validate": {
        "enabled": True,
        "emitEvidence": True,
        "publish": {
            "enabled": True,
            "mode": "signed",
            "ref": "registry.example.com/acme/aicr-evidence",
            "identityTokenSecret": {"name": "oidc"},
            "registrySecret": "push",
        },
    },
}


def floor_minor() -> str:
    """The oldest supported minor, as tools/versions.env states it."""
    return pinned_versions()["IMAGE_KUBERNETES_MINORS"].split()[0]


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The image's kubectl against ``plane`` as cluster admin."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KUBECONFIG": str(plane.kubeconfig), "HOME": "/nonexistent"}
    return subprocess.run(
        [str(tool("kubectl")), *args], input=stdin, capture_output=True, text=True, env=env, check=False, timeout=120
    )


def test_the_floor_server_is_the_oldest_supported_minor_and_kubectl_warns_only(
    floor_control_plane: ControlPlane,
) -> None:
    """The server reports the pinned floor version (the chart's kubeVersion checks
    it); the image's kubectl talks to it and says the skew on stderr, once."""
    pins = pinned_versions()
    version = floor_control_plane.admin.get("/version")
    assert version["gitVersion"] == pins["KUBE_APISERVER_FLOOR_VERSION"]
    assert f"{version['major']}.{version['minor']}" == floor_minor()
    proc = kubectl(floor_control_plane, "version", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    reported = json.loads(proc.stdout)
    assert reported["serverVersion"]["gitVersion"] == pins["KUBE_APISERVER_FLOOR_VERSION"]
    assert reported["clientVersion"]["gitVersion"] == pins["KUBERNETES_VERSION"]
    [(client, server)] = SKEW_WARNING.findall(proc.stderr)
    assert (f"1.{client}", f"1.{server}") == (".".join(pins["KUBERNETES_VERSION"][1:].split(".")[:2]), floor_minor())
    assert proc.stderr.strip() == SKEW_WARNING.search(proc.stderr).group(0), proc.stderr  # type: ignore[union-attr]


def values_file(directory: Path, values: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"values-{len(list(directory.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_every_object_of_the_chart_installs_upgrades_and_uninstalls_on_the_floor_server(
    floor_control_plane: ControlPlane, floor_helm: Helm, tmp_path: Path
) -> None:
    namespace = "floor-install"
    floor_control_plane.create_namespace(namespace)
    first = values_file(tmp_path, EVERY_OBJECT)
    rendered = floor_helm.run("template", RELEASE, str(CHART), "--namespace", namespace, "-f", str(first)).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert sorted({doc["kind"] for doc in objects}) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Job",
        "Role",
        "RoleBinding",
        "Secret",
        "ServiceAccount",
    ]
    # The server validates each object (strictly: a field the floor's API does not
    # know fails) and stores none.
    dry = kubectl(
        floor_control_plane,
        "create",
        "--dry-run=server",
        "--namespace",
        namespace,
        "--output",
        "name",
        "-f",
        "-",
        stdin=rendered,
    )
    assert dry.returncode == 0, dry.stderr
    assert len(dry.stdout.split()) == len(objects), dry.stdout
    assert not any(_exists(floor_control_plane, doc, namespace) for doc in objects), "a dry run stores nothing"

    server_dry = floor_helm.run(
        "install", RELEASE, str(CHART), "--namespace", namespace, "-f", str(first), "--dry-run=server"
    )
    assert "STATUS: pending-install" in server_dry.stdout, server_dry.stdout
    assert releases_in(floor_helm, namespace) == {}, "a dry run installs nothing"

    floor_helm.run("install", RELEASE, str(CHART), "--namespace", namespace, "-f", str(first))
    [release] = releases_in(floor_helm, namespace).values()
    assert release["status"] == "deployed"
    for doc in objects:
        assert _exists(floor_control_plane, doc, namespace), f"{doc['kind']} {doc['metadata']['name']} not created"

    second = values_file(tmp_path, {**EVERY_OBJECT, "logFormat": "json"})
    floor_helm.run("upgrade", RELEASE, str(CHART), "--namespace", namespace, "-f", str(second))
    [release] = releases_in(floor_helm, namespace).values()
    assert (release["status"], release["revision"]) == ("deployed", "2")
    [settings] = [doc for doc in objects if doc["kind"] == "ConfigMap"]
    live = floor_control_plane.configmap(namespace, settings["metadata"]["name"])
    assert live is not None
    assert live["data"]["AICR_RUNNER_LOG_FORMAT"] == "json", "the upgrade changed the runtime settings"

    floor_helm.uninstall(RELEASE, namespace)
    assert releases_in(floor_helm, namespace) == {}
    left = [
        f"{doc['kind']} {doc['metadata']['name']}" for doc in objects if _exists(floor_control_plane, doc, namespace)
    ]
    assert not left, left


def _exists(plane: ControlPlane, doc: dict[str, Any], namespace: str) -> bool:
    """Whether the object ``doc`` names is in the API server."""
    group_version = doc["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ConfigMap": "configmaps",
        "Job": "jobs",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "Secret": "secrets",
        "ServiceAccount": "serviceaccounts",
    }[doc["kind"]]
    scope = "" if doc["kind"].startswith("Cluster") else f"/namespaces/{namespace}"
    return bool(plane.admin.exists(f"{base}{scope}/{plural}/{doc['metadata']['name']}"))


# -- a whole run against the floor -----------------------------------------------------------


@pytest.fixture(scope="module")
def floor_recipe(real_aicr_release: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recipe and bundle the same aicr gives on this host for CRITERIA."""
    work = tmp_path_factory.mktemp("floor-aicr")
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    flags = [word for name, value in CRITERIA.items() for word in (f"--{name}", value)]
    for args in (["recipe", *flags, "--output", "recipe.yaml"], ["bundle", "--recipe", "recipe.yaml", "--output", "b"]):
        subprocess.run([str(binary), *args], cwd=work, check=True, capture_output=True, timeout=120)
    return {"recipe": yaml.safe_load((work / "recipe.yaml").read_text()), "bundle": work / "b"}


@pytest.fixture(scope="module")
def floor_charts(
    floor_helm: Helm, floor_recipe: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FolderMirror]:
    """A chart repository on loopback with a stand-in for every chart of the recipe."""
    root = tmp_path_factory.mktemp("floor-stand-ins")
    for ref in floor_recipe["recipe"]["componentRefs"]:
        source = root / "src" / ref["chart"]
        (source / "templates").mkdir(parents=True)
        chart = {"apiVersion": "v2", "name": ref["chart"], "version": ref["version"], "type": "application"}
        (source / "Chart.yaml").write_text(yaml.safe_dump(chart))
        (source / "templates" / "stand-in.yaml").write_text(STAND_IN_TEMPLATE)
        floor_helm.run("package", str(source), "--destination", str(root / "charts"))
    floor_helm.run("repo", "index", str(root / "charts"))
    with FolderMirror(root) as served:
        yield served


def pod_environment(plane: ControlPlane, namespace: str, job: dict[str, Any], pod_dirs: Path) -> dict[str, str]:
    """The environment the Job's pod would get, read from the installed Job and
    its settings ConfigMap: the pod's emptyDir mounts moved under ``pod_dirs``,
    the downward-API fields (the pod name is made up: no pod runs)."""
    spec = job["spec"]["template"]["spec"]
    [container] = spec["containers"]
    mounts = {m["mountPath"]: pod_dirs / m["name"] for m in container["volumeMounts"]}
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        settings = plane.configmap(namespace, source["configMapRef"]["name"])
        assert settings is not None
        env.update(settings["data"])
    job_name = job["metadata"]["name"]
    fields = {"metadata.name": f"{job_name}-host", "metadata.labels['batch.kubernetes.io/job-name']": job_name}
    for entry in container["env"]:
        if "valueFrom" in entry:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
            continue
        value = str(entry.get("value", ""))  # the API server drops an empty value
        for mount, directory in mounts.items():
            if value == mount or value.startswith(mount + "/"):
                value = str(directory) + value[len(mount) :]
        env[entry["name"]] = value
    for directory in mounts.values():
        directory.mkdir(parents=True, exist_ok=True)
    env["AICR_RUNNER_TERMINATION_MESSAGE_PATH"] = str(pod_dirs / "termination-log")
    return env


@pytest.mark.timeout(900)
def test_a_whole_run_with_the_real_aicr_against_the_floor_server(  # noqa: PLR0917 - fixtures
    floor_control_plane: ControlPlane,
    floor_helm: Helm,
    real_aicr_release: Path,
    floor_recipe: dict[str, Any],
    floor_charts: FolderMirror,
    tmp_path: Path,
) -> None:
    plane = floor_control_plane
    namespace = "floor-run"
    plane.create_namespace(namespace)
    server_version = plane.admin.get("/version")["gitVersion"]
    snapshot = {
        "measurements": [{"type": "K8s", "subtypes": [{"subtype": "server", "data": {"version": server_version}}]}]
    }
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": SNAPSHOT}, "data": {"snapshot.yaml": yaml.safe_dump(snapshot)}},
    )
    with FolderMirror(real_aicr_release.parent) as release_mirror:
        values = {
            **CRITERIA,
            "aicrVersion": TAG,
            "aicrReleaseBaseUrl": release_mirror.base_url,
            "aicrProvenance": {"mode": "warn"},  # no NVIDIA attestation in this release
            # No node runs validator pods here: the readiness pre-flight only, against
            # the snapshot that holds the server's version. --no-cluster skips every
            # check, so the verdict is inconclusive (never green): without failOnError
            # the run exits 0 with phase SucceededInconclusive.
            "validate": {"enabled": True, "phases": ["deployment"], "failOnError": False},
            "validateArgs": ["--snapshot", f"cm://{namespace}/{SNAPSHOT}", "--no-cluster"],
        }
        floor_helm.run(
            "install", RELEASE, str(CHART), "--namespace", namespace, "-f", str(values_file(tmp_path, values))
        )
        [job] = plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        env = pod_environment(plane, namespace, job, tmp_path / "pod")
        # The chart's ServiceAccount is who the run is (in a pod: its mounted token).
        account = job["spec"]["template"]["spec"]["serviceAccountName"]
        kubeconfig = plane.write_kubeconfig(tmp_path / "sa.kubeconfig", token=plane.token(namespace, account))
        redirect = tmp_path / "e2e-helm"
        redirect.mkdir()
        (redirect / "helm").write_text(HELM_REDIRECT)
        (redirect / "helm").chmod(0o755)
        # deploy.sh's helm and kubectl: the image's binary (.tools/bin), behind the chart redirect.
        path = os.pathsep.join([str(redirect), str(tool("kubectl").parent), os.environ.get("PATH", "/usr/bin:/bin")])
        env.update(KUBECONFIG=str(kubeconfig), PATH=path, E2E_CHART_REPO=f"{floor_charts.base_url}/charts")
        proc = subprocess.run(
            [sys.executable, "-m", "aicr_runner", "run"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=800,
        )
    output = proc.stdout + proc.stderr
    (tmp_path / "runner.log").write_text(output)
    assert proc.returncode == 0, output[-6000:]
    results = RunResults(plane, namespace)
    report = results.report()
    assert report["aicrVersion"] == "v0.11.1"
    assert results.step("fetch")["classification"] == "provenance-unverified"
    recipe = yaml.safe_load(results.data("aicr-recipe")["recipe.yaml"])
    assert recipe == floor_recipe["recipe"]
    components = recipe["componentRefs"]
    deploy = results.step("deploy")
    assert deploy["status"] == "succeeded", (deploy, output[-6000:])
    assert deploy["message"] == f"AICR install complete: {len(components)}/{len(components)} installed"
    for marker in ("Running pre-flight checks...", "Pre-flight checks passed.", "Deployment complete."):
        assert marker in output, marker
    assert "WARNING: no DRA kubelet plugin daemonset found in nvidia-dra-driver" in output, "deploy.sh's kubectl asked"
    for ref in components:
        releases = releases_in(floor_helm, ref["namespace"])
        assert releases[ref["name"]]["status"] == "deployed", (ref, releases)
        assert releases[ref["name"]]["chart"] == f"{ref['chart']}-{ref['version']}"
        assert plane.configmap(ref["namespace"], f"{ref['name']}-stand-in") is not None
    assert report["phase"] == "SucceededInconclusive", report["message"]
    validate = results.step("validate")
    assert (validate["status"], validate["classification"]) == ("warned", "validation-inconclusive"), validate
    assert validate["message"].startswith("validation inconclusive: no check ran: "), validate
    readiness = [line for line in output.splitlines() if "readiness constraint passed" in line]
    assert any(server_version in line for line in readiness), "readiness read the floor server's version"
    assert results.step("capture-verdict")["status"] == "succeeded"
    assert not [line for line in output.splitlines() if '"level": "error"' in line or " [error" in line], output[-4000:]
