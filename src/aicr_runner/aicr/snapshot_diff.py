"""What changed in the cluster between two ``aicr snapshot`` documents. Pure: text in, lines out.

aicr 0.11 has no ``aicr diff`` (it came with 1.x, and 1.x cannot read a 0.11
``aicr.nvidia.com/v1alpha1`` snapshot), so the runner compares the readings an
operator acts on itself, the way 1.x does: measurements only, values as strings,
the header (timestamp, source node, aicr version) ignored, so a recapture of an
unchanged cluster is no change.

The snapshot schema (aicr v0.11.1): ``kind: Snapshot``, ``measurements`` a list
of ``{type, subtypes: [{subtype, data: {key: scalar}}]}``. A collector that failed
leaves its reading out (aicr degrades silently), so a fact missing from either
side is not compared: an unread reading is not a change.

Node labels come from the ``NodeTopology/label`` readings (cluster-wide, every
node's labels): one per label key, ``<value>|<node>,<node>...``; a key whose
nodes carry different values is split into ``<key>.<value>`` keys. Each becomes
a fact ``node label <key>`` (``<value> on <nodes>``, or ``on <n> nodes`` past
``NODE_NAMES`` nodes), compared only when both snapshots read labels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

__all__ = ["FACTS", "LABEL_FACT", "SnapshotFormatError", "changes", "describe", "facts", "facts_of", "taken_at"]

#: fact -> the readings it comes from, first found wins: (type, subtype, key).
FACTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "Kubernetes version": (("K8s", "server", "version"),),
    "GPU model": (("GPU", "smi", "gpu.model"),),
    "GPU count": (("GPU", "smi", "gpu-count"),),
    "GPU driver": (("GPU", "smi", "driver"),),
    "CUDA version": (("GPU", "smi", "cuda-version"),),
    "kernel": (("K8s", "node", "kernel-version"), ("OS", "sysctl", "/proc/sys/kernel/osrelease")),
    "OS": (("OS", "release", "PRETTY_NAME"), ("K8s", "node", "os-image")),
    "kubelet version": (("K8s", "node", "kubelet-version"),),
    "node count": (("NodeTopology", "summary", "node-count"),),
}


#: The prefix of a node label's fact.
LABEL_FACT = "node label "
#: Node names listed in a label's fact; past this, the count.
NODE_NAMES = 3
#: Label changes listed; past this, how many more.
LABEL_CHANGES = 10
_MORE = re.compile(r"^\(\+(\d+) more\)$")


class SnapshotFormatError(ValueError):
    """The document is not an aicr snapshot."""


def _document(text: str) -> Mapping[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SnapshotFormatError(f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, Mapping) or doc.get("kind") != "Snapshot":
        raise SnapshotFormatError("not an aicr snapshot (no 'kind: Snapshot')")
    if not isinstance(doc.get("measurements"), list):
        raise SnapshotFormatError("an aicr snapshot without a 'measurements' list")
    return doc


def _readings(doc: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    found: dict[tuple[str, str, str], str] = {}
    for measurement in doc["measurements"]:
        if not isinstance(measurement, Mapping):
            continue
        for sub in measurement.get("subtypes") or []:
            data = sub.get("data") if isinstance(sub, Mapping) else None
            if not isinstance(data, Mapping):
                continue
            for key, value in data.items():
                if value is not None and not isinstance(value, Mapping | list):
                    found[(str(measurement.get("type")), str(sub.get("subtype")), str(key))] = str(value)
    return found


def facts(text: str) -> dict[str, str]:
    """The compared facts of one snapshot document (absent when not read)."""
    readings = _readings(_document(text))
    out: dict[str, str] = {}
    for name, sources in FACTS.items():
        value = next((readings[s] for s in sources if readings.get(s, "") != ""), None)
        if value is not None:
            out[name] = value
    for (kind, subtype, key), reading in sorted(readings.items()):
        if (kind, subtype) == ("NodeTopology", "label"):
            out[LABEL_FACT + key] = _label(reading)
    return out


def _label(reading: str) -> str:
    """``<value>|<nodes>`` as ``<value> on <nodes>`` (or ``on <n> nodes``)."""
    value, _, listed = reading.partition("|")
    value = value or '""'
    nodes = [n for n in listed.split(",") if n]
    hidden = _MORE.match(nodes[-1]) if nodes else None
    count = len(nodes) - 1 + int(hidden.group(1)) if hidden else len(nodes)
    if hidden or count > NODE_NAMES:
        return f"{value} on {count} nodes"
    return f"{value} on {', '.join(nodes) or 'no node'}"


def facts_of(stored: str) -> dict[str, str]:
    """Facts as stored by the runner (``facts.json``: ``{"facts": {...}}``); {} when unreadable."""
    try:
        doc = json.loads(stored)
    except ValueError:
        return {}
    found = doc.get("facts") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def taken_at(text: str) -> str:
    """The snapshot's own timestamp (``metadata.timestamp``), "" when absent."""
    meta = _document(text).get("metadata")
    return str(meta.get("timestamp", "")) if isinstance(meta, Mapping) else ""


def changes(previous: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """``fact: old -> new`` for every fact both read and that differs, in ``FACTS``
    order, then the node labels (``absent`` on the side without the label) when
    both read labels, the first ``LABEL_CHANGES`` of them."""
    found = [
        f"{name}: {previous[name]} -> {current[name]}"
        for name in FACTS
        if name in previous and name in current and previous[name] != current[name]
    ]
    return found + _label_changes(previous, current)


def _label_changes(previous: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    before = {k: v for k, v in previous.items() if k.startswith(LABEL_FACT)}
    after = {k: v for k, v in current.items() if k.startswith(LABEL_FACT)}
    if not before or not after:
        return []
    changed = [
        f"{key}: {before.get(key, 'absent')} -> {after.get(key, 'absent')}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    ]
    if len(changed) > LABEL_CHANGES:
        return [*changed[:LABEL_CHANGES], f"and {len(changed) - LABEL_CHANGES} more node label changes"]
    return changed


def describe(found: Mapping[str, str]) -> str:
    """One line: ``Kubernetes v1.33.5, 8x NVIDIA H100 (driver 560.35.03), Ubuntu 24.04, 3 nodes``."""
    parts = []
    if "Kubernetes version" in found:
        parts.append(f"Kubernetes {found['Kubernetes version']}")
    count = found.get("GPU count", "")
    if count and count != "0":
        gpu = f"{count}x {found.get('GPU model', 'GPU')}"
        parts.append(f"{gpu} (driver {found['GPU driver']})" if "GPU driver" in found else gpu)
    elif count == "0":
        parts.append("no GPU on the agent's node")
    parts += [found[name] for name in ("OS",) if name in found]
    if "node count" in found:
        nodes = found["node count"]
        parts.append(f"{nodes} node" if nodes == "1" else f"{nodes} nodes")
    return ", ".join(parts) or "no readings"
