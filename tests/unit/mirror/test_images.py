"""Image references from workloads and operator custom resources (small documents;
the real charts are rendered in test_real_charts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from aicr_runner.mirror.images import OsRelease, images_in_documents, normalize


@pytest.mark.parametrize(
    ("given", "pulled"),
    [
        ("busybox:1.37", "docker.io/library/busybox:1.37"),
        ("nvidia/cuda:12.9.0-base-ubuntu24.04", "docker.io/nvidia/cuda:12.9.0-base-ubuntu24.04"),
        ("nvcr.io/nvidia/driver:580", "nvcr.io/nvidia/driver:580"),
        ("localhost/x", "localhost/x:latest"),
        ("127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b:latest"),
        ("quay.io/a/b@sha256:" + "0" * 64, "quay.io/a/b@sha256:" + "0" * 64),
    ],
)
def test_references_are_what_the_runtime_pulls(given: str, pulled: str) -> None:
    assert normalize(given) == pulled


def _cronjob() -> dict[str, Any]:
    return {
        "kind": "CronJob",
        "metadata": {"name": "c", "namespace": "n", "annotations": {"helm.sh/hook": "pre-install"}},
        "spec": {
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "initContainers": [{"name": "i", "image": "init:1"}],
                            "containers": [{"name": "m", "image": "q.io/main:2"}],
                        }
                    }
                }
            }
        },
    }


def test_every_container_list_of_a_nested_pod_template_is_read_with_its_hook() -> None:
    found = images_in_documents([_cronjob(), {"kind": "ConfigMap", "data": {"image": "not:me"}}])
    assert [f.image for f in found] == ["docker.io/library/init:1", "q.io/main:2"]
    assert found[0].where == "CronJob/n/c initContainers[i], helm hook pre-install"


def _policy(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec}


def test_cluster_policy_operands_follow_the_operators_image_path_and_enablement() -> None:
    policy = _policy(
        operator={"initContainer": {"repository": "nvcr.io/nvidia", "image": "cuda", "version": "13.0.1-base-ubi9"}},
        validator={"repository": "nvcr.io/nvidia/cloud-native", "image": "gpu-operator-validator", "version": "v1"},
        driver={
            "enabled": True,
            "repository": "nvcr.io/nvidia",
            "image": "driver",
            "version": "580.105.08",
            "manager": {
                "repository": "nvcr.io/nvidia/cloud-native",
                "image": "k8s-driver-manager",
                "version": "v0.9.1",
            },
        },
        toolkit={"repository": "r", "image": "toolkit", "version": "sha256:" + "a" * 64},
        dcgm={"repository": "r", "image": "dcgm", "version": "4"},  # off unless enabled: true
        gds={"enabled": False, "repository": "r", "image": "nvidia-fs", "version": "2"},
        gdrcopy={"enabled": True, "repository": "r", "image": "gdrdrv", "version": "v2.5.1"},
        devicePlugin={"enabled": False, "repository": "r", "image": "dp", "version": "1"},
        gfd={"image": "verbatim.io/gfd:7"},
        vfioManager={"repository": "r", "image": "cuda", "version": "x"},  # sandbox only
    )
    found = {
        f.where.removeprefix("ClusterPolicy spec."): f.image
        for f in images_in_documents([policy], OsRelease("ubuntu", "24.04"))
    }
    assert found == {
        "operator.initContainer": "nvcr.io/nvidia/cuda:13.0.1-base-ubi9",
        "validator": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v1",
        "driver": "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04",
        "driver.manager": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.9.1",
        "toolkit": "docker.io/r/toolkit@sha256:" + "a" * 64,
        "gdrcopy": "docker.io/r/gdrdrv:v2.5.1-ubuntu24.04",
        "gfd": "verbatim.io/gfd:7",
    }


def test_sandbox_operands_count_only_with_sandbox_workloads() -> None:
    policy = _policy(
        sandboxWorkloads={"enabled": True}, vfioManager={"repository": "r", "image": "cuda", "version": "x"}
    )
    assert [f.image for f in images_in_documents([policy])] == ["docker.io/r/cuda:x"]


def test_an_unknown_node_os_leaves_the_driver_tag_with_a_note_not_a_guess() -> None:
    policy = _policy(driver={"repository": "r", "image": "driver", "version": "580"})
    (found,) = images_in_documents([policy], None)
    assert found.image == "docker.io/r/driver:580"
    assert "appends -<os><version>" in found.note


def test_kai_config_services_are_repository_name_tag() -> None:
    config = {
        "apiVersion": "kai.scheduler/v1",
        "kind": "Config",
        "spec": {
            "binder": {
                "service": {"image": {"name": "binder", "repository": "ghcr.io/nvidia/kai-scheduler", "tag": "v0.13.0"}}
            },
            "nodeScaleAdjuster": {
                "args": {"scalingPodImage": {"name": "scalingpod", "repository": "g/k", "tag": "v1"}}
            },
        },
    }
    assert [f.image for f in images_in_documents([config])] == [
        "ghcr.io/nvidia/kai-scheduler/binder:v0.13.0",
        "docker.io/g/k/scalingpod:v1",
    ]


def test_prometheus_operator_kinds_and_its_config_reloader_argument() -> None:
    operator = {
        "kind": "Deployment",
        "metadata": {"name": "op"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "op",
                            "image": "quay.io/prometheus-operator/prometheus-operator:v0.89.0",
                            "args": ["--prometheus-config-reloader=quay.io/p/reloader:v0.89.0", "--log-level=info"],
                        }
                    ]
                }
            }
        },
    }
    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "p", "namespace": "m"},
        "spec": {"image": "quay.io/prometheus/prometheus:v3.10.0"},
    }
    found = images_in_documents([operator, prometheus])
    assert [(f.image, f.where) for f in found] == [
        ("quay.io/prometheus-operator/prometheus-operator:v0.89.0", "Deployment/op containers[op]"),
        ("quay.io/p/reloader:v0.89.0", "Deployment/op containers[op] --prometheus-config-reloader"),
        ("quay.io/prometheus/prometheus:v3.10.0", "Prometheus/m/p spec.image"),
    ]
