"""pull_pack against a fake Registry (verification and placement), and RegistryClient
against a small in-process OCI registry on loopback (auth flows, retries, and the
credential sources it must ignore)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import logging
import re
import tarfile
import threading
import time
from collections.abc import Generator, Iterator, MutableMapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from aicr_runner.errors import (
    ConfigError,
    ExitCode,
    PackAuthError,
    PackError,
    PackIntegrityError,
    PackNotFoundError,
    RunnerError,
)
from aicr_runner.logs import redact
from aicr_runner.net.reference import InvalidReference, PackReference
from aicr_runner.pack import pull as pack
from aicr_runner.pack import registry as registry_module
from aicr_runner.pack.credentials import load_registry_credential
from aicr_runner.pack.oci import ANNOTATION_TITLE, MAX_PARALLEL_FETCHES, OCI_MANIFEST
from aicr_runner.pack.pull import PackLayer, Placement, pull_pack
from aicr_runner.pack.registry import RegistryClient
from aicr_runner.settings.config import PackSettings, load, shown
from tests.support import loopback

REF = "registry.example.test/acme/pack:1.0"
HOST = "registry.example.test"
FILE_TYPE = "application/vnd.oci.image.layer.v1.tar"
DIR_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REGISTRY_YAML = b"apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\ncomponents: []\n"
OVERLAY = b"apiVersion: aicr.run/v1beta1\nkind: RecipeMetadata\nmetadata: {name: acme}\n"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Layer:
    data: bytes
    descriptor: dict[str, Any]


def file_layer(title: str | None, data: bytes, media_type: str = FILE_TYPE) -> Layer:
    annotations = {"org.opencontainers.image.title": title} if title is not None else {}
    return Layer(
        data,
        {"mediaType": media_type, "digest": digest_of(data), "size": len(data), "annotations": annotations},
    )


def tar_gz(entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
                continue
            name, data = entry
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info


def dir_layer(title: str, entries: list[tarfile.TarInfo | tuple[str, bytes]], *, unpack: bool = True) -> Layer:
    """A directory layer shaped like the Go oras CLI's: tar+gzip, named after the directory."""
    data = tar_gz(entries)
    annotations = {"org.opencontainers.image.title": title}
    if unpack:
        annotations["io.deis.oras.content.unpack"] = "true"
    return Layer(
        data,
        {"mediaType": DIR_TYPE, "digest": digest_of(data), "size": len(data), "annotations": annotations},
    )


def overlays_layer() -> Layer:
    return dir_layer(
        "overlays",
        [
            tar_dir("overlays"),
            ("overlays/acme.yaml", OVERLAY),
            tar_dir("overlays/sub"),
            ("overlays/sub/more.yaml", b"x: 1\n"),
        ],
    )


def manifest_for(layers: list[Layer]) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.unknown.artifact.v1",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest_of(b"{}"), "size": 2},
        "layers": [layer.descriptor for layer in layers],
    }


@dataclass
class FakeRegistry:
    """Serves one manifest; ``served`` overrides what a blob download returns."""

    layers: list[Layer]
    manifest: dict[str, Any] = field(default_factory=dict)
    served: dict[str, bytes] = field(default_factory=dict)
    fetched: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.manifest = self.manifest or manifest_for(self.layers)

    @property
    def raw_manifest(self) -> bytes:
        return json.dumps(self.manifest).encode()

    def get_manifest(self, ref: str) -> tuple[dict[str, Any], str]:
        return self.manifest, digest_of(self.raw_manifest)

    aborted: threading.Event = field(default_factory=threading.Event)

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        self.fetched.append(digest)
        blobs = {layer.descriptor["digest"]: layer.data for layer in self.layers}
        yield self.served.get(digest, blobs[digest])

    def abort(self) -> None:
        self.aborted.set()


def pull(tmp_path: Path, registry: FakeRegistry, ref: str = REF) -> pack.PulledPack:
    return pull_pack(PackSettings(ref=ref), tmp_path / "work" / "pack", registry)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- pull_pack: the good path -------------------------------------------------------------


def test_go_oras_layout_pulls_into_place(tmp_path: Path) -> None:
    registry_yaml = file_layer("registry.yaml", REGISTRY_YAML)
    overlays = overlays_layer()
    registry = FakeRegistry([registry_yaml, overlays])

    pulled = pull(tmp_path, registry)

    dest = tmp_path / "work" / "pack"
    assert pulled.path == dest
    assert pulled.ref == REF
    assert pulled.manifest_digest == digest_of(registry.raw_manifest)
    assert pulled.layers == (
        PackLayer(registry_yaml.descriptor["digest"], len(REGISTRY_YAML), FILE_TYPE, "registry.yaml", Placement.FILE),
        PackLayer(overlays.descriptor["digest"], len(overlays.data), DIR_TYPE, "overlays", Placement.DIRECTORY),
    )
    assert tree(dest) == {
        "overlays/acme.yaml": OVERLAY,
        "overlays/sub/more.yaml": b"x: 1\n",
        "registry.yaml": REGISTRY_YAML,
    }
    # staging and blob copies are gone; only the pack is left
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["pack"]


def test_a_pack_tarball_layer_unpacks_at_the_pack_root(tmp_path: Path) -> None:
    tarball = dir_layer(
        "acme-pack.tar.gz",
        [("registry.yaml", REGISTRY_YAML), tar_dir("overlays"), ("overlays/acme.yaml", OVERLAY)],
        unpack=False,
    )

    pulled = pull(tmp_path, FakeRegistry([tarball]))

    assert tree(pulled.path) == {"overlays/acme.yaml": OVERLAY, "registry.yaml": REGISTRY_YAML}
    assert pulled.layers[0].placement is Placement.DIRECTORY


def test_titles_with_subdirectories_become_nested_files(tmp_path: Path) -> None:
    pulled = pull(
        tmp_path,
        FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), file_layer("./overlays/acme.yaml", OVERLAY)]),
    )
    assert tree(pulled.path) == {"overlays/acme.yaml": OVERLAY, "registry.yaml": REGISTRY_YAML}


def test_same_content_under_two_titles_is_fetched_once(tmp_path: Path) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), file_layer("copy.yaml", REGISTRY_YAML)])

    pulled = pull(tmp_path, registry)

    assert registry.fetched == [digest_of(REGISTRY_YAML)]
    assert tree(pulled.path) == {"copy.yaml": REGISTRY_YAML, "registry.yaml": REGISTRY_YAML}


def test_untitled_plain_layers_are_skipped_like_the_go_cli_does(tmp_path: Path) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), file_layer(None, b"orphan")])

    pulled = pull(tmp_path, registry)

    assert [layer.placement for layer in pulled.layers] == [Placement.FILE, Placement.SKIPPED]
    assert registry.fetched == [digest_of(REGISTRY_YAML)]
    assert tree(pulled.path) == {"registry.yaml": REGISTRY_YAML}


def test_an_existing_empty_destination_is_filled(tmp_path: Path) -> None:
    dest = tmp_path / "work" / "pack"
    dest.mkdir(parents=True)
    pulled = pull_pack(PackSettings(ref=REF), dest, FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML)]))
    assert tree(pulled.path) == {"registry.yaml": REGISTRY_YAML}


def test_a_non_empty_destination_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "work" / "pack"
    dest.mkdir(parents=True)
    (dest / "stale.yaml").write_text("old")
    with pytest.raises(RunnerError, match="not an empty directory"):
        pull_pack(PackSettings(ref=REF), dest, FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML)]))


# --- pull_pack: verification ------------------------------------------------------------------


def assert_nothing_published(tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert not work.exists() or list(work.iterdir()) == []


def test_tampered_blob_is_refused(tmp_path: Path) -> None:
    layer = file_layer("registry.yaml", REGISTRY_YAML)
    tampered = REGISTRY_YAML.replace(b"[]", b"{}")
    assert len(tampered) == len(REGISTRY_YAML)
    registry = FakeRegistry([layer], served={layer.descriptor["digest"]: tampered})

    with pytest.raises(PackIntegrityError) as caught:
        pull(tmp_path, registry)

    message = str(caught.value)
    assert REF in message
    assert HOST in message
    assert layer.descriptor["digest"] in message
    assert digest_of(tampered) in message
    assert caught.value.exit_code == ExitCode.PACK_VERIFICATION_FAILED
    assert_nothing_published(tmp_path)


@pytest.mark.parametrize("served", [REGISTRY_YAML[:-1], b""])
def test_a_short_blob_is_refused(tmp_path: Path, served: bytes) -> None:
    layer = file_layer("registry.yaml", REGISTRY_YAML)
    registry = FakeRegistry([layer], served={layer.descriptor["digest"]: served})

    with pytest.raises(PackIntegrityError, match=rf"is {len(served)} bytes, the manifest says {len(REGISTRY_YAML)}"):
        pull(tmp_path, registry)
    assert_nothing_published(tmp_path)


def test_a_blob_is_cut_off_one_byte_past_its_declared_size(tmp_path: Path) -> None:
    """A registry may stream on and on; reading stops at the first byte too many."""
    layer = file_layer("registry.yaml", REGISTRY_YAML)
    handed_out: list[int] = []

    class Endless(FakeRegistry):
        def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
            while True:  # stops only when the consumer closes it
                handed_out.append(size + 1)
                yield b"x" * (size + 1)

    with pytest.raises(PackIntegrityError) as caught:
        pull(tmp_path, Endless([layer]))

    assert handed_out == [len(REGISTRY_YAML) + 1], "one read, then the stream was closed"
    assert str(caught.value).endswith(
        f"layer 'registry.yaml' ({digest_of(REGISTRY_YAML)}) runs past the {len(REGISTRY_YAML)} bytes "
        f"the manifest declares; cut off at {len(REGISTRY_YAML) + 1} bytes"
    )
    assert_nothing_published(tmp_path)


def test_manifest_digest_pin_mismatch_is_refused_before_any_blob(tmp_path: Path) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML)])
    pin = digest_of(b"the manifest that was reviewed")

    with pytest.raises(PackIntegrityError) as caught:
        pull(tmp_path, registry, ref=f"{HOST}/acme/pack@{pin}")

    assert pin in str(caught.value)
    assert digest_of(registry.raw_manifest) in str(caught.value)
    assert registry.fetched == []


def test_manifest_digest_pin_match_pulls(tmp_path: Path) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML)])
    ref = f"{HOST}/acme/pack:1.0@{digest_of(registry.raw_manifest)}"

    assert pull(tmp_path, registry, ref=ref).manifest_digest == digest_of(registry.raw_manifest)


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([tar_dir("overlays"), _symlink("overlays/acme.yaml", "/etc/passwd")], "symlink"),
        ([tar_dir("overlays"), ("overlays/../../escape.yaml", b"x")], "'..'"),
        (
            [tar_dir("overlays"), ("registry.yaml", REGISTRY_YAML)],
            "outside the archive's directory 'overlays'",
        ),
    ],
)
def test_unsafe_directory_layers_are_refused(tmp_path: Path, entries: list[Any], why: str) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), dir_layer("overlays", entries)])

    with pytest.raises(PackIntegrityError, match=why) as caught:
        pull(tmp_path, registry)

    assert caught.value.exit_code == ExitCode.PACK_VERIFICATION_FAILED
    # Named by the layer's title (what the user pushed), not by the blob's file name.
    layer_digest = registry.layers[1].descriptor["digest"]
    assert str(caught.value).startswith(f"pack {REF} (registry {HOST}): layer 'overlays' ({layer_digest}): ")
    assert f"archive {layer_digest.removeprefix('sha256:')}" not in str(caught.value)
    assert not (tmp_path / "escape.yaml").exists()
    assert_nothing_published(tmp_path)


def test_a_directory_layer_that_is_not_an_archive_is_named_by_its_title(tmp_path: Path) -> None:
    garbage = Layer(b"not gzip", {**dir_layer("overlays", []).descriptor})
    garbage.descriptor.update(digest=digest_of(b"not gzip"), size=len(b"not gzip"))
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), garbage])

    with pytest.raises(PackIntegrityError) as caught:
        pull(tmp_path, registry)

    assert f"layer 'overlays' ({digest_of(b'not gzip')}) cannot be read as tar or tar.gz" in str(caught.value)


@pytest.mark.parametrize(
    "title",
    ["../evil.yaml", "overlays/../../evil.yaml", "/etc/cron.d/evil", "..", "a\\..\\evil.yaml", "."],
)
def test_hostile_titles_fail_before_download(tmp_path: Path, title: str) -> None:
    evil = file_layer(title, b"* * * * * root sh\n")
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), evil])

    with pytest.raises(PackIntegrityError, match="not a safe relative path"):
        pull(tmp_path, registry)

    assert evil.descriptor["digest"] not in registry.fetched
    assert not (tmp_path / "work" / "evil.yaml").exists()
    assert not (tmp_path / "evil.yaml").exists()


def test_two_layers_for_one_path_are_refused(tmp_path: Path) -> None:
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML), file_layer("registry.yaml", b"other\n")])
    with pytest.raises(PackIntegrityError, match=r"two layers both provide registry\.yaml"):
        pull(tmp_path, registry)


def test_a_file_layer_cannot_shadow_a_directory_layer(tmp_path: Path) -> None:
    registry = FakeRegistry(
        [
            file_layer("registry.yaml", REGISTRY_YAML),
            overlays_layer(),
            file_layer("overlays/acme.yaml", b"shadow\n"),
        ]
    )
    with pytest.raises(PackIntegrityError, match=r"two layers both provide overlays/acme\.yaml"):
        pull(tmp_path, registry)


def test_a_directory_layer_cannot_overwrite_a_file_layer(tmp_path: Path) -> None:
    registry = FakeRegistry(
        [
            file_layer("overlays/acme.yaml", b"first\n"),
            overlays_layer(),
            file_layer("registry.yaml", REGISTRY_YAML),
        ]
    )
    with pytest.raises(PackIntegrityError, match="would overwrite"):
        pull(tmp_path, registry)


def test_missing_registry_yaml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PackIntegrityError) as caught:
        pull(tmp_path, FakeRegistry([overlays_layer()]))

    assert str(caught.value).startswith(
        f"pack {REF} has no registry.yaml; aicr requires it even as a stub (registry {HOST})"
    )
    assert_nothing_published(tmp_path)


def test_missing_registry_yaml_hints_at_a_pack_pushed_as_one_directory(tmp_path: Path) -> None:
    whole = dir_layer("acme-pack", [tar_dir("acme-pack"), ("acme-pack/registry.yaml", REGISTRY_YAML)])
    with pytest.raises(PackIntegrityError, match=r"found acme-pack/registry\.yaml instead"):
        pull(tmp_path, FakeRegistry([whole]))


def test_registry_yaml_must_be_a_file(tmp_path: Path) -> None:
    as_dir = dir_layer("registry.yaml", [tar_dir("registry.yaml"), ("registry.yaml/x", b"x")])
    with pytest.raises(PackIntegrityError, match=r"has no registry\.yaml"):
        pull(tmp_path, FakeRegistry([as_dir]))


@pytest.mark.parametrize(
    ("manifest", "why"),
    [
        (
            {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []},
            "image index",
        ),
        ({"schemaVersion": 1, "layers": []}, "unsupported manifest"),
        ({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}, "lists no layers"),
        (
            {
                "schemaVersion": 2,
                "layers": [{"mediaType": FILE_TYPE, "digest": "sha512:" + "a" * 128, "size": 1}],
            },
            "is not sha256",
        ),
        (
            {"schemaVersion": 2, "layers": [{"mediaType": FILE_TYPE, "digest": digest_of(b""), "size": -1}]},
            "is not a byte count",
        ),
        (
            {
                "schemaVersion": 2,
                "layers": [{"mediaType": FILE_TYPE, "digest": digest_of(b""), "size": True}],
            },
            "is not a byte count",
        ),
        ({"schemaVersion": 2, "layers": ["sha256:abc"]}, "is not a descriptor"),
    ],
)
def test_malformed_manifests_are_refused(tmp_path: Path, manifest: dict[str, Any], why: str) -> None:
    registry = FakeRegistry([], manifest=manifest)
    with pytest.raises(PackIntegrityError, match=why):
        pull(tmp_path, registry)
    assert registry.fetched == []


def test_declared_sizes_are_bounded_before_downloading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pack, "MAX_PACK_BLOB_BYTES", 10)
    registry = FakeRegistry([file_layer("registry.yaml", REGISTRY_YAML)])
    with pytest.raises(PackIntegrityError, match="over the limit of 10"):
        pull(tmp_path, registry)
    assert registry.fetched == []


# --- references ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ghcr.io/acme/pack:1.0", PackReference("ghcr.io", "acme/pack", "1.0", None)),
        ("127.0.0.1:5000/pack", PackReference("127.0.0.1:5000", "pack", None, None)),
        ("localhost:5000/a/b/c:v2", PackReference("localhost:5000", "a/b/c", "v2", None)),
        ("127.0.0.1:65535/pack", PackReference("127.0.0.1:65535", "pack", None, None)),
        ("[::1]:5000/pack", PackReference("[::1]:5000", "pack", None, None)),
        (
            f"ghcr.io/acme/pack@{digest_of(b'm')}",
            PackReference("ghcr.io", "acme/pack", None, digest_of(b"m")),
        ),
        (
            f"ghcr.io/acme/pack:1.0@{digest_of(b'm')}",
            PackReference("ghcr.io", "acme/pack", "1.0", digest_of(b"m")),
        ),
    ],
)
def test_reference_parsing(ref: str, expected: PackReference) -> None:
    assert PackReference.parse(ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "ghcr.io/Acme/pack:1",
        "ghcr.io/acme/pack@sha256:abc",
        "ghcr.io/acme/pack:-x",
        "ghcr.io/acme//pack",
        "ghcr.io/",
        "user@host/pack",
        "127.0.0.1:99999/acme/pack:1.0",
        "127.0.0.1:0/acme/pack:1.0",
        f"ghcr.io/acme/pack@{digest_of(b'm')}\n",
        "ghcr.io/acme/pack:1.0\n",
    ],
)
def test_bad_references_are_refused_when_settings_load(ref: str) -> None:
    with pytest.raises(InvalidReference):
        PackReference.parse(ref)
    # Refused before anything is downloaded, as one line naming the variable.
    with pytest.raises(ConfigError) as caught:
        load({"AICR_RUNNER_PACK__REF": ref})
    assert len(caught.value.problems) == 1
    # The value as messages show it: quoted, escaped, a user or password masked.
    assert caught.value.problems[0].startswith(f"AICR_RUNNER_PACK__REF={shown(ref)}")


# --- credentials file -----------------------------------------------------------------------


def write_config(path: Path, auths: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"auths": auths}))
    return path


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_credential_lookup_matches_hosts_like_docker_does(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config.json",
        {
            "https://index.docker.io/v1/": {"auth": b64("hub:hubpass")},
            "localhost:5000": {"auth": b64("local:localpass")},
            "ghcr.io": {"username": "gh", "password": "ghpass-0123"},
        },
    )
    assert load_registry_credential(config, "docker.io") == b64("hub:hubpass")
    assert load_registry_credential(config, "127.0.0.1:5000") == b64("local:localpass")
    assert load_registry_credential(config, "GHCR.io") == b64("gh:ghpass-0123")
    # every form of the secret is registered for redaction
    for secret in ("ghpass-0123", b64("gh:ghpass-0123"), "localpass"):
        assert redact(f"<{secret}>") == "<***>", secret


def test_no_entry_for_the_host_is_an_auth_error_not_an_anonymous_pull(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", {"ghcr.io": {"auth": b64("a:b")}})
    with pytest.raises(PackAuthError) as caught:
        load_registry_credential(config, "registry.example.test")
    message = str(caught.value)
    assert "registry.example.test" in message
    assert "ghcr.io" in message
    assert "refusing to pull anonymously" in message
    assert caught.value.exit_code == ExitCode.PACK_AUTH_FAILED


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read"),
        ("{not json", "not valid JSON"),
        ('{"credsStore": "desktop"}', "no 'auths' object"),
        ('{"auths": {"registry.example.test": {"auth": "%%%"}}}', "not base64"),
        ('{"auths": {"registry.example.test": {"auth": "' + b64("nocolon") + '"}}}', "user:password"),
        (
            '{"auths": {"registry.example.test": {}}, "credHelpers": {"registry.example.test": "ecr"}}',
            "credential helpers are not supported",
        ),
        ('{"auths": {"registry.example.test": {"identitytoken": "tok"}}}', "identity tokens"),
    ],
)
def test_unusable_credentials_files_are_auth_errors(tmp_path: Path, content: str | None, why: str) -> None:
    config = tmp_path / "config.json"
    if content is not None:
        config.write_text(content)
    with pytest.raises(PackAuthError, match=why) as caught:
        load_registry_credential(config, HOST)
    assert HOST in str(caught.value)


def test_the_registry_client_checks_the_credentials_file_up_front(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", {"ghcr.io": {"auth": b64("a:b")}})
    with pytest.raises(PackAuthError, match=HOST):
        RegistryClient(PackSettings(ref=REF, credentials_file=str(config)))


# --- RegistryClient against an in-process registry ---------------------------------------------------


@dataclass
class Served:
    """A tiny OCI distribution server: Basic or Bearer auth, scripted failures."""

    user: str = "alice"
    password: str = "correct-horse-battery"
    auth: str = "basic"  # basic | bearer | none
    manifests: dict[str, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    fail_with: list[int] = field(default_factory=list)
    #: The Retry-After header those failures carry ("" for none).
    retry_after: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)
    token: str = "token-for-alice"
    port: int = 0
    #: Statuses the next blob requests get instead of the blob.
    blob_fail_with: list[int] = field(default_factory=list)
    #: Where blob requests are redirected (``<this>/<digest>``, served under ``/storage/``); "" serves them.
    blob_redirect: str = ""
    #: Hand out a new token once the manifest was served: the blobs' first requests carry a stale
    #: one, which is answered 403 (a token without the scope asked for).
    rotate_token: bool = False
    stale_token: str = ""
    #: TCP connections accepted so far.
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, repository: str, tag: str, layers: list[Layer]) -> str:
        for layer in layers:
            self.blobs[layer.descriptor["digest"]] = layer.data
        raw = json.dumps(manifest_for(layers)).encode()
        self.manifests[f"{repository}:{tag}"] = raw
        self.manifests[f"{repository}:{digest_of(raw)}"] = raw
        return digest_of(raw)


class _RegistryHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: Served

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.state.lock:
            self.state.connections += 1

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps({"errors": [{"code": code, "message": code.lower()}]}).encode(), headers)

    def _authorised(self) -> bool:
        state = self.state
        header = self.headers.get("Authorization", "")
        if state.auth == "none":
            return True
        if state.auth == "basic":
            if header == f"Basic {b64(f'{state.user}:{state.password}')}":
                return True
            self._error(401, "UNAUTHORIZED", {"WWW-Authenticate": 'Basic realm="test"'})
            return False
        if header == f"Bearer {state.token}":
            return True
        realm = f"http://127.0.0.1:{state.port}/token"
        self._error(
            403 if state.stale_token and header == f"Bearer {state.stale_token}" else 401,
            "UNAUTHORIZED",
            {"WWW-Authenticate": f'Bearer realm="{realm}",service="test",scope="repository:acme/pack:pull"'},
        )
        return False

    def do_GET(self) -> None:
        state = self.state
        state.requests.append((self.path, self.headers.get("Authorization", "")))
        if self.path.startswith("/token"):
            good = self.headers.get("Authorization") == f"Basic {b64(f'{state.user}:{state.password}')}"
            # an anonymous token is handed out, but it opens nothing
            token = state.token if good else "anonymous"
            if self.headers.get("Authorization") and not good:
                self._error(401, "UNAUTHORIZED")
                return
            self._send(200, json.dumps({"token": token}).encode(), {"Content-Type": "application/json"})
            return
        if state.fail_with:
            self._send(
                state.fail_with.pop(0), b"busy", {"Retry-After": state.retry_after} if state.retry_after else None
            )
            return
        if not self._authorised():
            return
        storage = re.fullmatch(r"/storage/(.+)", self.path)
        match = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/(.+)", self.path)
        if storage:
            self._blob(storage.group(1))
        elif not match:
            self._error(404, "NAME_UNKNOWN")
        elif match.group(2) == "manifests":
            self._manifest(f"{match.group(1)}:{match.group(3)}")
        elif state.blob_fail_with:
            self._send(state.blob_fail_with.pop(0), b"busy")
        elif state.blob_redirect:
            self._send(307, b"<a>see there</a>", {"Location": f"{state.blob_redirect}/{match.group(3)}"})
        else:
            self._blob(match.group(3))

    def _manifest(self, key: str) -> None:
        raw = self.state.manifests.get(key)
        if raw is None:
            self._error(404, "MANIFEST_UNKNOWN")
            return
        self._send(200, raw, {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest_of(raw)})
        if self.state.rotate_token:
            self.state.stale_token, self.state.token = self.state.token, "token-for-alice-renewed"
            self.state.rotate_token = False

    def _blob(self, digest: str) -> None:
        if digest in self.state.blobs:
            self._send(200, self.state.blobs[digest], {"Content-Type": "application/octet-stream"})
        else:
            self._error(404, "BLOB_UNKNOWN")


@contextlib.contextmanager
def serving(state: Served) -> Iterator[Served]:
    handler = type("Handler", (_RegistryHandler,), {"state": state})
    with loopback.serving(handler) as server:
        state.port = server.server_address[1]
        yield state


@pytest.fixture
def served() -> Iterator[Served]:
    with serving(Served()) as state:
        yield state


@dataclass
class Sleeps:
    waits: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def local_pull(
    tmp_path: Path,
    served: Served,
    *,
    repo: str = "acme/pack",
    tag: str = "1.0",
    user: str | None = None,
    password: str | None = None,
    sleeps: Sleeps | None = None,
) -> pack.PulledPack:
    settings = PackSettings(ref=f"127.0.0.1:{served.port}/{repo}:{tag}", plain_http=True)
    if user is not None:
        config = write_config(
            tmp_path / "pull-config.json", {f"127.0.0.1:{served.port}": {"auth": b64(f"{user}:{password}")}}
        )
        settings = settings.model_copy(update={"credentials_file": str(config)})
    registry = RegistryClient(settings, sleep=sleeps or Sleeps(), timeout_seconds=5)
    return pull_pack(settings, tmp_path / "pulled", registry)


def push_default(served: Served) -> str:
    return served.push("acme/pack", "1.0", [file_layer("registry.yaml", REGISTRY_YAML), overlays_layer()])


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_valid_credential_pulls_with_basic_and_bearer_challenges(tmp_path: Path, served: Served, auth: str) -> None:
    served.auth = auth
    digest = push_default(served)

    pulled = local_pull(tmp_path, served, user="alice", password=served.password)

    assert pulled.manifest_digest == digest
    assert tree(pulled.path)["registry.yaml"] == REGISTRY_YAML
    assert tree(pulled.path)["overlays/acme.yaml"] == OVERLAY


def test_a_manifest_over_the_bound_is_refused_unread_when_announced_and_cut_when_not(
    tmp_path: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    served.auth = "none"
    push_default(served)
    raw = served.manifests["acme/pack:1.0"]
    limit = len(raw) - 1
    monkeypatch.setattr(registry_module, "MAX_MANIFEST_BYTES", limit)

    with pytest.raises(PackIntegrityError, match=rf"the manifest is {len(raw)} bytes, over the limit of {limit}"):
        local_pull(tmp_path, served)

    def unannounced(request: httpx.Request) -> httpx.Response:
        # no Content-Length: read until the bound
        return httpx.Response(200, content=iter([raw[:10], raw[10:]]))

    chunked = RegistryClient(
        PackSettings(ref=f"127.0.0.1:{served.port}/acme/pack:1.0", plain_http=True),
        client=httpx.Client(transport=httpx.MockTransport(unannounced)),
    )
    with pytest.raises(PackIntegrityError, match=rf"the manifest exceeds {limit} bytes"):
        chunked.get_manifest(f"127.0.0.1:{served.port}/acme/pack:1.0")


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_only_the_first_request_is_challenged(tmp_path: Path, served: Served, auth: str) -> None:
    """Once the registry asked for credentials, every later request carries them:
    no 401 round trip (and no dropped connection) per blob."""
    served.auth = auth
    push_default(served)

    local_pull(tmp_path, served, user="alice", password=served.password)

    registry_requests = [authorization for path, authorization in served.requests if path.startswith("/v2/")]
    assert len(registry_requests) == 1 + 1 + 2, "the manifest twice (challenged, then with credentials), two blobs"
    assert registry_requests[0] == ""
    assert all(registry_requests[1:]), registry_requests


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_wrong_credential_is_an_auth_error_at_once(
    tmp_path: Path, served: Served, auth: str, caplog: pytest.LogCaptureFixture
) -> None:
    served.auth = auth
    push_default(served)
    sleeps = Sleeps()
    caplog.set_level(logging.DEBUG)

    with pytest.raises(PackAuthError) as caught:
        local_pull(tmp_path, served, user="alice", password="wrong-password-123", sleeps=sleeps)

    message = str(caught.value)
    assert f"127.0.0.1:{served.port}" in message
    assert "was rejected" in message
    assert caught.value.exit_code == ExitCode.PACK_AUTH_FAILED
    assert sleeps.waits == []  # oras-py's own retry would sleep 2+3**n seconds here
    assert len(served.requests) <= 4
    for secret in ("wrong-password-123", b64("alice:wrong-password-123")):
        assert secret not in message
        assert secret not in caplog.text


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_no_credential_never_succeeds_against_a_private_registry(tmp_path: Path, served: Served, auth: str) -> None:
    served.auth = auth
    push_default(served)
    with pytest.raises(PackAuthError, match="no credential was given"):
        local_pull(tmp_path, served)


def test_docker_config_netrc_and_oras_env_are_never_consulted(
    tmp_path: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_default(served)
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    good = {"auths": {f"127.0.0.1:{served.port}": {"auth": b64(f"alice:{served.password}")}}}
    (home / ".docker" / "config.json").write_text(json.dumps(good))
    (tmp_path / "docker-config").mkdir()
    (tmp_path / "docker-config" / "config.json").write_text(json.dumps(good))
    (home / ".netrc").write_text(f"machine 127.0.0.1 login alice password {served.password}\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    monkeypatch.setenv("ORAS_USER", "alice")
    monkeypatch.setenv("ORAS_PASS", served.password)

    with pytest.raises(PackAuthError, match="no credential was given"):
        local_pull(tmp_path, served)

    assert all(authorization == "" for _, authorization in served.requests)


def test_anonymous_pull_of_a_public_pack_works(tmp_path: Path, served: Served) -> None:
    served.auth = "none"
    push_default(served)
    assert tree(local_pull(tmp_path, served).path)["registry.yaml"] == REGISTRY_YAML


def test_missing_tag_and_missing_blob_are_not_found(tmp_path: Path, served: Served) -> None:
    push_default(served)
    with pytest.raises(PackNotFoundError, match="MANIFEST_UNKNOWN") as caught:
        local_pull(tmp_path, served, tag="2.0", user="alice", password=served.password)
    assert caught.value.exit_code == ExitCode.PACK_UNAVAILABLE

    served.blobs.pop(digest_of(REGISTRY_YAML))
    with pytest.raises(PackNotFoundError, match="BLOB_UNKNOWN"):
        local_pull(tmp_path, served, user="alice", password=served.password)


def test_server_errors_are_retried_a_bounded_number_of_times(tmp_path: Path, served: Served) -> None:
    push_default(served)
    served.fail_with = [503, 502]
    sleeps = Sleeps()

    local_pull(tmp_path, served, user="alice", password=served.password, sleeps=sleeps)
    assert sleeps.waits == [1.0, 2.0]

    served.fail_with = [503, 503, 503, 503]
    sleeps = Sleeps()
    (tmp_path / "again").mkdir()
    with pytest.raises(PackError, match="HTTP 503") as caught:
        local_pull(tmp_path / "again", served, user="alice", password=served.password, sleeps=sleeps)
    assert sleeps.waits == [1.0, 2.0]
    assert caught.value.exit_code == ExitCode.PACK_UNAVAILABLE


def test_a_408_is_retried_too_and_retry_after_sets_the_wait(tmp_path: Path, served: Served) -> None:
    push_default(served)
    served.fail_with = [408, 429]
    served.retry_after = "7"
    sleeps = Sleeps()

    local_pull(tmp_path, served, user="alice", password=served.password, sleeps=sleeps)
    assert sleeps.waits == [7.0, 7.0]


def test_connection_refused_is_unreachable_after_bounded_retries(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = PackSettings(ref=f"127.0.0.1:{port}/acme/pack:1.0", plain_http=True)
    sleeps = Sleeps()

    with pytest.raises(PackNotFoundError) as caught:
        pull_pack(settings, tmp_path / "pulled", RegistryClient(settings, sleep=sleeps))

    assert f"registry 127.0.0.1:{port} is unreachable after 3 attempt(s)" in str(caught.value)
    assert "Connection refused" in str(caught.value)
    assert sleeps.waits == [1.0, 2.0]


def test_a_blob_download_is_cut_one_byte_past_its_declared_size(tmp_path: Path, served: Served) -> None:
    served.auth = "none"
    push_default(served)
    # The registry answers 64 MiB for the 67-byte registry.yaml.
    served.blobs[digest_of(REGISTRY_YAML)] = REGISTRY_YAML + b"#" * (64 << 20)

    with pytest.raises(PackIntegrityError) as caught:
        local_pull(tmp_path, served)

    declared = len(REGISTRY_YAML)
    assert f"layer 'registry.yaml' ({digest_of(REGISTRY_YAML)}) runs past the {declared} bytes" in str(caught.value)
    assert f"cut off at {declared + 1} bytes" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no pack and no staging directory left"


def test_the_proxy_environment_is_honoured_on_every_request(
    tmp_path: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session reads *_proxy/no_proxy once per host; it must still use them."""
    served.auth = "none"
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{served.port}")
    monkeypatch.setenv("NO_PROXY", "")
    settings = PackSettings(ref="registry.invalid:5000/acme/pack:1.0", plain_http=True)
    registry = RegistryClient(settings, sleep=Sleeps())

    for _ in range(2):  # the second request takes the kept answer
        with pytest.raises(PackNotFoundError):
            registry.get_manifest(settings.ref)
    digest = digest_of(REGISTRY_YAML)
    for _ in range(2):  # blobs too, although they skip requests' per-request path
        with pytest.raises(PackNotFoundError):
            list(registry.blob_chunks(settings.ref, digest, len(REGISTRY_YAML)))

    # A proxy is sent the absolute URL; the registry's own name never resolved.
    assert [path for path, _ in served.requests] == [
        *["http://registry.invalid:5000/v2/acme/pack/manifests/1.0"] * 2,
        *[f"http://registry.invalid:5000/v2/acme/pack/blobs/{digest}"] * 2,
    ]


# --- blob GETs on the client's kept-alive connections -----------------------------------------------


def push_many(served: Served, count: int) -> list[Layer]:
    layers = many_file_layers(count)
    served.push("acme/pack", "1.0", layers)
    return layers


@pytest.mark.parametrize("auth", ["none", "basic", "bearer"])
def test_the_blobs_of_one_pull_reuse_connections(tmp_path: Path, served: Served, auth: str) -> None:
    """30 blobs on the few kept-alive connections of the fetch workers, each sent
    once with the credential the manifest's challenge settled on."""
    served.auth = auth
    layers = push_many(served, 29)

    pulled = local_pull(tmp_path, served, user="alice", password=served.password)

    assert len(tree(pulled.path)) == len(layers)
    blob_requests = [authorization for path, authorization in served.requests if "/blobs/" in path]
    assert len(blob_requests) == len(layers), "no blob was challenged or sent twice"
    assert all(blob_requests) == (auth != "none")
    # One connection per fetch worker, plus the one a challenge closes.
    assert served.connections <= MAX_PARALLEL_FETCHES + (auth != "none"), served.connections


def test_a_blob_refused_for_its_token_gets_a_new_one(tmp_path: Path, served: Served) -> None:
    """A blob GET refused with a new challenge (a 403 for a token without the
    scope) gets a new token and is sent again, once."""
    served.auth = "bearer"
    served.rotate_token = True  # the manifest's token no longer opens the blobs
    push_default(served)

    pulled = local_pull(tmp_path, served, user="alice", password=served.password)

    assert tree(pulled.path)["registry.yaml"] == REGISTRY_YAML
    assert len([path for path, _ in served.requests if path.startswith("/token")]) >= 2, "a new token was asked for"
    blobs = [authorization for path, authorization in served.requests if "/blobs/" in path]
    assert blobs.count("Bearer token-for-alice-renewed") == 2, "each blob landed once, with the new token"
    assert set(blobs) == {"Bearer token-for-alice", "Bearer token-for-alice-renewed"}


def test_blob_server_errors_are_retried_like_any_request(tmp_path: Path, served: Served) -> None:
    served.auth = "none"
    served.push("acme/pack", "1.0", [file_layer("registry.yaml", REGISTRY_YAML)])
    served.blob_fail_with = [503, 429]
    sleeps = Sleeps()

    local_pull(tmp_path, served, sleeps=sleeps)

    assert sleeps.waits == [1.0, 2.0]
    assert len([path for path, _ in served.requests if "/blobs/" in path]) == 3, "each attempt sent once"

    served.blob_fail_with = [503] * 3
    sleeps = Sleeps()
    (tmp_path / "again").mkdir()
    with pytest.raises(PackError, match="HTTP 503") as caught:
        local_pull(tmp_path / "again", served, sleeps=sleeps)
    assert caught.value.exit_code == ExitCode.PACK_UNAVAILABLE


def test_an_unreachable_blob_is_retried_and_reported_like_an_unreachable_registry(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ref = f"127.0.0.1:{port}/acme/pack:1.0"
    sleeps = Sleeps()
    registry = RegistryClient(PackSettings(ref=ref, plain_http=True), sleep=sleeps)

    with pytest.raises(PackNotFoundError) as caught:
        list(registry.blob_chunks(ref, digest_of(REGISTRY_YAML), len(REGISTRY_YAML)))

    assert f"registry 127.0.0.1:{port} is unreachable after 3 attempt(s)" in str(caught.value)
    assert "Connection refused" in str(caught.value)
    assert sleeps.waits == [1.0, 2.0]


def test_a_blob_redirect_on_the_same_registry_keeps_the_credential(tmp_path: Path, served: Served) -> None:
    served.auth = "basic"
    served.blob_redirect = "/storage"
    push_default(served)

    pulled = local_pull(tmp_path, served, user="alice", password=served.password)

    assert tree(pulled.path)["registry.yaml"] == REGISTRY_YAML
    stored = [authorization for path, authorization in served.requests if path.startswith("/storage/")]
    assert stored == [f"Basic {b64('alice:' + served.password)}"] * 2


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_a_blob_redirected_to_another_host_is_fetched_without_the_credential(
    tmp_path: Path, served: Served, auth: str
) -> None:
    """As registries send blobs to a storage service: the registry's credential
    stays with the registry (requests' rule: another host, port or scheme)."""
    served.auth = auth
    push_default(served)
    with serving(Served(auth="none", blobs=served.blobs)) as storage:
        served.blob_redirect = f"http://localhost:{storage.port}/storage"

        pulled = local_pull(tmp_path, served, user="alice", password=served.password)

    assert tree(pulled.path)["overlays/acme.yaml"] == OVERLAY
    assert [authorization for _, authorization in storage.requests] == ["", ""]
    assert all(authorization for path, authorization in served.requests if "/blobs/" in path)


def test_a_blob_redirect_loop_ends_at_the_redirect_limit_without_retries(tmp_path: Path, served: Served) -> None:
    served.auth = "none"
    push_default(served)
    served.blob_redirect = "/v2/acme/pack/blobs"  # each blob URL redirects to itself
    sleeps = Sleeps()

    with pytest.raises(PackError, match="Exceeded 30 redirects") as caught:
        local_pull(tmp_path, served, sleeps=sleeps)

    assert type(caught.value) is PackError
    assert sleeps.waits == []
    assert served.connections <= MAX_PARALLEL_FETCHES, "each hop on a kept connection"


def test_the_pull_imports_one_http_stack_and_no_settings_root() -> None:
    """The pull is httpx only (neither oras-py nor requests, nor oras-py's jsonschema), and
    its settings group comes without pydantic-settings (the settings root's library)."""
    import subprocess
    import sys

    probe = (
        "import sys; from aicr_runner.settings.config import PackSettings; import aicr_runner.pack.pull; "
        "PackSettings(ref='registry.example.test/acme/pack:1.0'); "
        "print(sorted(m for m in ('httpx', 'oras', 'requests', 'jsonschema', 'urllib3', 'pydantic_settings') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['httpx']", result.stderr


def test_an_abort_breaks_a_hung_request_at_once_and_is_not_retried() -> None:
    from tests.support.hostile_server import HostileRegistry

    with HostileRegistry("hang") as hostile:
        settings = PackSettings(ref=hostile.ref, plain_http=True)
        sleeps = Sleeps()
        registry = RegistryClient(settings, sleep=sleeps)
        digest = next(iter(hostile.blobs))
        failure: list[BaseException] = []

        def fetch() -> None:
            try:
                list(registry.blob_chunks(settings.ref, digest, len(hostile.blobs[digest])))
            except BaseException as exc:  # noqa: BLE001 - inspected below
                failure.append(exc)

        worker = threading.Thread(target=fetch)
        worker.start()
        assert hostile.wait_for_blob_requests(1, timeout=30)
        registry.abort()
        worker.join(timeout=5)

        assert not worker.is_alive(), "the read waiting for a status line returned"
        assert isinstance(failure[0], PackError)
        assert f"the blob {digest} request to registry {hostile.host} was stopped" in str(failure[0])
        assert sleeps.waits == [], "an abort is not a fault to retry"
        assert [path for path in hostile.requests if "/blobs/" in path] == [f"/v2/{hostile.REPOSITORY}/blobs/{digest}"]
        with pytest.raises(PackError, match="was stopped"):
            registry.get_manifest(settings.ref)  # later requests fail at once
        registry.close()
        assert hostile.wait_until_released(timeout=5)


def test_docker_hub_refs_use_the_hub_api_host() -> None:
    urls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        urls.append(str(request.url))
        return httpx.Response(404, content=b"{}")

    registry = RegistryClient(
        PackSettings(ref="docker.io/acme/pack:1.0"), client=httpx.Client(transport=httpx.MockTransport(answer))
    )
    with pytest.raises(PackNotFoundError, match=r"registry docker\.io"):
        registry.get_manifest("docker.io/acme/pack:1.0")
    assert urls == ["https://registry-1.docker.io/v2/acme/pack/manifests/1.0"]


# --- parallel fetches ----------------------------------------------------------------------


class SlowRegistry(FakeRegistry):
    """Counts how many blob downloads overlap."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def blob_chunks(self, ref: str, digest: str, size: int) -> Generator[bytes]:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.05)
        yield from super().blob_chunks(ref, digest, size)
        with self.lock:
            self.running -= 1


def many_file_layers(count: int) -> list[Layer]:
    return [file_layer("registry.yaml", REGISTRY_YAML)] + [
        file_layer(f"overlays/o{index}.yaml", f"name: o{index}\n".encode()) for index in range(count)
    ]


def test_blobs_are_fetched_a_bounded_few_at_a_time(tmp_path: Path) -> None:
    layers = many_file_layers(12)
    registry = SlowRegistry(layers)

    pulled = pull(tmp_path, registry)

    assert 1 < registry.peak <= MAX_PARALLEL_FETCHES
    assert sorted(registry.fetched) == sorted(layer.descriptor["digest"] for layer in layers)
    assert tree(pulled.path) == {layer.descriptor["annotations"][ANNOTATION_TITLE]: layer.data for layer in layers}


def test_one_tampered_blob_among_parallel_fetches_fails_the_pull(tmp_path: Path) -> None:
    layers = many_file_layers(12)
    bad = layers[7].descriptor["digest"]
    registry = SlowRegistry(layers, served={bad: b"name: evil\n"})

    with pytest.raises(PackIntegrityError, match=f"digest mismatch: expected {bad}|runs past the"):
        pull(tmp_path, registry)

    assert_nothing_published(tmp_path)


# --- the challenge flow against answers the in-process registry never gives --------------------


def scripted_client(tmp_path: Path, answer: Any) -> tuple[RegistryClient, list[httpx.Request]]:
    """A RegistryClient for https://registry.example.test with alice's credential, on ``answer``."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        response: httpx.Response = answer(request)
        return response

    config = write_config(tmp_path / "config.json", {HOST: {"auth": b64("alice:s3cret-pass")}})
    settings = PackSettings(ref=REF, credentials_file=str(config))
    client = httpx.Client(transport=httpx.MockTransport(record), follow_redirects=True)
    return RegistryClient(settings, client=client, sleep=Sleeps()), sent


def test_a_challenge_of_unannounced_length_is_not_read(tmp_path: Path) -> None:
    """httpx reads a challenge's body before sending the request again: one that does
    not announce a small length is refused instead of read into memory."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="x"'}, content=iter([b"x" * 10]))

    registry, sent = scripted_client(tmp_path, answer)
    with pytest.raises(PackError, match="challenge's body is not announced as at most 65536 bytes") as caught:
        registry.get_manifest(REF)
    assert len(sent) == 1, "not sent again"
    assert "s3cret-pass" not in str(caught.value)


@pytest.mark.parametrize("realm", ["ftp://auth.example.test/token", "/token", ""])
def test_a_token_realm_that_is_no_http_url_is_refused(tmp_path: Path, realm: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="s"'}, content=b"{}")

    registry, sent = scripted_client(tmp_path, answer)
    with pytest.raises(PackError, match="is not an http"):
        registry.get_manifest(REF)
    assert [str(request.url) for request in sent] == ["https://registry.example.test/v2/acme/pack/manifests/1.0"]


def test_the_credential_goes_to_an_https_realm_only_and_the_token_is_redacted(tmp_path: Path) -> None:
    """A registry on https naming a realm on plain http gets an anonymous token request;
    the token the realm hands out is redacted wherever it would be shown."""
    realm = "http://auth.example.test/token"
    token = "tok-" + "z" * 40

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example.test":
            return httpx.Response(200, content=iter([json.dumps({"token": token}).encode()]))
        if request.headers.get("Authorization") == f"Bearer {token}":
            return httpx.Response(404, content=iter([b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}']))
        challenge = f'Bearer realm="{realm}",service="registry",scope="repository:acme/pack:pull"'
        return httpx.Response(401, headers={"WWW-Authenticate": challenge}, content=b"{}")

    registry, sent = scripted_client(tmp_path, answer)
    with pytest.raises(PackNotFoundError, match="MANIFEST_UNKNOWN"):
        registry.get_manifest(REF)

    token_requests = [request for request in sent if request.url.host == "auth.example.test"]
    assert len(token_requests) == 1
    assert "Authorization" not in token_requests[0].headers
    assert dict(token_requests[0].url.params) == {"service": "registry", "scope": "repository:acme/pack:pull"}
    assert redact(f"Bearer {token}") != f"Bearer {token}"


def test_the_blob_fetchers_events_carry_the_step_that_pulls(
    tmp_path: Path, served: Served, log_events: list[MutableMapping[str, Any]]
) -> None:
    """A blob's retry is logged on a fetcher thread; it still names the pulling step
    (the step runner binds ``step`` in its context, and each fetcher runs in a copy)."""
    import structlog

    served.auth = "none"
    # Two layers: a pull of one fetches it on its own thread, of more on the fetchers'.
    served.push("acme/pack", "1.0", [file_layer("registry.yaml", REGISTRY_YAML), file_layer("extra.yaml", b"a: 1\n")])
    served.blob_fail_with = [503]
    with structlog.contextvars.bound_contextvars(step="pack"):
        local_pull(tmp_path, served, sleeps=Sleeps())
    retried = [e for e in log_events if e["event"] == "pack registry retry" and "/blobs/" in e["url"]]
    assert retried, log_events
    assert {e.get("step") for e in log_events} == {"pack"}
