"""The whole list of one install: the aicr release, the runner's image and chart,
the data pack, each component chart at its pinned version, every image those
charts start (rendered with the bundle's values) and aicr's own images."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aicr_runner.aicr.recipe import Component, RecipeSummary
from aicr_runner.mirror.aicr_images import validator_items
from aicr_runner.mirror.images import Found, OsRelease, images_in_documents
from aicr_runner.mirror.items import Item, Kind, merge
from aicr_runner.mirror.render import ChartRef, ChartRenderer

__all__ = ["RUNNER_CHART", "RUNNER_CHART_VERSION", "Release", "collect", "component_images"]

#: Where this project's chart is published, and the version this runner ships with
#: (a test holds it to chart/Chart.yaml).
RUNNER_CHART = "oci://ghcr.io/nvidia-aicr/charts/nvidia-aicr"
RUNNER_CHART_VERSION = "0.4.0"


@dataclass(frozen=True)
class Release:
    """What one install of the chart uses, as far as the list is concerned."""

    summary: RecipeSummary
    #: The recipe's validation checks per phase (``validation.<phase>.checks``).
    checks: Mapping[str, Sequence[str]]
    bundle_dir: Path
    #: The aicr release's files: (URL, sha256 or "", size or None).
    aicr_files: Sequence[tuple[str, str, int | None]]
    aicr_version: str
    runner_image: str
    pack_ref: str = ""
    #: Validation phases that run (empty: validation off), and the snapshot agent when one runs.
    phases: Sequence[str] = ()
    snapshot_agent: str | None = None


def collect(release: Release, renderer: ChartRenderer) -> list[Item]:
    items: list[Item] = [
        Item(Kind.FILE, url, ("aicr-runner fetch step",), sha, size, note=_file_note(url))
        for url, sha, size in release.aicr_files
    ]
    items.append(Item(Kind.IMAGE, release.runner_image, ("aicr-runner Job",)))
    items.append(
        Item(
            Kind.CHART,
            f"{RUNNER_CHART}:{RUNNER_CHART_VERSION}",
            ("helm install of aicr-runner",),
            chart_source=RUNNER_CHART.rsplit("/", 1)[0],
            chart_name=RUNNER_CHART.rsplit("/", 1)[1],
            version=RUNNER_CHART_VERSION,
            extra={"namespace": "aicr"},
        )
    )
    if release.pack_ref:
        items.append(Item(Kind.ARTIFACT, release.pack_ref, ("aicr-runner pack step (aicr --data)",)))
    for component in release.summary.components:
        items.extend(_component_items(component, release, renderer))
    service = release.summary.criteria.get("service", "")
    items.extend(
        validator_items(
            release.aicr_version, release.phases, release.checks, service=service, snapshot_agent=release.snapshot_agent
        )
    )
    return merge(items)


def _file_note(url: str) -> str:
    if url.endswith(".tar.gz"):
        return "carries aicr-attestation.sigstore.json (the binary's Sigstore attestation) beside the binary"
    return ""


def _component_items(component: Component, release: Release, renderer: ChartRenderer) -> list[Item]:
    folder = _bundle_folder(release.bundle_dir, component.name)
    items: list[Item] = []
    found: list[Found] = []
    if component.chart and component.source:
        ref = ChartRef(component.name, component.namespace, component.chart, component.version, component.source)
        values = [p for p in (folder / "values.yaml", folder / "cluster-values.yaml") if p.is_file()] if folder else []
        rendered = renderer.render(ref, values, _kube_version(release.summary))
        items.append(_chart_item(ref, renderer.archive_facts(ref)))
        found.extend(images_in_documents(_documents(rendered), _os_release(release.summary)))
    if folder is not None and (folder / "manifests").is_dir():
        for manifest in sorted((folder / "manifests").glob("*.y*ml")):
            found.extend(images_in_documents(_documents(manifest.read_text()), _os_release(release.summary)))
    items.extend(Item(Kind.IMAGE, f.image, (f"{component.name} ({f.where})",), note=f.note) for f in found)
    return items


def component_images(component: str, rendered: str, os_release: OsRelease | None = None) -> list[Item]:
    """The images of one component's rendered manifests (what ``collect`` lists for it)."""
    found = images_in_documents(_documents(rendered), os_release)
    return merge([Item(Kind.IMAGE, f.image, (f"{component} ({f.where})",), note=f.note) for f in found])


def _chart_item(ref: ChartRef, facts: tuple[str, int] | None) -> Item:
    """The chart as deploy.sh installs it, with what its pulled archive showed."""
    reference = (
        f"{ref.source.rstrip('/')}/{ref.chart}:{ref.version}" if ref.oci else f"{ref.source} {ref.chart}@{ref.version}"
    )
    return Item(
        Kind.CHART,
        reference,
        (f"{ref.component} (deploy.sh)",),
        # A repository chart's digest is its archive's (what the copy checks); an OCI chart's
        # is its manifest's, which the archive does not give.
        facts[0] if facts and not ref.oci else "",
        facts[1] if facts else None,
        chart_source=ref.source,
        chart_name=ref.chart,
        version=ref.version,
        extra={"namespace": ref.namespace, "release": ref.component},
    )


def _bundle_folder(bundle_dir: Path, name: str) -> Path | None:
    """A component's folder: ``<name>/`` (aicr 0.11) or ``NNN-<name>/`` (1.x)."""
    flat = bundle_dir / name
    if flat.is_dir():
        return flat
    numbered = sorted(p for p in bundle_dir.glob(f"[0-9][0-9][0-9]-{name}") if p.is_dir())
    return numbered[0] if numbered else None


def _documents(text: str) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _kube_version(summary: RecipeSummary) -> str | None:
    """The lowest Kubernetes version the recipe admits (``>= 1.32.4``), for ``--kube-version``."""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", summary.constraints.get("K8s.server.version", ""))
    return match.group(1) if match else None


def _os_release(summary: RecipeSummary) -> OsRelease | None:
    os_id = summary.constraints.get("OS.release.ID", "")
    version = summary.constraints.get("OS.release.VERSION_ID", "")
    return OsRelease(os_id, version) if os_id and re.fullmatch(r"[0-9.]+", version) else None
