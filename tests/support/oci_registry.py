"""A tiny OCI registry on loopback, for the mirror's digest reads: manifests by
repository and tag (or digest), ``HEAD`` and ``GET`` as the distribution spec
answers them, ``PUT`` of a manifest (what a stand-in oras copies with), Basic
auth, and the faults a test asks for: no ``Docker-Content-Digest``, another
manifest stored than the one put, an answer that never comes.

And ``fake_oras``: a stand-in for the Go oras CLI's ``cp`` against it, which
writes each call to a file (the processes the copy cost) and copies the source's
manifest bytes to the target, printing ``Digest: ...`` as oras does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.support.loopback import LoopbackServer

INDEX = "application/vnd.oci.image.index.v1+json"


def manifest(note: str) -> bytes:
    """A small OCI index (its bytes: their sha256 is its digest)."""
    return json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [], "annotations": {"n": note}}).encode()


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass
class Registry:
    #: (repository, tag or digest) -> manifest bytes.
    manifests: dict[tuple[str, str], bytes] = field(default_factory=dict)
    #: Every request as ``METHOD path`` (and its Host header in ``hosts``).
    requests: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    send_digest: bool = True
    #: A PUT stores this instead of what was sent (a copy that lands something else).
    stores_instead: bytes | None = None
    #: ``user:password`` the registry asks for with Basic auth (or, with ``bearer``, its token service); None: open.
    login: str | None = None
    #: Set: the registry asks for a Bearer token of its ``/token`` service (the distribution
    #: spec's token auth, as nvcr.io and ghcr.io do), anonymous unless ``login`` is set.
    bearer: bool = False
    #: Each token the service handed out, with the scope it was asked for.
    tokens: list[str] = field(default_factory=list)
    #: Set: every manifest request waits until ``released`` (never, unless a test sets it).
    stalls: bool = False
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def put(self, repository: str, tag: str, body: bytes) -> str:
        self.manifests[(repository, tag)] = self.manifests[(repository, digest_of(body))] = body
        return digest_of(body)


def serve(registry: Registry) -> LoopbackServer:
    """``registry`` served on a free loopback port (call ``stop`` when done)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _basic_ok(self) -> bool:
            given = self.headers.get("Authorization", "")
            return registry.login is None or given == "Basic " + base64.b64encode(registry.login.encode()).decode()

        def _allowed(self) -> bool:
            if registry.bearer:
                if self.headers.get("Authorization", "") in {f"Bearer {t}" for t in registry.tokens}:
                    return True
                realm = f"http://{self.headers.get('Host')}/token"
                challenge = f'Bearer realm="{realm}",service="fake",scope="repository:x:pull"'
                # A HEAD's refusal without a length, as some registries send it (it has no body).
                self._answer(401, b"", {"WWW-Authenticate": challenge}, length=self.command != "HEAD")
                return False
            if self._basic_ok():
                return True
            self._answer(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": 'Basic realm="r"'})
            return False

        def _token(self) -> None:
            if not self._basic_ok():
                self._answer(401, b"{}")
                return
            token = f"t{len(registry.tokens)}"
            registry.tokens.append(token)
            self._answer(200, json.dumps({"token": token}).encode())

        def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None, length: bool = True) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if length:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _manifest_key(self) -> tuple[str, str] | None:
            path = self.path.split("?", 1)[0]
            if not path.startswith("/v2/") or "/manifests/" not in path:
                return None
            repository, _, reference = path.removeprefix("/v2/").partition("/manifests/")
            return repository, reference

        def do_GET(self) -> None:
            registry.requests.append(f"{self.command} {self.path}")
            registry.hosts.append(self.headers.get("Host", ""))
            if self.path.startswith("/token"):
                self._token()
                return
            if not self._allowed():
                return
            key = self._manifest_key()
            if key is None:
                self._answer(200, b"{}")
                return
            if registry.stalls:
                registry.arrived.set()
                registry.released.wait(30)
            body = registry.manifests.get(key)
            if body is None:
                self._answer(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                return
            headers = {"Content-Type": INDEX}
            if registry.send_digest:
                headers["Docker-Content-Digest"] = digest_of(body)
            self._answer(200, body, headers)

        do_HEAD = do_GET

        def do_PUT(self) -> None:
            registry.requests.append(f"PUT {self.path}")
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = self._manifest_key()
            if key is None or not self._allowed():
                return
            registry.put(key[0], key[1], registry.stores_instead or body)
            self._answer(201, b"", {"Docker-Content-Digest": digest_of(body)})

    return LoopbackServer(Handler).start()


_FAKE_ORAS = """\
import sys, urllib.request
calls, argv = sys.argv[1], sys.argv[2:]
with open(calls, "a") as out:
    out.write(" ".join(argv) + "\\n")
assert argv[0] == "cp", argv
source, target = argv[-2:]


def url(reference):
    host, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    return f"http://{host}/v2/{repository}/manifests/{tag}"


body = urllib.request.urlopen(url(source)).read()
request = urllib.request.Request(url(target), data=body, method="PUT")
digest = urllib.request.urlopen(request).headers["Docker-Content-Digest"]
print("Copied [registry] " + source + " => [registry] " + target)
print("Digest: " + digest)
"""


def fake_oras(directory: Path) -> tuple[Path, Path]:
    """A stand-in ``oras`` (plain HTTP, no login) and the file it writes its calls to."""
    script, calls = directory / "fake_oras.py", directory / "oras-calls"
    script.write_text(_FAKE_ORAS)
    oras = directory / "oras"
    oras.write_text(f'#!/bin/sh\nexec {sys.executable} {script} {calls} "$@"\n')
    oras.chmod(0o755)
    return oras, calls
