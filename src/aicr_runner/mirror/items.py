"""What ``aicr-runner mirror`` lists: one item per thing an install pulls or downloads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["FORMATS", "Item", "Kind", "merge"]

#: ``mirror -o``: what the list is printed as.
FORMATS = ("table", "json", "hauler", "zarf")


class Kind(StrEnum):
    #: A file of the aicr release (archive, checksums), fetched over HTTP(S).
    FILE = "file"
    #: A container image (by tag, or by digest when the source pins one).
    IMAGE = "image"
    #: A Helm chart: in an HTTP chart repository or an OCI registry.
    CHART = "chart"
    #: An OCI artifact that is no image or chart (the data pack).
    ARTIFACT = "artifact"


@dataclass(frozen=True)
class Item:
    kind: Kind
    #: What is pulled: an image or artifact reference, a URL, or ``<repo> <chart>@<version>``.
    reference: str
    #: Who needs it, e.g. ``gpu-operator (ClusterPolicy spec.driver)``; several when shared.
    needed_by: tuple[str, ...] = ()
    digest: str = ""
    size: int | None = None
    #: A chart's repository (``https://...`` or ``oci://host/path``), name and version.
    chart_source: str = ""
    chart_name: str = ""
    version: str = ""
    #: Something the user must know (an operator composes the tag per node OS, ...).
    note: str = ""
    #: Extra facts for manifests (a chart's namespace).
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind.value, self.reference)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "reference": self.reference,
            "digest": self.digest or None,
            "size": self.size,
            "neededBy": list(self.needed_by),
        }
        if self.kind is Kind.CHART:
            out |= {"repository": self.chart_source, "chart": self.chart_name, "version": self.version}
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Item:
        """The item ``as_json`` gave (``mirror --list -o json``), with ``extra`` when the
        mapping carries it (an archive's manifest does)."""
        return cls(
            Kind(data["kind"]),
            str(data["reference"]),
            tuple(str(n) for n in data.get("neededBy") or ()),
            str(data.get("digest") or ""),
            data.get("size"),
            str(data.get("repository") or ""),
            str(data.get("chart") or ""),
            str(data.get("version") or ""),
            str(data.get("note") or ""),
            {str(k): str(v) for k, v in (data.get("extra") or {}).items()},
        )


def merge(items: list[Item]) -> list[Item]:
    """One item per (kind, reference), in first-seen order; who needs it is the union."""
    merged: dict[tuple[str, str], Item] = {}
    for item in items:
        seen = merged.get(item.key)
        if seen is None:
            merged[item.key] = item
            continue
        needed = seen.needed_by + tuple(n for n in item.needed_by if n not in seen.needed_by)
        note = seen.note if not item.note or item.note in seen.note else f"{seen.note}; {item.note}".strip("; ")
        merged[item.key] = Item(
            seen.kind,
            seen.reference,
            needed,
            seen.digest or item.digest,
            seen.size if seen.size is not None else item.size,
            seen.chart_source,
            seen.chart_name,
            seen.version,
            note,
            {**item.extra, **seen.extra},
        )
    return list(merged.values())
