"""A local OCI registry: Debian's docker-registry (distribution 2.8), htpasswd
(bcrypt) auth or anonymous, plain HTTP or TLS, storage in a temp directory, its
access log read back (``requests``, ``user_agents``)."""

from __future__ import annotations

import base64
import functools
import json
import re
import secrets
import ssl
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
    "RegistryTls",
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


@dataclass(frozen=True)
class RegistryTls:
    """The serving certificate and key a registry presents, and the CA that signed them."""

    cert: Path
    key: Path
    ca_pem: bytes


@dataclass
class Registry:
    host: str  # "ADDRESS:PORT" (ADDRESS alone on 443), the reference prefix
    username: str  # "" for an anonymous registry
    password: str
    storage: Path
    process: ManagedProcess = field(repr=False)
    startup_seconds: float = 0.0
    tls: RegistryTls | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def ref(self, repository: str, tag: str) -> str:
        return f"{self.host}/{repository}:{tag}"

    @property
    def anonymous(self) -> bool:
        return not self.username

    def docker_config(self) -> dict[str, object]:
        return docker_config(self.host, *self._login())

    def dockerconfigjson(self) -> str:
        """The ``.dockerconfigjson`` value of a kubernetes.io/dockerconfigjson Secret."""
        return json.dumps(self.docker_config())

    def write_docker_config(self, path: Path) -> Path:
        return write_docker_config(path, self.host, *self._login())

    def _login(self) -> tuple[str, str]:
        # An empty login would read as a credential that a real client sends and this registry ignores.
        if self.anonymous:
            raise ValueError(f"the registry at {self.host} is anonymous: it has no login to write")
        return self.username, self.password

    def requests(self) -> list[str]:
        """Every HTTP request its access log holds (method and path), in order."""
        return logged_requests(self.process.log_path)

    def user_agents(self, path: str) -> set[str]:
        """The User-Agent of each logged GET or HEAD of ``path``."""
        return logged_user_agents(self.process.log_path, path)

    def get(self, path: str, *, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
        """Status and body of a GET on the registry API (no exception on 4xx)."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Accept", "application/vnd.oci.image.manifest.v1+json, application/json")
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cadata=self.tls.ca_pem.decode()) if self.tls else None
        try:
            with urllib.request.urlopen(req, timeout=10, context=context) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            exc.close()
            return exc.code, body

    def stop(self) -> None:
        """Stop it; its access log stays readable."""
        self.process.stop()


def start_registry(
    workdir: Path,
    *,
    username: str = "e2e-user",
    password: str | None = None,
    anonymous: bool = False,
    tls: RegistryTls | None = None,
    address: str = "127.0.0.1",
    port: int = 0,
    timeout: float = 30.0,
) -> Registry:
    """Start Debian's docker-registry on ``address`` (the e2e node's bridge address,
    so its pods reach it too) and ``port`` (a free one when 0), its access log kept:
    demanding ``username``/``password`` on every request unless ``anonymous``, over
    plain HTTP unless ``tls`` is given."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    if anonymous:
        username, password = "", ""
    else:
        password = password or secrets.token_urlsafe(16)
    storage = workdir / "storage"
    storage.mkdir(exist_ok=True)
    http: dict[str, object] = {"secret": secrets.token_hex(16)}
    if tls is not None:
        http["tls"] = {"certificate": str(tls.cert), "key": str(tls.key)}
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": http,
    }
    if not anonymous:
        config["auth"] = {"htpasswd": {"realm": "aicr-e2e", "path": str(_htpasswd(workdir, username, password))}}
    attempts = 1 if port else 3  # a free port can be taken before the registry binds it
    for attempt in range(attempts):
        chosen = port or free_port()
        http["addr"] = f"{address}:{chosen}"
        (workdir / "config.yml").write_text(yaml.safe_dump(config))
        proc = ManagedProcess(
            "docker-registry",
            [tool("docker-registry"), "serve", workdir / "config.yml"],
            workdir / f"registry.{attempt}.log",
        )
        host = address if chosen == 443 else f"{address}:{chosen}"  # https' own port: no port in the reference
        registry = Registry(host, username, password, storage, proc, tls=tls)
        try:
            wait_for(
                functools.partial(_answers, registry, anonymous),
                timeout=timeout,
                what="docker-registry",
                alive=proc.alive,
            )
        except StartupError:
            proc.stop()
            if "address already in use" not in proc.log_tail(100) or attempt == attempts - 1:
                raise StartupError(f"docker-registry did not start; log tail:\n{proc.log_tail()}") from None
            continue
        registry.startup_seconds = time.monotonic() - started
        return registry
    raise AssertionError("unreachable")


def _htpasswd(workdir: Path, username: str, password: str) -> Path:
    # Cost 5, like `htpasswd -B`: the registry checks the hash on every request.
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    htpasswd = workdir / "htpasswd"
    htpasswd.write_text(f"{username}:{hashed}\n")
    return htpasswd


def _answers(registry: Registry, anonymous: bool) -> bool | None:
    """Up: an anonymous registry answers /v2/ with 200, one with auth on with 401."""
    status, _ = registry.get("/v2/")  # refused while it starts: wait_for retries
    return True if status == (200 if anonymous else 401) else None
