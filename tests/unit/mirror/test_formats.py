"""The list as a table, JSON, and the manifests Hauler and Zarf take."""

from __future__ import annotations

import json

import yaml

from aicr_runner.mirror.formats import render
from aicr_runner.mirror.items import Item, Kind, merge

ITEMS = merge(
    [
        Item(Kind.FILE, "https://r.example/v0.11.1/aicr_0.11.1_linux_amd64.tar.gz", ("fetch",), "sha256:ab", 1234),
        Item(Kind.IMAGE, "nvcr.io/nvidia/gpu-operator:v25.10.1", ("gpu-operator (Deployment)",)),
        Item(Kind.IMAGE, "nvcr.io/nvidia/gpu-operator:v25.10.1", ("gpu-operator (ClusterPolicy spec.validator)",)),
        Item(Kind.ARTIFACT, "reg.example/packs/site:1", ("pack",)),
        Item(
            Kind.CHART,
            "oci://ghcr.io/nvidia/kai-scheduler/kai-scheduler:v0.13.0",
            ("kai-scheduler (deploy.sh)",),
            chart_source="oci://ghcr.io/nvidia/kai-scheduler",
            chart_name="kai-scheduler",
            version="v0.13.0",
            extra={"namespace": "kai-scheduler", "release": "kai-scheduler"},
        ),
        Item(
            Kind.CHART,
            "https://aws.github.io/eks-charts aws-efa-k8s-device-plugin@v0.5.3",
            ("aws-efa (deploy.sh)",),
            chart_source="https://aws.github.io/eks-charts",
            chart_name="aws-efa-k8s-device-plugin",
            version="v0.5.3",
            extra={"namespace": "kube-system", "release": "aws-efa"},
        ),
    ]
)


def test_an_image_two_objects_need_is_listed_once_with_both() -> None:
    (image,) = [i for i in ITEMS if i.kind is Kind.IMAGE]
    assert image.needed_by == ("gpu-operator (Deployment)", "gpu-operator (ClusterPolicy spec.validator)")


def test_json_has_reference_digest_size_and_who_needs_it() -> None:
    doc = json.loads(render(ITEMS, "json"))
    first, image = doc["items"][0], doc["items"][1]
    assert (first["digest"], first["size"]) == ("sha256:ab", 1234)
    assert (image["digest"], image["size"]) == (None, None)
    assert len(image["neededBy"]) == 2
    chart = next(i for i in doc["items"] if i["kind"] == "chart")
    assert (chart["repository"], chart["chart"], chart["version"]) == (
        "oci://ghcr.io/nvidia/kai-scheduler",
        "kai-scheduler",
        "v0.13.0",
    )


def test_hauler_manifests_are_its_v1_files_images_and_charts() -> None:
    files, images, charts = yaml.safe_load_all(render(ITEMS, "hauler"))
    assert {d["apiVersion"] for d in (files, images, charts)} == {"content.hauler.cattle.io/v1"}
    assert files["spec"]["files"] == [{"path": "https://r.example/v0.11.1/aicr_0.11.1_linux_amd64.tar.gz"}]
    assert [i["name"] for i in images["spec"]["images"]] == [
        "nvcr.io/nvidia/gpu-operator:v25.10.1",
        "reg.example/packs/site:1",
    ]
    # Hauler's repoURL is the repository, never with the chart's name (OCI too).
    assert charts["spec"]["charts"][0] == {
        "name": "kai-scheduler",
        "repoURL": "oci://ghcr.io/nvidia/kai-scheduler",
        "version": "v0.13.0",
    }


def test_zarf_charts_carry_namespace_release_name_and_the_right_url_shape() -> None:
    package = yaml.safe_load(render(ITEMS, "zarf"))
    assert package["kind"] == "ZarfPackageConfig"
    (component,) = package["components"]
    assert component["required"] is True
    oci, http = component["charts"]
    assert oci == {
        "name": "kai-scheduler",
        "version": "v0.13.0",
        "namespace": "kai-scheduler",
        "url": "oci://ghcr.io/nvidia/kai-scheduler/kai-scheduler",
    }
    assert http == {
        "name": "aws-efa",
        "version": "v0.5.3",
        "namespace": "kube-system",
        "url": "https://aws.github.io/eks-charts",
        "repoName": "aws-efa-k8s-device-plugin",
    }
    assert component["files"][0]["target"] == "aicr/aicr_0.11.1_linux_amd64.tar.gz"


def test_the_table_counts_each_kind() -> None:
    table = render(ITEMS, "table")
    assert table.splitlines()[0].split()[:2] == ["KIND", "REFERENCE"]
    assert table.splitlines()[-1] == "5 items: 1 files, 1 images, 2 charts, 1 artifacts"


def test_the_json_list_reads_back_into_the_same_items() -> None:
    """``Item.from_json`` is ``as_json``'s inverse (the archive's manifest and the list a
    user saved both read back this way); ``extra`` only when the mapping carries it."""
    chart = Item(
        Kind.CHART,
        "https://helm.ngc.nvidia.com/nvidia gpu-operator@v25.10.1",
        ("gpu-operator",),
        "sha256:" + "a" * 64,
        1234,
        "https://helm.ngc.nvidia.com/nvidia",
        "gpu-operator",
        "v25.10.1",
        "a note",
    )
    image = Item(Kind.IMAGE, "nvcr.io/nvidia/gpu-operator:v25.10.1", ("gpu-operator (Deployment)", "validator"))
    listed = json.loads(render([chart, image], "json"))["items"]
    assert [Item.from_json(entry) for entry in listed] == [chart, image]
    with_extra = Item.from_json({**chart.as_json(), "extra": {"namespace": "gpu-operator"}})
    assert with_extra.extra == {"namespace": "gpu-operator"}
    assert Item.from_json(chart.as_json()).extra == {}
