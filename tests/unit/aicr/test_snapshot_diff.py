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
    labels: dict[str, str] | None = None,
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
    if labels is not None:
        # aicr v0.11.1's encoding: key -> "<value>|<node>,<node>" (every node's labels).
        doc["measurements"][-1]["subtypes"].append({"subtype": "label", "data": labels})
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
    assert snapshot_diff.describe(snapshot_diff.facts(snapshot(nodes=1))).endswith(", 1 node")


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


POOL = "nvidia.com/gpu.product"


def test_a_node_label_that_changed_value_is_reported_with_its_nodes() -> None:
    before = snapshot_diff.facts(snapshot(labels={POOL: "H100|gpu-node-1", "kubernetes.io/os": "linux|gpu-node-1"}))
    after = snapshot_diff.facts(snapshot(labels={POOL: "H200|gpu-node-1", "kubernetes.io/os": "linux|gpu-node-1"}))
    assert before[f"node label {POOL}"] == "H100 on gpu-node-1"
    assert snapshot_diff.changes(before, after) == [f"node label {POOL}: H100 on gpu-node-1 -> H200 on gpu-node-1"]


def test_a_node_label_added_or_removed_is_reported_against_absent() -> None:
    before = snapshot_diff.facts(snapshot(labels={"a.example/gone": "x|gpu-node-1", "kubernetes.io/os": "linux|n1"}))
    after = snapshot_diff.facts(snapshot(labels={"kubernetes.io/os": "linux|n1", "b.example/new": "|n1,n2"}))
    assert snapshot_diff.changes(before, after) == [
        "node label a.example/gone: x on gpu-node-1 -> absent",
        'node label b.example/new: absent -> "" on n1, n2',
    ]


def test_node_labels_on_many_nodes_are_counted_and_a_truncated_list_counts_what_it_withholds() -> None:
    found = snapshot_diff.facts(
        snapshot(labels={"kubernetes.io/os": "linux|n1,n2,n3,n4", "zone": "a|n1,n2,(+10 more)", "few": "b|n1,n2,n3"})
    )
    assert found["node label kubernetes.io/os"] == "linux on 4 nodes"
    assert found["node label zone"] == "a on 12 nodes"
    assert found["node label few"] == "b on n1, n2, n3"


def test_labels_read_by_only_one_snapshot_are_not_compared() -> None:
    """A snapshot without label readings (the collector failed, or facts stored
    before labels were compared) is no change in every label."""
    without = snapshot_diff.facts(snapshot())
    with_labels = snapshot_diff.facts(snapshot(labels={POOL: "H100|gpu-node-1"}))
    assert snapshot_diff.changes(without, with_labels) == []
    assert snapshot_diff.changes(with_labels, without) == []


def test_label_changes_past_the_limit_are_counted() -> None:
    count = snapshot_diff.LABEL_CHANGES + 3
    before = snapshot_diff.facts(snapshot(labels={f"l{i:02}": "a|n1" for i in range(count)}))
    after = snapshot_diff.facts(snapshot(labels={f"l{i:02}": "b|n1" for i in range(count)}))
    found = snapshot_diff.changes(before, after)
    assert found[0] == "node label l00: a on n1 -> b on n1"
    assert len(found) == snapshot_diff.LABEL_CHANGES + 1
    assert found[-1] == "and 3 more node label changes"


def test_label_changes_follow_the_other_facts() -> None:
    before = snapshot_diff.facts(snapshot(labels={POOL: "H100|gpu-node-1"}))
    after = snapshot_diff.facts(snapshot(driver="570.86.15", labels={POOL: "H200|gpu-node-1"}))
    assert snapshot_diff.changes(before, after) == [
        "GPU driver: 560.35.03 -> 570.86.15",
        f"node label {POOL}: H100 on gpu-node-1 -> H200 on gpu-node-1",
    ]
