"""The documented uninstall steps and the narrower RBAC, against the real API
server, Job controller and helm (issue 13).

``helm uninstall`` leaves the result ConfigMaps, the install Lease and every
component release the runs installed (docs/installing.md "Uninstalling" says why).
Here a Job installs an org pack's two component charts for real, with
``rbac.clusterAdmin: false`` (the chart's narrower ClusterRole, not cluster-admin),
and then the bash block of docs/installing.md "Uninstalling" runs exactly as written
(only the release and namespace names set), under Helm 4 and Helm 3: everything
it promises to remove is gone, and nothing else is.

The namespaced Role is also checked alone (no ClusterRoleBinding), as
e2e/test_lease_rbac.py does for the Lease: the runner's result ConfigMaps and its
own Job, and nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.errors import CaptureError
from aicr_runner.kube.api import ClientKubeApi
from aicr_runner.kube.lease import RELEASES_ANNOTATION
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.kube import KubeError
from e2e.harness.node import Kubelet
from e2e.harness.registry import Registry
from e2e.scenarios import (
    CHART,
    COMPONENT_CHARTS,
    RELEASE,
    RunResults,
    push_component_charts,
    releases_in,
    write_org_pack,
)
from e2e.test_scenarios import PACK_SECRET, OrgPack, merged, pack_run_values
from e2e.tools import REPO_ROOT, tool

pytestmark = pytest.mark.e2e

DOC = REPO_ROOT / "docs" / "installing.md"
#: The first line of the documented block: the only line the test changes.
NAMES_LINE = "NS=aicr RELEASE=aicr   # your chart release and its namespace"
RESULT_CONFIGMAPS = ("aicr-recipe", "aicr-validate-result", "aicr-evidence-bundle", "aicr-run-status")


def documented_uninstall() -> str:
    """The bash block of docs/installing.md's "Uninstalling" section, verbatim."""
    section = DOC.read_text().split("\n## Uninstalling\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert block.startswith(NAMES_LINE + "\n"), block
    return str(block)


@pytest.fixture(scope="module")
def component_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    return push_component_charts(helm, registry, tmp_path_factory.mktemp("uninstall-charts"))


@pytest.fixture
def pack(
    component_repository: str, registry: Registry, registry_auth_file: Path, namespace: str, tmp_path: Path
) -> OrgPack:
    components = f"{namespace}-acme"
    root = write_org_pack(tmp_path / "pack", chart_repository=component_repository, namespace=components)
    pushed = oras.push_pack(root, registry.ref(f"acme/{namespace}/pack", "1.0.0"), registry_config=registry_auth_file)
    return OrgPack(ref=pushed.ref, components_namespace=components)


@pytest.fixture(params=["helm", "helm3"], ids=["helm4", "helm3"])
def any_helm(request: pytest.FixtureRequest, helm: Helm) -> Helm:
    other = Helm(helm.kubeconfig, helm.home)
    other.binary = tool(str(request.param))
    return other


def run_documented_steps(helm: Helm, namespace: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """The documented block with this test's names, run by bash with ``helm`` (the
    chosen major), kubectl and jq on PATH, as a user's shell would have them."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").symlink_to(helm.binary)
    (bin_dir / "kubectl").symlink_to(tool("kubectl"))
    (bin_dir / "jq").symlink_to(tool("jq"))
    script = documented_uninstall().replace(NAMES_LINE, f"NS={namespace} RELEASE={RELEASE}", 1)
    env = {**helm.env(), "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def names(plane: ControlPlane, path: str) -> set[str]:
    return {item["metadata"]["name"] for item in plane.admin.get(path)["items"]}


def test_the_documented_uninstall_removes_the_release_its_components_and_what_the_runs_left(
    *,
    any_helm: Helm,
    control_plane: ControlPlane,
    registry: Registry,
    aicr_kubelet: Kubelet,
    pack: OrgPack,
    namespace: str,
    tmp_path: Path,
) -> None:
    helm, plane = any_helm, control_plane
    plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    values = merged(pack_run_values(pack), {"aicrProvenance": {"mode": "off"}, "rbac": {"clusterAdmin": False}})
    helm.install(RELEASE, CHART, namespace, values=values)
    binding = plane.admin.get(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-{RELEASE}-installer")
    assert binding["roleRef"]["name"] == f"{namespace}-{RELEASE}-installer", "the narrower ClusterRole"

    run = aicr_kubelet.run_job(RELEASE, namespace)
    assert run.exit_code == 0, run.describe()
    # deployFlags carries --best-effort: exit 0 alone would hide a forbidden install.
    deploy = RunResults(plane, namespace).step("deploy")
    assert deploy["status"] == "succeeded", deploy
    components = pack.components_namespace
    assert {n: r["status"] for n, r in releases_in(helm, components).items()} == dict.fromkeys(
        COMPONENT_CHARTS, "deployed"
    )
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{RELEASE}-install"
    announced = plane.admin.get(lease_path)["metadata"]["annotations"][RELEASES_ANNOTATION]
    assert all(f"{components}/{name}" in announced for name in COMPONENT_CHARTS), announced
    assert set(RESULT_CONFIGMAPS) - {"aicr-validate-result", "aicr-evidence-bundle"} <= names(
        plane, f"/api/v1/namespaces/{namespace}/configmaps"
    )

    started = time.monotonic()
    steps = run_documented_steps(helm, namespace, tmp_path)
    took = time.monotonic() - started
    assert steps.returncode == 0, steps.stdout + steps.stderr

    # Step 1: the chart's objects, the Job and its pod.
    assert releases_in(helm, namespace) == {}
    assert names(plane, f"/apis/batch/v1/namespaces/{namespace}/jobs") == set()
    assert names(plane, f"/api/v1/namespaces/{namespace}/pods") == set()
    assert f"{RELEASE}-installer" not in names(plane, f"/api/v1/namespaces/{namespace}/serviceaccounts")
    assert names(plane, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles") == set()
    cluster_rbac = f"{namespace}-{RELEASE}-installer"
    assert cluster_rbac not in names(plane, "/apis/rbac.authorization.k8s.io/v1/clusterroles")
    assert cluster_rbac not in names(plane, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")
    # Step 3: every component release, and what the components made.
    assert releases_in(helm, components) == {}
    assert names(plane, f"/api/v1/namespaces/{components}/configmaps") == {"kube-root-ca.crt"}
    # Step 4: the Lease and the results.
    assert names(plane, f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases") == set()
    configmaps = names(plane, f"/api/v1/namespaces/{namespace}/configmaps")
    assert configmaps == {"kube-root-ca.crt"}, configmaps
    # Nothing else: the user's Secret and the namespaces stay.
    assert PACK_SECRET in names(plane, f"/api/v1/namespaces/{namespace}/secrets")
    assert {namespace, components} <= names(plane, "/api/v1/namespaces")
    print(f"\n{helm.run('version', '--short').stdout.strip()}: the documented uninstall took {took:.1f}s")


def test_the_namespaced_role_alone_covers_the_result_configmaps_and_the_job_and_nothing_else(
    helm: Helm, control_plane: ControlPlane, namespace: str
) -> None:
    docs = helm.template(RELEASE, CHART, namespace, values={"accelerator": "h100", "rbac": {"clusterAdmin": False}})
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    [account], [role], [binding] = by_kind["ServiceAccount"], by_kind["Role"], by_kind["RoleBinding"]
    admin = control_plane.admin
    admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding)
    assert by_kind["ClusterRoleBinding"], "rendered, and deliberately not applied here"
    token = control_plane.token(namespace, account["metadata"]["name"])
    api = ClientKubeApi(control_plane.kubernetes_client(token))

    for name in RESULT_CONFIGMAPS:
        api.apply_configmap(namespace, name, data={"summary.txt": "first write: created\n"})
        api.apply_configmap(namespace, name, data={"summary.txt": "second write: patched\n"})
        written = control_plane.configmap(namespace, name)
        assert written is not None
        assert written["data"] == {"summary.txt": "second write: patched\n"}
    with pytest.raises(CaptureError, match="HTTP 403") as refused:
        api.apply_configmap(namespace, "someone-elses-settings", data={"a": "b"})
    assert "may not write ConfigMaps" in refused.value.message

    # Its own Job (the name the chart rendered) and no other.
    [rendered] = by_kind["Job"]
    for name in (rendered["metadata"]["name"], f"{RELEASE}-install-other"):
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"example.com/from": "test"}},
            "spec": {
                "suspend": True,  # no pod: only the Job's labels are read
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x.invalid/y:1"}]}
                },
            },
        }
        admin.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    labels = api.get_job_labels(namespace, rendered["metadata"]["name"])
    assert labels is not None
    assert labels["example.com/from"] == "test"
    with pytest.raises(CaptureError, match="HTTP 403"):
        api.get_job_labels(namespace, f"{RELEASE}-install-other")

    other = control_plane.client(token)
    for path in (
        f"/api/v1/namespaces/{namespace}/secrets",
        f"/api/v1/namespaces/{namespace}/pods",
        "/api/v1/namespaces",
    ):
        with pytest.raises(KubeError) as forbidden:
            other.get(path)
        assert forbidden.value.status == 403, path
