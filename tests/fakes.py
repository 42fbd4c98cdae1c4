"""Test doubles for the runtime's externals (the Kubernetes API)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aicr_runner.errors import CaptureError


@dataclass
class FakeKubeApi:
    """Records server-side applies; ``fail_names`` makes those ConfigMaps fail."""

    objects: dict[tuple[str, str], dict[str, object]] = field(default_factory=dict)
    applies: list[tuple[str, str]] = field(default_factory=list)
    fail_names: set[str] = field(default_factory=set)

    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if name in self.fail_names:
            raise CaptureError(f"writing ConfigMap {namespace}/{name} failed: HTTP 403 Forbidden")
        self.applies.append((namespace, name))
        self.objects[(namespace, name)] = {
            "data": dict(data),
            "binaryData": dict(binary_data or {}),
            "labels": dict(labels or {}),
        }
