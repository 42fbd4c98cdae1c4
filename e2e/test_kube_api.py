"""ClientKubeApi against a real kube-apiserver: server-side apply, RBAC, errors."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from kubernetes import client, config

from aicr_runner.errors import CaptureError
from aicr_runner.kube.api import FIELD_MANAGER, ClientKubeApi
from aicr_runner.kube.sink import RESULT_LABELS, ConfigMapSink
from e2e.harness.apiserver import ControlPlane

pytestmark = pytest.mark.e2e


def admin_client(control_plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


def test_server_side_apply_creates_then_takes_over(control_plane: ControlPlane, namespace: str) -> None:
    api = ClientKubeApi(admin_client(control_plane))
    sink = ConfigMapSink(api, namespace)
    sink.put("aicr-run-status", data={"report.json": "{}", "summary.txt": "a"}, binary_data={"x.gz": b"\x1f\x8b\x00"})
    # Another manager edits a field; the runner's forced apply takes it back.
    path = f"/api/v1/namespaces/{namespace}/configmaps/aicr-run-status"
    control_plane.admin.merge_patch(path, {"data": {"summary.txt": "edited by someone"}})
    sink.put("aicr-run-status", data={"report.json": '{"v": 2}', "summary.txt": "b"})
    stored = control_plane.admin.get(path)
    assert stored["data"] == {"report.json": '{"v": 2}', "summary.txt": "b"}
    assert "binaryData" not in stored, "fields the runner no longer applies are removed"
    assert stored["metadata"]["labels"] == RESULT_LABELS
    managers = {(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]}
    assert (FIELD_MANAGER, "Apply") in managers


def test_binary_data_round_trips(control_plane: ControlPlane, namespace: str) -> None:
    api = ClientKubeApi(admin_client(control_plane))
    api.apply_configmap(
        namespace, "evidence", data={"pointer.yaml": "p"}, binary_data={"evidence.tgz": b"\x00\xff" * 10}
    )
    stored = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/evidence")
    assert base64.b64decode(stored["binaryData"]["evidence.tgz"]) == b"\x00\xff" * 10


def test_forbidden_write_is_a_capture_error_naming_rbac(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    control_plane.admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "no-rights"}})
    token = control_plane.token(namespace, "no-rights")
    api = ClientKubeApi(control_plane.kubernetes_client(token))
    with pytest.raises(CaptureError) as caught:
        api.apply_configmap(namespace, "x", data={"k": "v"})
    assert caught.value.exit_code == 26
    assert "HTTP 403" in caught.value.message
    assert "may not write ConfigMaps" in caught.value.message
    assert token not in caught.value.message


def test_missing_namespace_is_named(control_plane: ControlPlane) -> None:
    api = ClientKubeApi(admin_client(control_plane))
    with pytest.raises(CaptureError, match="HTTP 404"):
        api.apply_configmap("no-such-namespace", "x", data={"k": "v"})
