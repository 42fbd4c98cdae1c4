"""deploy.helmApply against the real API server, through the runner's real helm guard.

A chart as small as the failure it shows: a CRD whose ``spec.storage.emptyDir`` is an
object, and a custom resource whose values set it to ``null`` (as aicr v0.11.1's
kube-prometheus-stack values do for the Prometheus CRD). The guard is installed as
the deploy step installs it (``helm.apply.apply_flag`` asks the real helm its
version) in front of the pinned Helm 4 or Helm 3, and the test runs
``helm upgrade --install`` through its shim, as deploy.sh does.

Helm 4 with ``client`` (the default) applies client-side: the release is
``deployed`` and the object written by ``helm`` with ``Update``; with ``server``
and ``auto`` a new release is applied server-side, the null reaches the CRD's
schema and the install fails. A Helm 3 gets no flag and deploys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.children.process import SubprocessRunner
from aicr_runner.errors import ConfigError
from aicr_runner.helm.apply import apply_flag
from aicr_runner.helm.guard import install_guard
from aicr_runner.settings.config import HelmApply
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.tools import tool

pytestmark = pytest.mark.e2e

GROUP = "helm-apply.aicr-runner.test"
REFUSED = 'spec.storage.emptyDir: Invalid value: "null"'
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "storage": {
                                        "type": "object",
                                        "properties": {
                                            "emptyDir": {"type": "object"},
                                            "volumeClaimTemplate": {
                                                "type": "object",
                                                "x-kubernetes-preserve-unknown-fields": True,
                                            },
                                        },
                                    }
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}
WIDGET = """apiVersion: {group}/v1
kind: Widget
metadata:
  name: {{{{ .Release.Name }}}}
spec:
  storage: {{{{- toYaml .Values.storage | nindent 4 }}}}
"""
#: The bundle's shape: the chart's default has no emptyDir, the values set it to null.
NULL_VALUES = {"storage": {"emptyDir": None, "volumeClaimTemplate": {"spec": {"resources": {"storage": "1Gi"}}}}}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("helm-apply")
    chart = root / "widget"
    (chart / "crds").mkdir(parents=True)
    (chart / "templates").mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: widget\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("storage: {}\n")
    (chart / "crds" / "widgets.yaml").write_text(yaml.safe_dump(CRD))
    (chart / "templates" / "widget.yaml").write_text(WIDGET.format(group=GROUP))
    values = root / "values.yaml"
    values.write_text(yaml.safe_dump(NULL_VALUES))
    return chart, values


def guarded(helm: Helm, real: Path, method: HelmApply, state: Path) -> Helm:
    """``helm`` run through the guard's shim, installed in front of ``real`` as the deploy step does."""
    flag = apply_flag(method, str(real), SubprocessRunner(), helm.env(), state / "helm-version.log")
    guard = install_guard(str(real.parent), state, flag)
    assert guard is not None
    through = Helm(helm.kubeconfig, helm.home)
    through.binary = guard.bin_dir / "helm"
    return through


def widget(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return plane.admin.get(f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets/{name}")


def install(helm: Helm, chart: tuple[Path, Path], namespace: str, release: str) -> Any:
    return helm.run("upgrade", "--install", release, str(chart[0]), "-n", namespace, "-f", str(chart[1]), check=False)


def test_client_the_default_makes_helm_4_apply_client_side_and_the_null_is_dropped(
    helm: Helm, control_plane: ControlPlane, namespace: str, chart: tuple[Path, Path], tmp_path: Path
) -> None:
    assert helm.run("version", "--short").stdout.startswith("v4.")
    through = guarded(helm, Path(helm.binary), HelmApply.CLIENT, tmp_path / "guard")
    done = install(through, chart, namespace, "client")
    assert done.returncode == 0, done.stderr
    assert "helm-guard: helm upgrade client" in done.stdout
    status = json.loads(helm.run("status", "client", "-n", namespace, "-o", "json").stdout)
    assert (status["info"]["status"], status["apply_method"]) == ("deployed", "csa")
    found = widget(control_plane, namespace, "client")
    assert {(f["manager"], f["operation"]) for f in found["metadata"]["managedFields"]} == {("helm", "Update")}
    assert found["spec"]["storage"] == {"volumeClaimTemplate": {"spec": {"resources": {"storage": "1Gi"}}}}
    # The next run's upgrade keeps client-side apply, and so would `auto` (the release's method).
    again = install(through, chart, namespace, "client")
    assert again.returncode == 0, again.stderr
    status = json.loads(helm.run("status", "client", "-n", namespace, "-o", "json").stdout)
    assert (status["version"], status["apply_method"]) == (2, "csa")


@pytest.mark.parametrize("method", [HelmApply.SERVER, HelmApply.AUTO])
def test_server_and_auto_apply_a_new_release_server_side_which_sends_the_null(
    helm: Helm, namespace: str, chart: tuple[Path, Path], tmp_path: Path, method: HelmApply
) -> None:
    through = guarded(helm, Path(helm.binary), method, tmp_path / "guard")
    done = install(through, chart, namespace, method.value)
    assert done.returncode != 0
    assert REFUSED in done.stderr, done.stderr
    status = json.loads(helm.run("status", method.value, "-n", namespace, "-o", "json").stdout)
    assert (status["info"]["status"], status["apply_method"]) == ("failed", "ssa")


def test_client_upgrades_a_release_an_earlier_run_installed_server_side(
    helm: Helm, control_plane: ControlPlane, namespace: str, chart: tuple[Path, Path], tmp_path: Path
) -> None:
    # Values without the null, so that the server-side install succeeds (a runner before deploy.helmApply).
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"storage": {"emptyDir": {}}}))
    before = guarded(helm, Path(helm.binary), HelmApply.SERVER, tmp_path / "guard-server")
    before.run("upgrade", "--install", "earlier", str(chart[0]), "-n", namespace, "-f", str(plain))
    status = json.loads(helm.run("status", "earlier", "-n", namespace, "-o", "json").stdout)
    assert (status["info"]["status"], status["apply_method"]) == ("deployed", "ssa")
    after = guarded(helm, Path(helm.binary), HelmApply.CLIENT, tmp_path / "guard-client")
    done = install(after, chart, namespace, "earlier")
    assert done.returncode == 0, done.stderr
    status = json.loads(helm.run("status", "earlier", "-n", namespace, "-o", "json").stdout)
    assert (status["info"]["status"], status["version"], status["apply_method"]) == ("deployed", 2, "csa")
    assert "emptyDir" not in widget(control_plane, namespace, "earlier")["spec"]["storage"]


def test_a_helm_3_gets_no_flag_and_applies_client_side_and_refuses_server(
    helm: Helm, control_plane: ControlPlane, namespace: str, chart: tuple[Path, Path], tmp_path: Path
) -> None:
    # deploy.sh's helm is the `helm` on its PATH: here the pinned Helm 3 under that name.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "helm").symlink_to(tool("helm3"))
    helm3 = Helm(helm.kubeconfig, helm.home)
    helm3.binary = tmp_path / "bin" / "helm"
    assert helm3.run("version", "--short").stdout.startswith("v3.")
    through = guarded(helm3, helm3.binary, HelmApply.CLIENT, tmp_path / "guard")
    assert "--server-side" not in through.binary.read_text()
    done = install(through, chart, namespace, "three")
    assert done.returncode == 0, done.stderr
    operations = {f["operation"] for f in widget(control_plane, namespace, "three")["metadata"]["managedFields"]}
    assert operations == {"Update"}
    with pytest.raises(ConfigError, match=r"deploy\.sh's helm is Helm 3"):
        guarded(helm3, helm3.binary, HelmApply.SERVER, tmp_path / "guard-server")
