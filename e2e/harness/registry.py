"""A local OCI registry: Debian's docker-registry (distribution 2.8) on loopback,
plain HTTP, htpasswd (bcrypt) auth, storage in a temp directory."""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import yaml

from e2e.harness.procs import ManagedProcess, StartupError, free_port, wait_for
from e2e.harness.tools import tool

__all__ = [
    "Registry",
    "docker_config",
    "logged_requests",
    "logged_user_agents",
    "start_registry",
    "write_docker_config",
]


def logged_requests(log: Path) -> list[str]:
    """Every HTTP request a docker-registry access log holds (method and path), in order."""
    text = log.read_text(errors="replace")
    return re.findall(r'"((?:GET|HEAD|PUT|POST|PATCH|DELETE) /v2/[^?\s]*)\S* HTTP/\d\.\d"', text)


def logged_user_agents(log: Path, path: str) -> set[str]:
    """The User-Agent of each GET or HEAD of ``path`` in a docker-registry access log."""
    text = log.read_text(errors="replace")
    return set(re.findall(rf'"(?:GET|HEAD) {re.escape(path)}(?:\?\S*)? HTTP/\d\.\d" \d+ \d+ "[^"]*" "([^"]*)"', text))


def docker_config(host: str, username: str, password: str) -> dict[str, object]:
    """A dockerconfigjson document (what ``kubectl create secret docker-registry`` writes)."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {host: {"username": username, "password": password, "auth": auth}}}


def write_docker_config(path: Path, host: str, username: str, password: str) -> Path:
    """Write a dockerconfigjson file (mode 0600) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(docker_config(host, username, password)))
    path.chmod(0o600)
    return path


@dataclass
class Registry:
    host: str  # "127.0.0.1:PORT", the reference prefix
    username: str
    password: str
    storage: Path
    process: ManagedProcess | None = field(default=None, repr=False)
    startup_seconds: float = 0.0

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def ref(self, repository: str, tag: str) -> str:
        return f"{self.host}/{repository}:{tag}"

    def docker_config(self) -> dict[str, object]:
        return docker_config(self.host, self.username, self.password)

    def dockerconfigjson(self) -> str:
        """The ``.dockerconfigjson`` value of a kubernetes.io/dockerconfigjson Secret."""
        return json.dumps(self.docker_config())

    def write_docker_config(self, path: Path) -> Path:
        return write_docker_config(path, self.host, self.username, self.password)

    def get(self, path: str, *, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
        """Status and body of a GET on the registry API (no exception on 4xx)."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Accept", "application/vnd.oci.image.manifest.v1+json, application/json")
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            exc.close()
            return exc.code, body

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


def start_registry(
    workdir: Path,
    *,
    username: str = "e2e-user",
    password: str | None = None,
    address: str = "127.0.0.1",
    timeout: float = 30.0,
) -> Registry:
    """Start a registry that demands ``username``/``password`` on every request,
    on ``address`` (the e2e node's bridge address, so its pods reach it too)."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    password = password or secrets.token_urlsafe(16)
    # Cost 5, like `htpasswd -B`: the registry checks the hash on every request.
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    htpasswd = workdir / "htpasswd"
    htpasswd.write_text(f"{username}:{hashed}\n")
    storage = workdir / "storage"
    storage.mkdir(exist_ok=True)
    for attempt in range(3):
        port = free_port()
        config = workdir / "config.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "info", "accesslog": {"disabled": False}},
                    "storage": {
                        "filesystem": {"rootdirectory": str(storage)},
                        "delete": {"enabled": True},
                        "maintenance": {"uploadpurging": {"enabled": False}},
                    },
                    "http": {"addr": f"{address}:{port}", "secret": secrets.token_hex(16)},
                    "auth": {"htpasswd": {"realm": "aicr-e2e", "path": str(htpasswd)}},
                }
            )
        )
        proc = ManagedProcess(
            "docker-registry", [tool("docker-registry"), "serve", config], workdir / f"registry.{attempt}.log"
        )
        registry = Registry(
            host=f"{address}:{port}", username=username, password=password, storage=storage, process=proc
        )

        def up(registry: Registry = registry) -> bool | None:
            status, _ = registry.get("/v2/")
            return True if status == 401 else None  # auth is on: anonymous gets 401

        try:
            wait_for(up, timeout=timeout, what="docker-registry", alive=proc.alive)
        except StartupError:
            proc.stop()
            if "address already in use" not in proc.log_tail(100) or attempt == 2:
                raise StartupError(f"docker-registry did not start; log tail:\n{proc.log_tail()}") from None
            continue
        registry.startup_seconds = time.monotonic() - started
        return registry
    raise AssertionError("unreachable")
