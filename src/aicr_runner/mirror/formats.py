"""The list as a table, as JSON, and as the manifests Hauler and Zarf take.

Hauler (v1 content kinds, hauler >= 1.x): ``Files`` (the aicr release),
``Images`` (images and the data pack), ``Charts`` (``repoURL`` is the chart
repository, or ``oci://host/path`` without the chart name). Zarf
(``ZarfPackageConfig``): one required component; OCI charts as
``url: oci://.../<chart>``, repository charts as ``url`` + ``repoName``; every
chart has its namespace (Zarf refuses one without); files need a target path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from aicr_runner.mirror.items import FORMATS, Item, Kind

__all__ = ["FORMATS", "render"]


def render(items: Sequence[Item], fmt: str) -> str:
    return {"table": _table, "json": _json, "hauler": _hauler, "zarf": _zarf}[fmt](items)


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size = size / 1024  # type: ignore[assignment]
    return "-"


def _table(items: Sequence[Item]) -> str:
    rows = [("KIND", "REFERENCE", "DIGEST", "SIZE", "NEEDED BY")]
    for item in items:
        needed = item.needed_by[0] + (f" (+{len(item.needed_by) - 1})" if len(item.needed_by) > 1 else "")
        rows.append((item.kind.value, item.reference, item.digest[:19] or "-", _size(item.size), needed))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]
    counts = {kind: sum(1 for item in items if item.kind is kind) for kind in Kind}
    lines.append(f"{len(items)} items: " + ", ".join(f"{n} {kind.value}s" for kind, n in counts.items() if n))
    return "\n".join(lines) + "\n"


def _json(items: Sequence[Item]) -> str:
    return json.dumps({"items": [item.as_json() for item in items]}, indent=2) + "\n"


def _image_refs(items: Sequence[Item]) -> list[str]:
    return [item.reference for item in items if item.kind in (Kind.IMAGE, Kind.ARTIFACT)]


def _charts(items: Sequence[Item]) -> list[Item]:
    return [item for item in items if item.kind is Kind.CHART]


def _hauler(items: Sequence[Item]) -> str:
    docs: list[dict[str, Any]] = [
        _hauler_doc("Files", "aicr-files", "files", [{"path": i.reference} for i in items if i.kind is Kind.FILE]),
        _hauler_doc("Images", "aicr-images", "images", [{"name": ref} for ref in _image_refs(items)]),
        _hauler_doc(
            "Charts",
            "aicr-charts",
            "charts",
            [{"name": c.chart_name, "repoURL": c.chart_source, "version": c.version} for c in _charts(items)],
        ),
    ]
    return yaml.safe_dump_all(docs, sort_keys=False)


def _hauler_doc(kind: str, name: str, key: str, entries: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "content.hauler.cattle.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {key: entries},
    }


def _zarf_chart(chart: Item) -> dict[str, str]:
    # Zarf's name is also the release name: deploy.sh's (the component), not the chart's.
    name = chart.extra.get("release", chart.chart_name)
    out = {"name": name, "version": chart.version, "namespace": chart.extra.get("namespace", "default")}
    if chart.chart_source.startswith("oci://"):
        out["url"] = f"{chart.chart_source.rstrip('/')}/{chart.chart_name}"
    else:
        out |= {"url": chart.chart_source, "repoName": chart.chart_name}
    return out


def _zarf(items: Sequence[Item]) -> str:
    component = {
        "name": "aicr",
        "required": True,
        "files": [
            {"source": i.reference, "target": f"aicr/{i.reference.rsplit('/', 1)[-1]}"}
            for i in items
            if i.kind is Kind.FILE
        ],
        "charts": [_zarf_chart(c) for c in _charts(items)],
        "images": _image_refs(items),
    }
    package = {"kind": "ZarfPackageConfig", "metadata": {"name": "aicr-mirror"}, "components": [component]}
    return yaml.safe_dump(package, sort_keys=False)
