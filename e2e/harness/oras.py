"""The Go oras CLI, used the way users push and pull packs."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.harness.tools import tool

__all__ = ["OrasError", "PushResult", "fetch_manifest", "pull", "push_pack"]


class OrasError(RuntimeError):
    def __init__(self, argv: list[str], proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.output = (proc.stdout + proc.stderr).strip()
        super().__init__(f"{' '.join(argv)} exited {proc.returncode}:\n{self.output}")


@dataclass(frozen=True)
class PushResult:
    ref: str
    digest: str  # manifest digest, sha256:...
    output: str

    @property
    def pinned_ref(self) -> str:
        """host/repo@sha256:... (the ref without its tag, pinned to the pushed digest)."""
        name = self.ref.rsplit(":", 1)[0] if ":" in self.ref.rsplit("/", 1)[-1] else self.ref
        return f"{name}@{self.digest}"


def _run(
    args: list[str], *, cwd: Path | None = None, registry_config: Path | None = None, plain_http: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [str(tool("oras")), *args]
    if plain_http:
        argv.append("--plain-http")
    if registry_config is not None:
        argv += ["--registry-config", str(registry_config)]
    # Never read the invoking user's ~/.docker/config.json: no credential unless given.
    with tempfile.TemporaryDirectory(prefix="oras-home-") as home:
        env = {**os.environ, "HOME": home, "DOCKER_CONFIG": home}
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise OrasError(argv, proc)
    return proc


def push_pack(
    pack_dir: Path,
    ref: str,
    *,
    registry_config: Path | None = None,
    plain_http: bool = True,
    entries: list[str] | None = None,
) -> PushResult:
    """``oras push REF registry.yaml overlays/ ...`` from inside ``pack_dir``.

    ``entries`` defaults to every top-level entry of the pack, files first; a
    directory is given with a trailing slash, as users type it, and becomes one
    tar+gzip layer annotated for unpacking.
    """
    if entries is None:
        children = sorted(pack_dir.iterdir(), key=lambda p: (p.is_dir(), p.name))
        entries = [c.name + "/" if c.is_dir() else c.name for c in children]
    proc = _run(
        ["push", ref, *entries, "--format", "json"],
        cwd=pack_dir,
        registry_config=registry_config,
        plain_http=plain_http,
    )
    data = json.loads(proc.stdout)
    return PushResult(ref=ref, digest=str(data["digest"]), output=proc.stdout + proc.stderr)


def pull(ref: str, dest: Path, *, registry_config: Path | None = None, plain_http: bool = True) -> str:
    """``oras pull REF -o DEST``; returns the CLI output."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = _run(["pull", ref, "-o", str(dest)], registry_config=registry_config, plain_http=plain_http)
    return proc.stdout + proc.stderr


def fetch_manifest(ref: str, *, registry_config: Path | None = None, plain_http: bool = True) -> dict[str, Any]:
    proc = _run(["manifest", "fetch", ref], registry_config=registry_config, plain_http=plain_http)
    return dict(json.loads(proc.stdout))
