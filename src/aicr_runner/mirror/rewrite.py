"""The resolved recipe's chart sources, rewritten to the site's mirror.

aicr v0.11.1's overlays set ``source:`` on every componentRef, so a data pack's
``registry.yaml`` redirects only the components without one (2 of the 12 of
eks/h100/training/ubuntu). The runner holds the recipe between ``aicr recipe``
and ``aicr bundle``: with ``mirror.registry`` set it rewrites every source there,
and deploy.sh then names only the mirror (tried with v0.11.1: all 11 charts;
``aicr verify`` passes). The upstream recipe and the mapping are kept beside it
(``recipe.upstream.yaml``, ``mirror-sources.json``) and captured with it.

Mapping (one definition, used by the copy as well): ``oci://host/path`` becomes
``oci://<registry>/host/path``; ``https://host/path`` becomes
``oci://<registry>/host/path`` (the chart pushed as an OCI chart), or
``mirror.chartRepository`` when that is set (alone, it redirects only those). The upstream host stays in the path,
so two sources with the same path on different hosts never collide.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SOURCES_FILE",
    "UPSTREAM_RECIPE",
    "SourceMapping",
    "apply",
    "mirror_path",
    "mirrored_source",
    "recorded",
    "rewrite_recipe",
]

UPSTREAM_RECIPE = "recipe.upstream.yaml"
SOURCES_FILE = "mirror-sources.json"


@dataclass(frozen=True)
class SourceMapping:
    component: str
    chart: str
    version: str
    source: str
    mirrored: str


def mirror_path(location: str) -> str:
    """``host[:port]/path`` as a path in the mirror: the upstream host kept as the first
    component (a port written ``_port``: a repository name has no ':')."""
    host, slash, path = location.strip("/").partition("/")
    return f"{host.replace(':', '_')}{slash}{path}"


def mirrored_source(source: str, registry: str, chart_repository: str = "") -> str:
    """Where a chart of ``source`` is in the mirror (``source`` as the recipe has it)."""
    scheme, sep, rest = source.partition("://")
    if not sep:
        return source
    if scheme != "oci" and chart_repository:
        return chart_repository
    if not registry:  # mirror.chartRepository alone redirects the chart-repository sources only
        return source
    return f"oci://{registry.rstrip('/')}/{mirror_path(rest)}"


def rewrite_recipe(recipe: Path, registry: str, chart_repository: str = "") -> list[SourceMapping]:
    """Rewrite ``recipe`` in place (the upstream one kept beside it); the mapping."""
    import yaml

    text = recipe.read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    mapping: list[SourceMapping] = []
    for ref in doc.get("componentRefs") or ():
        source = str(ref.get("source") or "")
        if not source:
            continue  # manifests only (skyhook-customizations): nothing to fetch
        ref["source"] = mirrored_source(source, registry, chart_repository)
        mapping.append(
            SourceMapping(
                str(ref["name"]), str(ref.get("chart", "")), str(ref.get("version", "")), source, ref["source"]
            )
        )
    (recipe.parent / UPSTREAM_RECIPE).write_text(text)
    recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
    record = {"registry": registry, "chartRepository": chart_repository, "components": [asdict(m) for m in mapping]}
    (recipe.parent / SOURCES_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return mapping


def apply(recipe: Path, registry: str, chart_repository: str) -> str:
    """The recipe step's part: rewrite when a mirror is set; what to add to its message."""
    (recipe.parent / SOURCES_FILE).unlink(missing_ok=True)
    (recipe.parent / UPSTREAM_RECIPE).unlink(missing_ok=True)
    if not registry and not chart_repository:
        return ""
    mapping = rewrite_recipe(recipe, registry, chart_repository)
    moved = sum(1 for m in mapping if m.mirrored != m.source)
    return f"; {moved} of {len(mapping)} chart sources rewritten to the mirror {registry or chart_repository}"


def recorded(recipe: Path) -> dict[str, str]:
    """What the recipe capture stores beside recipe.yaml: the mapping, when the sources were rewritten."""
    path = recipe.parent / SOURCES_FILE
    return {SOURCES_FILE: path.read_text()} if path.is_file() else {}
