"""pull_pack against a real registry (distribution + htpasswd), packs pushed by the
Go oras CLI the way users push them."""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from aicr_runner.errors import ExitCode, PackAuthError, PackIntegrityError, PackNotFoundError
from aicr_runner.pack.pull import Placement, pull_pack
from aicr_runner.settings.config import PackSettings

from .conftest import LocalRegistry, docker_config

pytestmark = pytest.mark.registry

REGISTRY_YAML = "apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\ncomponents: []\n"


def make_pack(root: Path, *, registry_yaml: bool = True) -> Path:
    """registry.yaml plus a nested overlays/ tree; unique content per call, so
    tampering one test's blobs cannot touch another's (blobs are shared by digest)."""
    marker = uuid.uuid4().hex
    root.mkdir(parents=True)
    if registry_yaml:
        (root / "registry.yaml").write_text(f"# pack {marker}\n{REGISTRY_YAML}")
    (root / "overlays" / "gpu").mkdir(parents=True)
    (root / "overlays" / "acme.yaml").write_text(f"kind: RecipeMetadata\n# {marker}\n")
    (root / "overlays" / "gpu" / "h100.yaml").write_text(
        "kind: RecipeMetadata\nspec: {criteria: {accelerator: h100}}\n"
    )
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def settings(registry: LocalRegistry, ref: str, credentials: Path | None) -> PackSettings:
    return PackSettings(
        ref=f"{registry.host}/{ref}",
        plain_http=True,
        credentials_file=str(credentials) if credentials else "",
    )


def test_valid_credential_pulls_a_go_oras_pack(local_registry: LocalRegistry, tmp_path: Path) -> None:
    source = make_pack(tmp_path / "src")
    digest = local_registry.push("packs/acme:1.0", source, "registry.yaml", "overlays/")

    pulled = pull_pack(settings(local_registry, "packs/acme:1.0", local_registry.credentials), tmp_path / "pack")

    assert pulled.manifest_digest == digest
    assert tree(pulled.path) == tree(source)
    assert [(layer.title, layer.placement) for layer in pulled.layers] == [
        ("registry.yaml", Placement.FILE),
        ("overlays", Placement.DIRECTORY),
    ]


def test_pull_by_pinned_digest(local_registry: LocalRegistry, tmp_path: Path) -> None:
    source = make_pack(tmp_path / "src")
    digest = local_registry.push("packs/pinned:1.0", source, "registry.yaml", "overlays/")

    pulled = pull_pack(
        settings(local_registry, f"packs/pinned@{digest}", local_registry.credentials), tmp_path / "pack"
    )

    assert pulled.manifest_digest == digest
    assert tree(pulled.path) == tree(source)


def test_a_pushed_pack_tarball_unpacks_at_the_root(local_registry: LocalRegistry, tmp_path: Path) -> None:
    source = make_pack(tmp_path / "src")
    upload = tmp_path / "upload"
    upload.mkdir()
    with tarfile.open(upload / "acme-pack.tar.gz", "w:gz") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(source)), recursive=False)
    local_registry.push("packs/tarball:1.0", upload, "acme-pack.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip")

    pulled = pull_pack(settings(local_registry, "packs/tarball:1.0", local_registry.credentials), tmp_path / "pack")

    assert tree(pulled.path) == tree(source)


def test_wrong_credential_is_refused_quickly(local_registry: LocalRegistry, tmp_path: Path) -> None:
    local_registry.push("packs/acme:auth", make_pack(tmp_path / "src"), "registry.yaml", "overlays/")
    wrong = docker_config(tmp_path / "wrong.json", local_registry.host, local_registry.user, "not-the-password")

    started = time.monotonic()
    with pytest.raises(PackAuthError) as caught:
        pull_pack(settings(local_registry, "packs/acme:auth", wrong), tmp_path / "pack")
    elapsed = time.monotonic() - started

    assert caught.value.exit_code == ExitCode.PACK_AUTH_FAILED
    assert int(caught.value.exit_code) == 23  # the documented code operators match on
    assert f"registry {local_registry.host}" in str(caught.value)
    assert "was rejected" in str(caught.value)
    assert "not-the-password" not in str(caught.value)
    assert elapsed < 5  # oras-py's own retry would take minutes
    assert not (tmp_path / "pack").exists()


def test_missing_credential_never_falls_back_to_docker_config(
    local_registry: LocalRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_registry.push("packs/acme:anon", make_pack(tmp_path / "src"), "registry.yaml", "overlays/")
    # A valid credential where oras-py would look for one by default.
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    docker_config(home / ".docker" / "config.json", local_registry.host, local_registry.user, local_registry.password)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DOCKER_CONFIG", str(home / ".docker"))

    with pytest.raises(PackAuthError, match="no credential was given") as caught:
        pull_pack(settings(local_registry, "packs/acme:anon", None), tmp_path / "pack")

    assert local_registry.host in str(caught.value)


def test_credentials_file_without_this_registry_is_refused(local_registry: LocalRegistry, tmp_path: Path) -> None:
    other = docker_config(tmp_path / "other.json", "ghcr.io", local_registry.user, local_registry.password)
    with pytest.raises(PackAuthError, match=rf"registry {local_registry.host}: .*refusing to pull anonymously"):
        pull_pack(settings(local_registry, "packs/acme:1.0", other), tmp_path / "pack")


def test_missing_tag_is_not_found(local_registry: LocalRegistry, tmp_path: Path) -> None:
    with pytest.raises(PackNotFoundError) as caught:
        pull_pack(settings(local_registry, "packs/acme:no-such-tag", local_registry.credentials), tmp_path / "pack")

    assert caught.value.exit_code == ExitCode.PACK_UNAVAILABLE
    assert "MANIFEST_UNKNOWN" in str(caught.value) or "NAME_UNKNOWN" in str(caught.value)
    assert f"{local_registry.host}/packs/acme:no-such-tag" in str(caught.value)


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "longer"])
def test_tampered_blob_in_registry_storage_is_refused(
    local_registry: LocalRegistry, tmp_path: Path, same_size: bool
) -> None:
    source = make_pack(tmp_path / "src")
    local_registry.push("packs/tampered:1.0", source, "registry.yaml", "overlays/")
    original = (source / "registry.yaml").read_bytes()
    digest = "sha256:" + hashlib.sha256(original).hexdigest()
    tampered = original.replace(b"[]", b"{}") if same_size else original + b"extra: true\n"
    local_registry.blob_file(digest).write_bytes(tampered)

    with pytest.raises(PackIntegrityError) as caught:
        pull_pack(settings(local_registry, "packs/tampered:1.0", local_registry.credentials), tmp_path / "pack")

    assert caught.value.exit_code == ExitCode.PACK_VERIFICATION_FAILED
    assert digest in str(caught.value)
    assert local_registry.host in str(caught.value)
    if same_size:
        assert "sha256:" + hashlib.sha256(tampered).hexdigest() in str(caught.value)
    assert not (tmp_path / "pack").exists()


def test_tampered_manifest_fails_the_digest_pin(local_registry: LocalRegistry, tmp_path: Path) -> None:
    source = make_pack(tmp_path / "src")
    digest = local_registry.push("packs/manifest-pin:1.0", source, "registry.yaml", "overlays/")
    manifest_file = local_registry.blob_file(digest)
    manifest = json.loads(manifest_file.read_bytes())
    manifest["annotations"] = {"tampered": "yes"}
    manifest_file.write_bytes(json.dumps(manifest).encode())

    with pytest.raises(PackIntegrityError, match=f"does not match the pinned {digest}"):
        pull_pack(
            settings(local_registry, f"packs/manifest-pin@{digest}", local_registry.credentials),
            tmp_path / "pack",
        )


def test_pack_without_registry_yaml_is_refused(local_registry: LocalRegistry, tmp_path: Path) -> None:
    source = make_pack(tmp_path / "src", registry_yaml=False)
    local_registry.push("packs/no-registry:1.0", source, "overlays/")
    ref = f"{local_registry.host}/packs/no-registry:1.0"

    with pytest.raises(PackIntegrityError) as caught:
        pull_pack(settings(local_registry, "packs/no-registry:1.0", local_registry.credentials), tmp_path / "pack")

    assert str(caught.value).startswith(f"pack {ref} has no registry.yaml; aicr requires it even as a stub")
    assert caught.value.exit_code == ExitCode.PACK_VERIFICATION_FAILED
    assert not (tmp_path / "pack").exists()
