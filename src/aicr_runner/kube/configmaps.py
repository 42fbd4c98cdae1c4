"""A ConfigMap's body as the API takes it and gives it back: ``data`` as text,
``binaryData`` base64 on the wire and bytes here."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from aicr_runner.errors import CaptureError

__all__ = ["binary_of", "configmap_body", "data_of"]


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


def data_of(body: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (body.get("data") or {}).items()}


def binary_of(body: Mapping[str, Any], where: str) -> dict[str, bytes]:
    """``binaryData`` decoded; a value that is not base64 fails closed (a CaptureError)."""
    try:
        return {str(k): base64.b64decode(str(v), validate=True) for k, v in (body.get("binaryData") or {}).items()}
    except (binascii.Error, ValueError) as exc:
        raise CaptureError(f"{where}: binaryData is not base64: {exc}") from exc
