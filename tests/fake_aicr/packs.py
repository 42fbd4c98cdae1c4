"""Data packs for tests: a directory tree the fake (and real) aicr reads via --data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ACME_CRITERIA = {"service": "acme", "accelerator": "h100", "intent": "training"}


def write_pack(
    root: Path,
    *,
    components: list[dict[str, Any]] | None = None,
    overlays: dict[str, dict[str, Any]] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Write ``registry.yaml`` (always, as the contract requires), one
    ``overlays/<name>.yaml`` per entry of ``overlays`` (the value is the spec)
    and any extra ``files`` (path relative to root -> text)."""
    root.mkdir(parents=True, exist_ok=True)
    registry = {"apiVersion": "aicr.run/v1beta1", "kind": "ComponentRegistry", "components": components or []}
    (root / "registry.yaml").write_text(yaml.safe_dump(registry, sort_keys=False), encoding="utf-8")
    for name, spec in (overlays or {}).items():
        path = root / "overlays" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "apiVersion": "aicr.run/v1beta1",
            "kind": "RecipeMetadata",
            "metadata": {"name": name},
            "spec": spec,
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_acme_pack(root: Path, *, chart_repository: str = "oci://registry.example/charts") -> Path:
    """A pack that registers the private service value ``acme`` (1.x) with one
    extra component, ``acme-agent``, whose values come from the pack."""
    return write_pack(
        root,
        components=[
            {
                "name": "acme-agent",
                "valueOverrideKeys": ["acmeagent"],
                "helm": {
                    "defaultRepository": chart_repository,
                    "defaultChart": "acme-agent",
                    "defaultVersion": "1.0.0",
                    "defaultNamespace": "acme-system",
                },
            }
        ],
        overlays={
            "acme-h100-training": {
                "criteria": dict(ACME_CRITERIA),
                "constraints": [{"name": "K8s.server.version", "value": ">= 1.31"}],
                "componentRefs": [
                    {"name": "acme-agent", "type": "Helm", "valuesFile": "components/acme-agent/values.yaml"},
                ],
                "validation": {"deployment": {"checks": ["operator-health"]}},
            }
        },
        files={"components/acme-agent/values.yaml": "replicas: 2\n"},
    )
