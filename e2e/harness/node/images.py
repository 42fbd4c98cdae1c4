"""Images for the e2e node: the sandbox (pause) image, and the aicr-runner image
with the test material scenarios need, loaded into the node's containerd.

No public registry is reachable, so the sandbox image is an OCI archive made
here from tools/pause (a static binary that waits for SIGTERM). The aicr-runner
image is the one scripts/build-image.sh builds; scenarios that need more (the
contract-faithful fake aicr, a helm wrapper) get an image derived from it with
``podman build``, so the chart's pod spec stays the chart's.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from e2e.harness.node.containerd import Containerd
from e2e.harness.podman import BUILD_SECONDS, CALL_SECONDS, image_exists, podman

__all__ = ["derive_image", "load_image", "write_pause_archive"]


def _blob(layout: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest[7:]}")
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return digest


def write_pause_archive(path: Path, binary: Path, name: str) -> Path:
    """An OCI image archive holding ``binary`` as ``/pause``, named ``name`` for ctr."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as layer:
        info = tarfile.TarInfo("pause")
        info.size = binary.stat().st_size
        info.mode = 0o755
        with binary.open("rb") as handle:
            layer.addfile(info, handle)
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    compressed = gzip.compress(raw.getvalue(), mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    with tarfile.open(path, "w") as layout:
        config_bytes = json.dumps(config).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(layout, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _blob(layout, compressed),
                    "size": len(compressed),
                }
            ],
        }
        manifest_bytes = json.dumps(manifest).encode()
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _blob(layout, manifest_bytes),
                    "size": len(manifest_bytes),
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
                }
            ],
        }
        for member, data in (
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
            ("index.json", json.dumps(index).encode()),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return path


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return podman(*args, timeout=BUILD_SECONDS if args[0] == "build" else CALL_SECONDS)


def derive_image(base: str, files: Mapping[str, Path], env: Mapping[str, str] | None = None) -> str:
    """``base`` plus ``files`` (container path -> host file or directory) and
    ``env``, built with podman (cached by content: the tag is a hash of the inputs)."""
    base_id = _podman("image", "inspect", "--format", "{{.Id}}", base).stdout.strip()
    digest = hashlib.sha256(base_id.encode())
    for target, source in sorted(files.items()):
        digest.update(target.encode())
        # what is copied below: a directory without its __pycache__
        copied = (p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(source).parts)
        paths = sorted(copied) if source.is_dir() else [source]
        for path in paths:
            digest.update(str(path.relative_to(source) if source.is_dir() else "").encode())
            digest.update(path.read_bytes())
            digest.update(str(path.stat().st_mode & 0o777).encode())
    digest.update(json.dumps(dict(env or {}), sort_keys=True).encode())
    tag = f"localhost/aicr-runner-e2e:{digest.hexdigest()[:16]}"
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="e2e-image-") as context:
        lines = [f"FROM {base}"]
        for number, (target, source) in enumerate(sorted(files.items())):
            staged = Path(context) / f"f{number}"
            if source.is_dir():
                shutil.copytree(source, staged, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, staged)
            lines.append(f"COPY f{number} {target}")
        for key, value in (env or {}).items():
            lines.append(f"ENV {key}={json.dumps(value)}")
        (Path(context) / "Containerfile").write_text("\n".join(lines) + "\n")
        _podman("build", "--quiet", "--tag", tag, "--file", str(Path(context) / "Containerfile"), context)
    return tag


def load_image(runtime: Containerd, image: str, *aliases: str) -> None:
    """Copy a podman image into the node's containerd (``ctr images import``,
    once per image: tags are content hashes), also named ``aliases`` there."""
    if image not in runtime.loaded:
        with tempfile.TemporaryDirectory(prefix="e2e-image-") as scratch:
            archive = Path(scratch) / "image.tar"
            _podman("save", "--format", "docker-archive", "--output", str(archive), image)
            runtime.ctr("images", "import", str(archive))
        runtime.loaded.add(image)
    for alias in aliases:
        runtime.ctr("images", "tag", "--force", image, alias)
