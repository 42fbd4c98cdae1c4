"""The aicr release through the mirror's registry, one endpoint: the real aicr v0.11.1
release (``AICR_TEST_RELEASES_DIR``) served over HTTP as GitHub serves it, pushed by
the mirror's code (the pinned Go ``oras``) into the project's local registry
(distribution, htpasswd), then fetched by the fetch step's registry path with the
HTTP folder counting no request, and the binary run. A second push sends nothing;
a corrupted blob and a checksums file that lists another archive fail closed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from aicr_runner.aicr.release_oci import ARTIFACT_TYPE, fetch_aicr_from_registry
from aicr_runner.cli import main
from aicr_runner.errors import ChecksumError, DownloadError, ExitCode
from aicr_runner.mirror.archive import read_archive, write_archive
from aicr_runner.mirror.copy import copy_all
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import OrasCopier
from aicr_runner.mirror.release_artifact import with_release_artifact
from aicr_runner.settings.config import AicrSettings, Arch, PackSettings
from tests.integration.conftest import ORAS, LocalRegistry
from tests.support.real_aicr import ARCHIVE, CHECKSUMS, TAG, FolderMirror, release_dir

pytestmark = pytest.mark.registry

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "bin" / "helm"


def _aicr(base_url: str = "https://releases.invalid", release_ref: str = "") -> AicrSettings:
    return AicrSettings(version=TAG, arch=Arch.AMD64, release_base_url=base_url, release_ref=release_ref)


def _release_items(base_url: str) -> list[Item]:
    """What the mirror lists for aicr v0.11.1 on amd64 (``mirror.command._aicr_files``)."""
    return [
        Item(Kind.FILE, f"{base_url}/{TAG}/{ARCHIVE}", ("aicr-runner fetch step",)),
        Item(Kind.FILE, f"{base_url}/{TAG}/{CHECKSUMS}", ("aicr-runner fetch step",)),
    ]


def _mirror(registry: LocalRegistry, base_url: str, target: str, work: Path) -> tuple[int, str]:
    """``mirror --to``'s release part: how many items were sent, and the digest checked."""
    copier = OrasCopier(
        str(ORAS), str(HELM), registry_config=registry.credentials, plain_http=frozenset({registry.host})
    )
    items, sources = with_release_artifact(_release_items(base_url), _aicr(base_url), TAG, work, copier)
    copier.sources = sources
    report = copy_all(items, f"oci://{target}", copier)
    (copied,) = report.copied
    assert copied.target == f"{target}/nvidia/aicr/release:{TAG}"
    return report.sent, copied.digest


def _transport(registry: LocalRegistry) -> PackSettings:
    return PackSettings(plain_http=True, credentials_file=str(registry.credentials))


def test_the_release_goes_through_the_registry_only_and_runs(local_registry: LocalRegistry, tmp_path: Path) -> None:
    target = f"{local_registry.host}/site{time.monotonic_ns()}"
    with FolderMirror(release_dir().parent) as upstream:
        sent, digest = _mirror(local_registry, upstream.base_url, target, tmp_path / "push1")
        assert sent == 1
        assert sorted(upstream.requests) == sorted([f"/{TAG}/{ARCHIVE}", f"/{TAG}/{CHECKSUMS}"])
        # A second run (its own download, its own push into a fresh layout) sends nothing.
        assert _mirror(local_registry, upstream.base_url, target, tmp_path / "push2") == (0, digest)

        upstream.requests.clear()
        ref = f"{target}/nvidia/aicr/release:{TAG}"
        binary = fetch_aicr_from_registry(
            _aicr(upstream.base_url, release_ref=ref), _transport(local_registry), tmp_path / "aicr-release"
        )
        assert upstream.requests == []  # the HTTP folder is not contacted
    expected = hashlib.sha256((release_dir() / ARCHIVE).read_bytes()).hexdigest()
    assert binary.tarball_sha256 == expected
    assert binary.source_url == f"oci://{ref}#{ARCHIVE}"
    version = subprocess.run(
        [str(binary.path), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert TAG.removeprefix("v") in version

    # The same artifact pinned by its manifest digest.
    pinned = f"{target}/nvidia/aicr/release@{digest}"
    again = fetch_aicr_from_registry(_aicr(release_ref=pinned), _transport(local_registry), tmp_path / "pinned")
    assert again.tarball_sha256 == expected


_ORAS_PUSH = (str(ORAS), "push", "--plain-http", "--artifact-type", ARTIFACT_TYPE)


def _push_by_hand(registry: LocalRegistry, ref: str, folder: Path) -> None:
    result = subprocess.run(
        [*_ORAS_PUSH, "--registry-config", str(registry.credentials), ref, ARCHIVE, CHECKSUMS],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_checksums_file_listing_another_archive_fails_closed(local_registry: LocalRegistry, tmp_path: Path) -> None:
    folder = tmp_path / "release"
    folder.mkdir()
    shutil.copy(release_dir() / ARCHIVE, folder / ARCHIVE)
    (folder / CHECKSUMS).write_text(f"{'0' * 64}  {ARCHIVE}\n")
    ref = f"{local_registry.host}/wrongsums{time.monotonic_ns()}/nvidia/aicr/release:{TAG}"
    _push_by_hand(local_registry, ref, folder)
    with pytest.raises(ChecksumError, match="sha256 mismatch: expected 0000") as caught:
        fetch_aicr_from_registry(_aicr(release_ref=ref), _transport(local_registry), tmp_path / "aicr-release")
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not (tmp_path / "aicr-release" / "aicr").exists()


def test_a_corrupted_blob_in_the_registry_fails_closed(local_registry: LocalRegistry, tmp_path: Path) -> None:
    """The registry's stored archive changed under it (one byte, same size): the layer's digest catches it."""
    folder = tmp_path / "release"
    folder.mkdir()
    # An archive of its own (a trailing byte the gzip reader ignores), so no other test shares its blob.
    (folder / ARCHIVE).write_bytes((release_dir() / ARCHIVE).read_bytes() + b"\0")
    sha = hashlib.sha256((folder / ARCHIVE).read_bytes()).hexdigest()
    (folder / CHECKSUMS).write_text(f"{sha}  {ARCHIVE}\n")
    ref = f"{local_registry.host}/corrupt{time.monotonic_ns()}/nvidia/aicr/release:{TAG}"
    _push_by_hand(local_registry, ref, folder)
    stored = local_registry.blob_file(f"sha256:{sha}")
    data = bytearray(stored.read_bytes())
    data[1000] ^= 0xFF
    stored.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=f"{ARCHIVE} \\(sha256:{sha}\\): received") as caught:
        fetch_aicr_from_registry(_aicr(release_ref=ref), _transport(local_registry), tmp_path / "aicr-release")
    assert caught.value.exit_code == ExitCode.AICR_VERIFICATION_FAILED
    assert not list((tmp_path / "aicr-release").glob("*.tar.gz*"))


def test_a_plan_gets_aicr_from_the_registry_alone(
    local_registry: LocalRegistry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``aicr-runner plan`` with ``aicr.releaseRef`` and no other source: the release base
    URL stays GitHub's (unreachable here), so a plan that passes took aicr from the registry."""
    target = f"{local_registry.host}/plan{time.monotonic_ns()}"
    with FolderMirror(release_dir().parent) as upstream:
        _mirror(local_registry, upstream.base_url, target, tmp_path / "push")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBERNETES_"))}
    env |= {
        "HOME": str(tmp_path / "home"),
        "AICR_RUNNER_AICR__VERSION": TAG,
        "AICR_RUNNER_AICR__ARCH": "amd64",
        "AICR_RUNNER_AICR__PROVENANCE__MODE": "off",  # no NVIDIA attestation in this release
        "AICR_RUNNER_AICR__RELEASE_REF": f"{target}/nvidia/aicr/release:{TAG}",
        "AICR_RUNNER_PACK__PLAIN_HTTP": "true",
        "AICR_RUNNER_PACK__CREDENTIALS_FILE": str(local_registry.credentials),
    }
    argv = ["plan", "--output", str(tmp_path / "plan"), "--service", "eks", "--accelerator", "h100"]
    argv += ["--intent", "training", "--os", "ubuntu"]
    code = main(argv, environ=env)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert f"oci://{target}/nvidia/aicr/release:{TAG}#{ARCHIVE}" in out.err
    report = json.loads((tmp_path / "plan" / "aicr-run-status" / "report.json").read_text())
    assert report["aicrVersion"] == TAG
    assert (tmp_path / "plan" / "aicr-recipe" / "recipe.yaml").is_file()


def test_the_release_crosses_the_gap_in_the_archive(local_registry: LocalRegistry, tmp_path: Path) -> None:
    """``--to-archive`` outside, ``--from-archive --to`` inside: the release artifact is one
    of the archive's items, copied out of it by its digest, and the fetch step takes it."""
    with FolderMirror(release_dir().parent) as upstream:
        outside = OrasCopier(str(ORAS), str(HELM))
        items, sources = with_release_artifact(
            _release_items(upstream.base_url), _aicr(upstream.base_url), TAG, tmp_path / "push", outside
        )
        outside.sources = sources
        assert write_archive(items, tmp_path / "air.tar", outside) == 1
    contents = read_archive(tmp_path / "air.tar", tmp_path / "unpacked")
    (item,) = contents.items
    assert (item.kind, item.reference, item.digest) == (Kind.ARTIFACT, f"nvidia/aicr/release:{TAG}", items[0].digest)
    inside = OrasCopier(
        str(ORAS),
        str(HELM),
        registry_config=local_registry.credentials,
        plain_http=frozenset({local_registry.host}),
        sources=contents.sources,
    )
    target = f"{local_registry.host}/gap{time.monotonic_ns()}"
    report = copy_all(contents.items, f"oci://{target}", inside)
    assert (report.sent, report.copied[0].digest) == (1, item.digest)
    ref = f"{target}/nvidia/aicr/release:{TAG}"
    binary = fetch_aicr_from_registry(_aicr(release_ref=ref), _transport(local_registry), tmp_path / "aicr-release")
    assert binary.tarball_sha256 == hashlib.sha256((release_dir() / ARCHIVE).read_bytes()).hexdigest()


def test_a_release_the_registry_does_not_hold_is_named_as_the_release(
    local_registry: LocalRegistry, tmp_path: Path
) -> None:
    """The registry client names what it fetches: a missing release artifact is an
    aicr release download failure (exit 20) in the release's words, not the pack's."""
    ref = f"{local_registry.host}/absent{time.monotonic_ns()}/nvidia/aicr/release:{TAG}"
    with pytest.raises(DownloadError) as caught:
        fetch_aicr_from_registry(_aicr(release_ref=ref), _transport(local_registry), tmp_path / "aicr-release")
    assert caught.value.exit_code == ExitCode.DOWNLOAD_FAILED
    assert caught.value.message.startswith(f"aicr release {ref} (registry {local_registry.host})"), caught.value.message
    assert "pack" not in caught.value.message
