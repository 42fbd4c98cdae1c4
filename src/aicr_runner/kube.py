"""The Kubernetes API, behind a small interface.

Only ConfigMaps are written, with server-side apply: ``PATCH`` with content type
``application/apply-patch+yaml``, a field manager, and ``force`` so a re-run takes
over fields a previous run owned. The request goes through the client's generic
``call_api``: the generated ``patch_namespaced_config_map`` of the pinned major
refuses a ``_content_type`` override and would otherwise pick a merge-patch type.
Bodies are plain dicts so the client's major version can move without touching
this code.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Protocol

from aicr_runner.errors import CaptureError

__all__ = ["FIELD_MANAGER", "ClientKubeApi", "KubeApi", "configmap_body"]

FIELD_MANAGER = "aicr-runner"


class KubeApi(Protocol):
    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None: ...


def configmap_body(
    namespace: str,
    name: str,
    *,
    data: Mapping[str, str],
    binary_data: Mapping[str, bytes] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "data": dict(data),
    }
    if binary_data:
        body["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary_data.items()}
    return body


class ClientKubeApi:
    """The official client. In a pod it uses the ServiceAccount; elsewhere kubeconfig."""

    def __init__(self, api_client: Any | None = None) -> None:
        from kubernetes import client, config  # imported lazily: plan never needs it

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                try:
                    config.load_kube_config()
                except (config.ConfigException, OSError) as exc:
                    raise CaptureError(
                        "no Kubernetes credentials: not running in a pod and no usable kubeconfig "
                        f"({exc}); use 'aicr-runner plan' for a local dry run"
                    ) from exc
            api_client = client.ApiClient()
        self._api_client = api_client

    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        body = configmap_body(namespace, name, data=data, binary_data=binary_data, labels=labels)
        try:
            self._api_client.call_api(
                "/api/v1/namespaces/{namespace}/configmaps/{name}",
                "PATCH",
                path_params={"namespace": namespace, "name": name},
                query_params=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                response_type=None,  # read (keeps the pooled connection usable), no model decode
                _return_http_data_only=True,
            )
        except ApiException as exc:
            hint = {
                403: "the Job's ServiceAccount may not write ConfigMaps in this namespace",
                404: "the namespace does not exist",
                413: "the payload is too large",
                422: "the API server rejected the object",
            }.get(exc.status or 0, "")
            raise CaptureError(
                f"writing ConfigMap {namespace}/{name} failed: HTTP {exc.status} {exc.reason}"
                + (f" ({hint})" if hint else "")
            ) from exc
        except (HTTPError, OSError) as exc:
            raise CaptureError(f"writing ConfigMap {namespace}/{name} failed: {exc}") from exc
