"""A real OCI registry on loopback for the pack tests.

Debian's ``docker-registry`` (distribution 2.8) runs with htpasswd (bcrypt) auth,
filesystem storage in a temp dir and plain HTTP on a free 127.0.0.1 port, for the
whole session. Packs are pushed with the pinned Go ``oras`` CLI, the way users
push them. Both tools come from scripts/bootstrap-tools.sh, which the fixture runs
when either is missing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"
ORAS = TOOLS / "oras"
DOCKER_REGISTRY = TOOLS / "docker-registry"
_STARTUP_SECONDS = 20.0


def _tools_present() -> bool:
    return all(os.access(tool, os.X_OK) for tool in (ORAS, DOCKER_REGISTRY))


def ensure_tools() -> None:
    """Build/install oras and docker-registry when missing (never skip the tests)."""
    if _tools_present():
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "oras", "debian"], cwd=ROOT, check=True)
    if not _tools_present():
        raise RuntimeError(f"bootstrap ran but {ORAS} or {DOCKER_REGISTRY} is still missing")


def docker_config(path: Path, host: str, user: str, password: str) -> Path:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class LocalRegistry:
    host: str
    storage: Path
    user: str
    password: str
    #: dockerconfigjson with the valid credential (what the chart mounts).
    credentials: Path
    home: Path

    def push(self, repository_tag: str, source: Path, *paths: str) -> str:
        """``oras push`` paths (relative to source) and return the manifest digest."""
        result = subprocess.run(
            [
                str(ORAS),
                "push",
                "--plain-http",
                "--registry-config",
                str(self.credentials),
                f"{self.host}/{repository_tag}",
                *paths,
            ],
            cwd=source,
            env={**os.environ, "HOME": str(self.home)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"oras push failed ({result.returncode}): {result.stderr or result.stdout}")
        match = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", result.stdout, re.MULTILINE)
        if not match:
            raise RuntimeError(f"oras push printed no digest: {result.stdout}")
        return match.group(1)

    def blob_file(self, digest: str) -> Path:
        """Where distribution's filesystem driver keeps a blob's bytes."""
        hex_digest = digest.removeprefix("sha256:")
        path = self.storage / "docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"
        if not path.is_file():
            raise FileNotFoundError(path)
        return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(process: subprocess.Popen[bytes], host: str, log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://{host}/v2/", timeout=1):
                pass
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 401:  # up, and asking for credentials
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"docker-registry did not answer on {host} within {_STARTUP_SECONDS}s")


@pytest.fixture(scope="session")
def local_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    ensure_tools()
    base = tmp_path_factory.mktemp("registry")
    storage = base / "storage"
    storage.mkdir()
    home = base / "home"
    home.mkdir()
    user, password = "packreader", secrets.token_urlsafe(18)
    htpasswd = base / "htpasswd"
    # distribution's htpasswd backend accepts bcrypt only; cost 4 keeps logins fast.
    htpasswd.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    port = _free_port()
    host = f"127.0.0.1:{port}"
    config = base / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
        "  maintenance:\n    uploadpurging:\n      enabled: false\n"
        f"http:\n  addr: {host}\n  secret: {secrets.token_hex(16)}\n"
        f"auth:\n  htpasswd:\n    realm: aicr-runner-tests\n    path: {htpasswd}\n"
    )
    log = base / "registry.log"
    # REGISTRY_* variables override the config file; none may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with log.open("wb") as log_handle:
        process = subprocess.Popen(
            [str(DOCKER_REGISTRY), "serve", str(config)], stdout=log_handle, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_ready(process, host, log)
        credentials = docker_config(base / "pull-config.json", host, user, password)
        yield LocalRegistry(host, storage, user, password, credentials, home)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
