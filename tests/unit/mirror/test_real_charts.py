"""The image lists of the real component charts (the shared test data's
component-charts, rebuilt from each project's tag), rendered by the pinned helm
with the values of the real aicr v0.11.1's bundle of eks/h100/training/ubuntu:
pod templates, hook Jobs, the GPU Operator's ClusterPolicy operands and
kai-scheduler's Config services."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from aicr_runner.aicr.recipe import load_recipe
from aicr_runner.mirror.collect import component_images
from aicr_runner.mirror.images import OsRelease
from aicr_runner.mirror.items import Item
from aicr_runner.mirror.render import ChartRef, HelmRenderer
from tests.chart.helm import helm_binary
from tests.support.real_aicr import FolderMirror, RealAicr, RealAicrMissing, component_charts_dir

pytestmark = pytest.mark.helm

CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}


@pytest.fixture(scope="module")
def charts_dir() -> Path:
    """The shared test data's real charts: AICR_TEST_COMPONENT_CHARTS_DIR, else
    ``component-charts`` beside the aicr releases (AICR_TEST_RELEASES_DIR), as on CI."""
    try:
        return component_charts_dir()
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def bundle(real_aicr: RealAicr) -> Path:
    call, bundle_dir = real_aicr.bundle(CRITERIA)
    assert call.exit_code == 0, call.stderr[-2000:]
    return bundle_dir


def images_of(component: str, bundle: Path, charts_dir: Path) -> dict[str, Item]:
    summary = load_recipe(bundle.parent / "recipe.yaml")
    c = next(c for c in summary.components if c.name == component)
    ref = ChartRef(c.name, c.namespace, c.chart, c.version, c.source)
    rendered = HelmRenderer(str(helm_binary()), charts_dir).render(ref, [bundle / component / "values.yaml"], "1.32.4")
    return {item.reference: item for item in component_images(component, rendered, OsRelease("ubuntu", "24.04"))}


def test_gpu_operator_the_operator_its_hook_nfd_and_every_operand_of_its_cluster_policy(
    bundle: Path, charts_dir: Path
) -> None:
    images = images_of("gpu-operator", bundle, charts_dir)
    assert set(images) == {
        "nvcr.io/nvidia/gpu-operator:v25.10.1",
        "registry.k8s.io/nfd/node-feature-discovery:v0.18.2",
        # From the ClusterPolicy: no pod template names them.
        "nvcr.io/nvidia/cuda:13.0.1-base-ubi9",
        "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04",
        "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.9.1",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.18.1",
        "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-distroless",
        "nvcr.io/nvidia/cloud-native/dcgm:4.4.2-1-ubuntu22.04",
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.13.1",
        "nvcr.io/nvidia/cloud-native/gdrdrv:v2.5.1-ubuntu24.04",  # gdrcopy: the recipe's override enables it
    }
    operator = images["nvcr.io/nvidia/gpu-operator:v25.10.1"].needed_by
    assert "gpu-operator (ClusterPolicy spec.validator)" in operator
    assert any("Job/gpu-operator/gpu-operator-upgrade-crd" in n and "helm hook pre-upgrade" in n for n in operator)
    assert images["nvcr.io/nvidia/k8s-device-plugin:v0.18.1"].needed_by == (
        "gpu-operator (ClusterPolicy spec.devicePlugin)",
        "gpu-operator (ClusterPolicy spec.gfd)",
    )


def test_kai_scheduler_the_operator_its_hooks_and_the_nine_services_its_config_starts(
    bundle: Path, charts_dir: Path
) -> None:
    images = images_of("kai-scheduler", bundle, charts_dir)
    from_config = {ref for ref, item in images.items() if all("(Config spec." in n for n in item.needed_by)}
    assert {ref.rsplit("/", 1)[1] for ref in from_config} == {
        f"{name}:v0.13.0"
        for name in (
            "binder",
            "resourcereservation",
            "podgrouper",
            "podgroupcontroller",
            "queuecontroller",
            "admission",
            "nodescaleadjuster",
            "scalingpod",
            "scheduler",
        )
    }
    assert set(images) - from_config == {
        "ghcr.io/nvidia/kai-scheduler/operator:v0.13.0",
        "ghcr.io/nvidia/kai-scheduler/crd-upgrader:v0.13.0",
    }
    hooks = images["ghcr.io/nvidia/kai-scheduler/crd-upgrader:v0.13.0"].needed_by
    assert all("helm hook" in n for n in hooks), hooks


def test_cert_manager_lists_its_post_install_hook_job(bundle: Path, charts_dir: Path) -> None:
    images = images_of("cert-manager", bundle, charts_dir)
    assert set(images) == {
        f"quay.io/jetstack/cert-manager-{name}:v1.17.2"
        for name in ("controller", "cainjector", "webhook", "startupapicheck")
    }
    (hook,) = images["quay.io/jetstack/cert-manager-startupapicheck:v1.17.2"].needed_by
    assert hook.endswith("helm hook post-install)")


@pytest.mark.parametrize(
    ("component", "count"),
    [
        ("aws-ebs-csi-driver", 6),
        ("aws-efa", 1),
        ("k8s-ephemeral-storage-metrics", 1),
        ("kube-prometheus-stack", 9),  # 6 in pod templates; Prometheus, Alertmanager, config-reloader
        ("nvidia-dra-driver-gpu", 1),
        ("prometheus-adapter", 1),
    ],
)
def test_every_other_pinned_chart_names_its_images_fully_qualified(
    component: str, count: int, bundle: Path, charts_dir: Path
) -> None:
    images = images_of(component, bundle, charts_dir)
    assert len(images) == count, sorted(images)
    assert all(ref.split("/", 1)[0].count(".") or ":" in ref.split("/", 1)[0] for ref in images)


def test_a_chart_pulled_from_its_repository_is_listed_with_its_digest_and_size(
    charts_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CACHE", "CONFIG", "DATA"):
        monkeypatch.setenv(f"HELM_{name}_HOME", str(tmp_path / "helm" / name.lower()))
    archive = charts_dir / "cert-manager-v1.17.2.tgz"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / archive.name).symlink_to(archive)
    subprocess.run([str(helm_binary()), "repo", "index", str(repo)], check=True, capture_output=True)
    with FolderMirror(repo) as served:
        ref = ChartRef("cert-manager", "cert-manager", "cert-manager", "v1.17.2", served.base_url)
        pulled = HelmRenderer(str(helm_binary()))
        assert "cert-manager-webhook" in pulled.render(ref, [], None)
    digest = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    assert pulled.archive_facts(ref) == (digest, archive.stat().st_size)
    # A charts directory's copy says nothing of what the source serves.
    local = HelmRenderer(str(helm_binary()), charts_dir)
    local.render(ref, [], None)
    assert local.archive_facts(ref) is None
