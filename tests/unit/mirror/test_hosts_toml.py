"""containerd hosts.toml per upstream registry, for the mirror's layout."""

from __future__ import annotations

import tomllib
from pathlib import Path

from aicr_runner.mirror.copy import target_of
from aicr_runner.mirror.hosts_toml import write_hosts_toml
from aicr_runner.mirror.items import Item, Kind

ITEMS = [
    Item(Kind.IMAGE, "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04"),
    Item(Kind.IMAGE, "nvcr.io/nvidia/gpu-operator:v25.10.1"),
    Item(Kind.IMAGE, "docker.io/library/busybox:1.37"),
    Item(Kind.IMAGE, "127.0.0.1:5001/a/b:1"),
    Item(Kind.CHART, "c", chart_source="oci://ghcr.io/nvidia", chart_name="nvsentinel", version="v1"),
]


def test_one_file_per_upstream_registry_pointing_at_its_place_in_the_mirror(tmp_path: Path) -> None:
    written = write_hosts_toml(ITEMS, "oci://m.example:5000/air", tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "127.0.0.1:5001/hosts.toml",
        "docker.io/hosts.toml",
        "nvcr.io/hosts.toml",
    ]  # the chart is helm's, not containerd's
    nvcr = tomllib.loads((tmp_path / "nvcr.io" / "hosts.toml").read_text())
    assert nvcr == {
        "server": "https://nvcr.io",
        "host": {"https://m.example:5000/v2/air/nvcr.io": {"capabilities": ["pull", "resolve"], "override_path": True}},
    }
    docker = tomllib.loads((tmp_path / "docker.io" / "hosts.toml").read_text())
    assert docker["server"] == "https://registry-1.docker.io"
    local = tomllib.loads((tmp_path / "127.0.0.1:5001" / "hosts.toml").read_text())
    assert list(local["host"]) == ["https://m.example:5000/v2/air/127.0.0.1_5001"]


def test_the_api_root_plus_the_repository_is_where_the_copy_put_the_image(tmp_path: Path) -> None:
    """containerd with override_path joins the host's path and the repository: the copy's target."""
    write_hosts_toml(ITEMS[:1], "oci://m.example/air", tmp_path, plain_http=True)
    (url,) = tomllib.loads((tmp_path / "nvcr.io" / "hosts.toml").read_text())["host"]
    assert url == "http://m.example/v2/air/nvcr.io"
    pulled = url.removeprefix("http://").replace("/v2", "", 1) + "/nvidia/driver:580.105.08-ubuntu24.04"
    assert pulled == target_of(ITEMS[0], "oci://m.example/air")
