"""The runner's snapshot comparison: two documents in aicr v0.11.1's schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from aicr_runner.aicr import snapshot_diff


def snapshot(
    *,
    k8s: str = "v1.33.5-eks-3025e55",
    gpus: int = 8,
    model: str = "NVIDIA H100 80GB HBM3",
    driver: str = "560.35.03",
    kernel: str = "6.8.0-1015-aws",
    os: str = "Ubuntu 24.04.1 LTS",
    nodes: int = 3,
    timestamp: str = "2026-12-05T10:00:00Z",
    node: str = "gpu-node-1",
) -> str:
    doc: dict[str, Any] = {
        "kind": "Snapshot",
        "apiVersion": "aicr.nvidia.com/v1alpha1",
        "metadata": {"source-node": node, "timestamp": timestamp, "version": "0.11.1"},
        "measurements": [
            # Collectors run in parallel: any order.
            {"type": "GPU", "subtypes": [{"subtype": "smi", "data": {
                "gpu-count": gpus, "driver": driver, "cuda-version": "12.6", "gpu.model": model,
            }}]},
            {"type": "K8s", "subtypes": [
                {"subtype": "server", "data": {"version": k8s, "platform": "linux/amd64", "goVersion": "go1.24"}},
                {"subtype": "image", "data": {"gpu-operator": "v25.3.0"}},
                {"subtype": "node", "data": {"source-node": node, "kernel-version": kernel, "os-image": os,
                                             "kubelet-version": "v1.33.5"}},
            ]},
            {"type": "OS", "subtypes": [
                {"subtype": "release", "data": {"ID": "ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": os}},
                {"subtype": "sysctl", "data": {"/proc/sys/kernel/osrelease": kernel}},
            ]},
            {"type": "SystemD"},
            {"type": "NodeTopology", "subtypes": [
                {"subtype": "summary", "data": {"node-count": nodes, "taint-count": 1, "label-count": 40}},
            ]},
        ],
    }  # fmt: skip
    return yaml.safe_dump(doc)


def test_a_recapture_of_an_unchanged_cluster_is_no_change() -> None:
    before = snapshot_diff.facts(snapshot())
    after = snapshot_diff.facts(snapshot(timestamp="2026-12-06T10:00:00Z", node="gpu-node-2"))
    assert before == after
    assert snapshot_diff.changes(before, after) == []


def test_every_fact_an_operator_acts_on_is_reported_old_to_new() -> None:
    before = snapshot_diff.facts(snapshot())
    after = snapshot_diff.facts(
        snapshot(k8s="v1.34.1-eks-1", gpus=4, model="NVIDIA H200", driver="570.86.15", kernel="6.8.0-1020-aws",
                 os="Ubuntu 24.04.2 LTS", nodes=4)
    )  # fmt: skip
    assert snapshot_diff.changes(before, after) == [
        "Kubernetes version: v1.33.5-eks-3025e55 -> v1.34.1-eks-1",
        "GPU model: NVIDIA H100 80GB HBM3 -> NVIDIA H200",
        "GPU count: 8 -> 4",
        "GPU driver: 560.35.03 -> 570.86.15",
        "kernel: 6.8.0-1015-aws -> 6.8.0-1020-aws",
        "OS: Ubuntu 24.04.1 LTS -> Ubuntu 24.04.2 LTS",
        "node count: 3 -> 4",
    ]


def test_a_reading_a_collector_did_not_take_is_not_a_change() -> None:
    before = snapshot_diff.facts(snapshot())
    doc = yaml.safe_load(snapshot(driver="999"))
    doc["measurements"] = [m for m in doc["measurements"] if m["type"] != "GPU"]
    after = snapshot_diff.facts(yaml.safe_dump(doc))
    assert "GPU driver" not in after
    assert snapshot_diff.changes(before, after) == []


def test_the_kernel_falls_back_to_sysctl_without_the_node_reading() -> None:
    doc = yaml.safe_load(snapshot(kernel="6.1.0"))
    doc["measurements"] = [m for m in doc["measurements"] if m["type"] != "K8s"]
    assert snapshot_diff.facts(yaml.safe_dump(doc))["kernel"] == "6.1.0"


def test_describe_says_the_cluster_in_one_line() -> None:
    found = snapshot_diff.facts(snapshot())
    assert snapshot_diff.describe(found) == (
        "Kubernetes v1.33.5-eks-3025e55, 8x NVIDIA H100 80GB HBM3 (driver 560.35.03), Ubuntu 24.04.1 LTS, 3 nodes"
    )
    assert "no GPU" in snapshot_diff.describe(snapshot_diff.facts(snapshot(gpus=0)))
    assert snapshot_diff.describe({}) == "no readings"


def test_stored_facts_read_back_and_garbage_reads_as_none() -> None:
    found = snapshot_diff.facts(snapshot())
    assert snapshot_diff.facts_of(json.dumps({"facts": found})) == found
    assert snapshot_diff.facts_of("not json") == {}
    assert snapshot_diff.facts_of("[1]") == {}
    assert snapshot_diff.taken_at(snapshot()) == "2026-12-05T10:00:00Z"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not an aicr snapshot"),
        ("kind: Recipe\n", "not an aicr snapshot"),
        ("kind: Snapshot\n", "without a 'measurements' list"),
        ("kind: [\n", "not YAML"),
    ],
)
def test_a_document_that_is_not_a_snapshot_is_refused_by_name(text: str, reason: str) -> None:
    with pytest.raises(snapshot_diff.SnapshotFormatError, match=reason):
        snapshot_diff.facts(text)
