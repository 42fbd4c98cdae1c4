"""``mirror --to``'s copy against real registries: the pinned Go ``oras`` and helm,
Debian's ``docker-registry`` (distribution) as the upstream (plain HTTP, no login)
and the project's local registry (tests/integration/conftest.py: htpasswd) as the
target, a Helm chart repository served on loopback.

Upstream holds a multi-architecture index (two manifests), a real OCI chart
(kai-scheduler v0.13.0 from the shared component charts, pushed with helm), a data
pack artifact; the chart repository serves the real cert-manager v1.17.2. The
copy keeps every digest, sends nothing the second time, and each fault is one
named failure with its exit code.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aicr_runner.cli import main
from aicr_runner.errors import InterruptedRun
from aicr_runner.mirror.archive import read_archive, write_archive
from aicr_runner.mirror.copy import copy_all, source_of, target_of
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import OrasCopier, sha256_of
from tests.integration.conftest import DOCKER_REGISTRY, ORAS, LocalRegistry, _free_port, docker_config, ensure_tools
from tests.support.real_aicr import FolderMirror, RealAicrMissing, component_charts_dir

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "bin" / "helm"


@dataclass(frozen=True)
class Upstream:
    host: str
    charts: str
    home: Path


def _tool(*argv: str, home: Path, cwd: Path | None = None) -> str:
    env = {**os.environ, "HOME": str(home), "DOCKER_CONFIG": str(home / ".docker")}
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False, env=env, cwd=cwd)
    assert result.returncode == 0, f"{argv[:3]}: {result.stderr}"
    return result.stdout


def _serve_registry(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    host = f"127.0.0.1:{port}"
    (base / "storage").mkdir(parents=True)
    config = base / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {base / 'storage'}\n"
        f"http:\n  addr: {host}\n  secret: {secrets.token_hex(16)}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    process = subprocess.Popen(
        [str(DOCKER_REGISTRY), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{host}/v2/", timeout=1):
                return process, host
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"docker-registry did not answer on {host}")


def _fill(up: str, home: Path, work: Path) -> None:
    """A two-platform index, a real OCI chart and a pack artifact, pushed the way users push them."""
    for arch in ("amd64", "arm64"):
        (work / f"{arch}.txt").write_text(f"driver for {arch}\n")
        _tool(str(ORAS), "push", "--plain-http", f"{up}/nvidia/driver:{arch}", f"{arch}.txt", home=home, cwd=work)
    _tool(
        str(ORAS), "manifest", "index", "create", "--plain-http", f"{up}/nvidia/driver:580", "amd64", "arm64", home=home
    )
    (work / "registry.yaml").write_text("apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\n")
    _tool(str(ORAS), "push", "--plain-http", f"{up}/packs/site:1", "registry.yaml", home=home, cwd=work)
    kai = component_charts_dir() / "kai-scheduler-v0.13.0.tgz"
    _tool(str(HELM), "push", str(kai), f"oci://{up}/nvidia", "--plain-http", home=home)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    ensure_tools()
    try:
        charts = component_charts_dir()
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    base = tmp_path_factory.mktemp("upstream")
    home = base / "home"
    home.mkdir()
    process, host = _serve_registry(base / "registry")
    try:  # from here on, whatever fails stops the registry
        repo = base / "chart-repo"
        repo.mkdir()
        (repo / "cert-manager-v1.17.2.tgz").symlink_to(charts / "cert-manager-v1.17.2.tgz")
        _tool(str(HELM), "repo", "index", str(repo), home=home)
        _fill(host, home, base)
        with FolderMirror(repo) as served:
            yield Upstream(host, served.base_url, home)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _items(up: Upstream) -> list[Item]:
    return [
        Item(Kind.IMAGE, f"{up.host}/nvidia/driver:580", ("gpu-operator (ClusterPolicy spec.driver)",)),
        Item(Kind.ARTIFACT, f"{up.host}/packs/site:1", ("pack",)),
        Item(Kind.CHART, "kai", chart_source=f"oci://{up.host}/nvidia", chart_name="kai-scheduler", version="v0.13.0"),
        Item(Kind.CHART, "cm", chart_source=up.charts, chart_name="cert-manager", version="v1.17.2"),
    ]


def _copier(up: Upstream, target: LocalRegistry, config: Path | None = None) -> OrasCopier:
    return OrasCopier(
        str(ORAS),
        str(HELM),
        registry_config=config or target.credentials,
        plain_http=frozenset({up.host, target.host}),
        timeout_seconds=120,
    )


def _prefix(target: LocalRegistry) -> str:
    return f"oci://{target.host}/air{secrets.token_hex(4)}"


def test_everything_lands_with_its_digest_and_a_second_run_sends_nothing(
    upstream: Upstream, local_registry: LocalRegistry
) -> None:
    copier = _copier(upstream, local_registry)
    items, prefix = _items(upstream), _prefix(local_registry)
    first = copy_all(items, prefix, copier)
    assert (first.sent, len(first.copied)) == (4, 4)
    index = first.copied[0]
    assert index.target == f"{prefix.removeprefix('oci://')}/127.0.0.1_{upstream.host.split(':')[1]}/nvidia/driver:580"
    # The index keeps its digest, and both platform manifests are in the target.
    assert index.digest == copier.digest(items[0].reference, source_side=True)
    manifest = json.loads(
        _tool(str(ORAS), "manifest", "fetch", "--plain-http", "--registry-config", str(local_registry.credentials),
              index.target, home=upstream.home)
    )  # fmt: skip
    assert len(manifest["manifests"]) == 2
    repo = index.target.rsplit(":", 1)[0]
    for entry in manifest["manifests"]:
        assert copier.digest(f"{repo}@{entry['digest']}", source_side=False) == entry["digest"]
    # The repository chart is an OCI chart whose archive is the repository's, byte for byte.
    cert_manager = component_charts_dir() / "cert-manager-v1.17.2.tgz"
    expected = "sha256:" + hashlib.sha256(cert_manager.read_bytes()).hexdigest()
    assert first.copied[3].digest == expected
    assert copier.chart_digest(target_of(items[3], prefix)) == expected
    again = copy_all(items, prefix, copier)
    assert again.sent == 0
    assert [c.digest for c in again.copied] == [c.digest for c in first.copied]


def test_an_unreachable_upstream_is_named(local_registry: LocalRegistry, upstream: Upstream) -> None:
    gone = f"127.0.0.1:{_free_port()}"
    item = Item(Kind.IMAGE, f"{gone}/nvidia/driver:580")
    copier = OrasCopier(str(ORAS), str(HELM), plain_http=frozenset({gone}), timeout_seconds=60)
    with pytest.raises(CopyError) as caught:
        copy_all([item], _prefix(local_registry), copier)
    assert caught.value.exit_code == MirrorExit.SOURCE_UNAVAILABLE
    assert caught.value.message.startswith(f"source unreachable: {gone}/nvidia/driver:580: ")


def test_a_chart_version_the_repository_lacks_is_named(upstream: Upstream, local_registry: LocalRegistry) -> None:
    item = Item(Kind.CHART, "cm", chart_source=upstream.charts, chart_name="cert-manager", version="v9.9.9")
    with pytest.raises(CopyError) as caught:
        copy_all([item], _prefix(local_registry), _copier(upstream, local_registry))
    assert caught.value.exit_code == MirrorExit.NOT_FOUND
    assert caught.value.reference == f"chart cert-manager v9.9.9 from {upstream.charts}"


def test_an_image_tag_the_upstream_lacks_is_named(upstream: Upstream, local_registry: LocalRegistry) -> None:
    item = Item(Kind.IMAGE, f"{upstream.host}/nvidia/driver:999")
    with pytest.raises(CopyError) as caught:
        copy_all([item], _prefix(local_registry), _copier(upstream, local_registry))
    assert (caught.value.exit_code, caught.value.reference) == (MirrorExit.NOT_FOUND, item.reference)


def test_refused_credentials_are_named_and_never_printed(
    upstream: Upstream, local_registry: LocalRegistry, tmp_path: Path
) -> None:
    wrong = docker_config(tmp_path / "config.json", local_registry.host, local_registry.user, "not-the-password")
    with pytest.raises(CopyError) as caught:
        copy_all(_items(upstream)[:1], _prefix(local_registry), _copier(upstream, local_registry, wrong))
    assert caught.value.exit_code == MirrorExit.AUTH_REFUSED
    assert "not-the-password" not in caught.value.message
    assert local_registry.password not in caught.value.message


def test_an_interrupted_copy_resumes_sending_only_what_is_missing(
    upstream: Upstream, local_registry: LocalRegistry
) -> None:
    items, prefix = _items(upstream), _prefix(local_registry)
    landed: list[str] = []
    # The signal arrives once the first item is in the target: the next tool call stops.
    stopping = OrasCopier(
        str(ORAS),
        str(HELM),
        registry_config=local_registry.credentials,
        plain_http=frozenset({upstream.host, local_registry.host}),
        timeout_seconds=120,
        interrupted=lambda: bool(landed),
    )
    with pytest.raises(InterruptedRun):
        copy_all(items, prefix, stopping, progress=landed.append, workers=1)  # one at a time: a known cut
    assert len(landed) == 1
    resumed = copy_all(items, prefix, _copier(upstream, local_registry))
    assert [c.sent for c in resumed.copied] == [False, True, True, True]


def _archive_of_a_stopped_upstream(tmp_path: Path) -> tuple[Upstream, list[Item], list[str | None]]:
    """--to-archive on the outside (``tmp_path / "air.tar"``), then the upstream stopped:
    the upstream, its items and the digests it served for the first three."""
    home = tmp_path / "home"
    home.mkdir()
    process, up_host = _serve_registry(tmp_path / "upstream")
    try:  # from here on, whatever fails stops the upstream (a missing test-data folder too)
        repo = tmp_path / "chart-repo"
        repo.mkdir()
        (repo / "cert-manager-v1.17.2.tgz").symlink_to(component_charts_dir() / "cert-manager-v1.17.2.tgz")
        _tool(str(HELM), "repo", "index", str(repo), home=home)
        _fill(up_host, home, tmp_path)
        with FolderMirror(repo) as served:
            up = Upstream(up_host, served.base_url, home)
            items = _items(up)
            outside = OrasCopier(str(ORAS), str(HELM), plain_http=frozenset({up_host}), timeout_seconds=120)
            upstream_digests = [outside.digest(source_of(i), source_side=True) for i in items[:3]]
            assert write_archive(items, tmp_path / "air.tar", outside) == 4
    finally:
        process.terminate()
        process.wait(timeout=10)
    return up, items, upstream_digests


def _assert_landed(
    up: Upstream, items: list[Item], digests: list[str | None], target: LocalRegistry, prefix: str
) -> None:
    inside = _copier(up, target)
    assert [inside.digest(target_of(i, prefix), source_side=False) for i in items[:3]] == digests
    cert_manager = component_charts_dir() / "cert-manager-v1.17.2.tgz"
    assert inside.chart_digest(target_of(items[3], prefix)) == sha256_of(cert_manager)


def test_an_archive_carries_everything_across_and_the_inside_needs_no_upstream(
    tmp_path: Path, local_registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """--to-archive on the outside; upstream stopped; --from-archive --to on the inside (the CLI, no plan)."""
    up, items, upstream_digests = _archive_of_a_stopped_upstream(tmp_path)
    up_host, home = up.host, up.home
    assert not (tmp_path / "air.tar.partial").exists()
    prefix = _prefix(local_registry)
    env = {**os.environ, "HOME": str(home), "PATH": f"{ROOT / '.tools' / 'bin'}:{os.environ.get('PATH', '')}"}
    argv = ["mirror", "--from-archive", str(tmp_path / "air.tar"), "--to", prefix]
    argv += ["--registry-config", str(local_registry.credentials), "--plain-http", local_registry.host]
    argv += ["--hosts-toml", str(tmp_path / "certs.d")]
    assert main(argv, environ=env) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "4 items in " + prefix + " by digest (4 copied, 0 already there)" in out
    assert f"chart values to install with: mirror.registry: {prefix.removeprefix('oci://')}\n" in out
    # The nodes' side: the upstream registry of the image and the pack, pointing at the mirror.
    (hosts,) = (tmp_path / "certs.d").glob("*/hosts.toml")
    assert hosts.parent.name == up_host
    assert f'[host."http://{local_registry.host}/v2/{prefix.split("/", 3)[3]}/127.0.0.1_' in hosts.read_text()
    _assert_landed(up, items, upstream_digests, local_registry, prefix)


def test_the_images_own_mirror_loads_the_archive_inside(tmp_path: Path, local_registry: LocalRegistry) -> None:
    """The inside of the gap with nothing but the runner image (docker run): its
    ``mirror --from-archive`` copies with the image's own oras and helm."""
    from tests.support.podman import PODMAN, RUN_LIMITS, built_image

    up, items, upstream_digests = _archive_of_a_stopped_upstream(tmp_path)
    prefix = _prefix(local_registry)
    config = tmp_path / "config.json"  # readable by the image's user (65532), as a mounted Secret is
    config.write_bytes(local_registry.credentials.read_bytes())
    config.chmod(0o644)
    mounts = ["-v", f"{tmp_path / 'air.tar'}:/in/air.tar:ro", "-v", f"{config}:/in/config.json:ro"]
    argv = ["mirror", "--from-archive", "/in/air.tar", "--to", prefix, "--registry-config", "/in/config.json"]
    argv += ["--plain-http", local_registry.host]
    run = [*PODMAN, "run", "--rm", "--network", "host", "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/home/aicr"]
    proc = subprocess.run(
        [*run, *RUN_LIMITS, *mounts, built_image(), *argv], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"4 items in {prefix} by digest (4 copied, 0 already there)" in proc.stdout
    _assert_landed(up, items, upstream_digests, local_registry, prefix)


def test_a_tampered_archive_is_refused(tmp_path: Path, local_registry: LocalRegistry, upstream: Upstream) -> None:
    items = _items(upstream)
    archive = tmp_path / "air.tar"
    write_archive(items, archive, _copier(upstream, local_registry))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    (chart,) = unpacked.glob("charts/*/cert-manager-*.tgz")
    chart.write_bytes(chart.read_bytes() + b"\0")  # one byte more than the archive recorded
    with tarfile.open(archive, "w") as tar:
        for path in sorted(unpacked.iterdir()):
            tar.add(path, arcname=path.name)
    with pytest.raises(CopyError) as caught:
        read_archive(archive, tmp_path / "inside")  # refused before anything is copied
    assert caught.value.exit_code == MirrorExit.DIGEST_MISMATCH
    assert caught.value.message.startswith(
        f"digest mismatch: {chart.relative_to(unpacked).as_posix()}: not the recorded"
    )


def test_an_archive_leaves_out_only_what_the_user_allowed_missing(
    tmp_path: Path, upstream: Upstream, local_registry: LocalRegistry
) -> None:
    absent = Item(Kind.IMAGE, f"{upstream.host}/nvidia/nvidia-fs:2.26.6", ("gpu-operator (ClusterPolicy spec.gds)",))
    items = [*_items(upstream), absent]
    archive = tmp_path / "air.tar"
    with pytest.raises(CopyError) as caught:
        write_archive(items, archive, _copier(upstream, local_registry))
    assert (caught.value.exit_code, caught.value.reference) == (MirrorExit.NOT_FOUND, absent.reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no archive, no partial one, no work left
    said: list[str] = []
    count = write_archive(
        items,
        archive,
        _copier(upstream, local_registry),
        progress=said.append,
        allow_missing=frozenset({absent.reference}),
    )
    assert count == 4
    assert [line for line in said if line.startswith("not archived")] == [
        f"not archived {absent.reference}: allowed by --allow-missing: not found at its source: {absent.reference}: "
        "no such manifest"
    ]
    assert [i.reference for i in read_archive(archive, tmp_path / "inside").items] == [i.reference for i in items[:4]]


def test_a_reference_pinned_by_tag_and_digest_lands_by_its_digest(
    upstream: Upstream, local_registry: LocalRegistry
) -> None:
    """Charts pin images as ``name:tag@sha256:...`` (skyhook's operator): copied and checked by the digest."""
    copier = _copier(upstream, local_registry)
    digest = copier.digest(f"{upstream.host}/packs/site:1", source_side=True)
    pinned = Item(Kind.IMAGE, f"{upstream.host}/packs/site:1@{digest}")
    prefix = _prefix(local_registry)
    (done,) = copy_all([pinned], prefix, copier).copied
    assert (done.sent, done.digest) == (True, digest)
    assert done.target.endswith(f"/packs/site:1@{digest}")
    assert copy_all([pinned], prefix, copier).sent == 0


def test_a_target_holding_another_digest_under_the_tag_is_copied_again(
    upstream: Upstream, local_registry: LocalRegistry, tmp_path: Path
) -> None:
    """The digests read in process decide what oras copies: a tag in the target that names
    another manifest (a stale or tampered mirror) is copied over; the same one is left."""
    copier = _copier(upstream, local_registry)
    pack, prefix = _items(upstream)[1], _prefix(local_registry)
    first = copy_all([pack], prefix, copier)
    target = first.copied[0].target
    (tmp_path / "other.txt").write_text("not the pack\n")
    argv = [
        str(ORAS),
        "push",
        "--plain-http",
        "--registry-config",
        str(local_registry.credentials),
        target,
        "other.txt",
    ]
    _tool(*argv, home=upstream.home, cwd=tmp_path)
    assert copier.digest(target, source_side=False) not in (None, first.copied[0].digest)
    again = copy_all([pack], prefix, copier)
    assert (again.sent, again.copied[0].digest) == (1, first.copied[0].digest)
    assert copier.digest(target, source_side=False) == first.copied[0].digest
    assert copy_all([pack], prefix, copier).sent == 0
