"""The least a Python process can do to pull a pack: scripts/bench.py's floor row.

Not the runner and not for use: a benchmark's lower bound. It pulls an anonymous,
plain-HTTP artifact the way the runner does at its fastest (one manifest GET, the
blobs on 4 kept-alive connections, each hashed as it streams, titled blobs written
as files, a directory layer unpacked by ``tarfile``'s data filter) and leaves out
everything the runner adds for production: settings, logging, credentials, proxies,
TLS, retries, cancellation, size bounds, staging and the checks on titles. It
imports the standard library only (``http.client``, ``hashlib``, ``tarfile``).

If this floor already misses a goal against ``oras pull``, no design of the
runner's pull in Python meets it: what remains is the interpreter and its HTTP
and tar code, not the runner.

``--runner-imports`` first imports what any pull of the runner's needs besides an
HTTP client (its settings, logging, archive, deadline, errors and reference
modules): the bound for a runner pull on the standard library's HTTP.

``--imports-only`` stops after the imports: the floor's start-up, for the
benchmark's imports row.

Usage: python scripts/pack_floor.py [--runner-imports] HOST/REPOSITORY:TAG DEST
       python scripts/pack_floor.py --imports-only
"""

from __future__ import annotations

import hashlib
import http.client
import json
import sys
import tarfile
import threading
from pathlib import Path

PARALLEL = 4
ACCEPT = "application/vnd.oci.image.manifest.v1+json"


def _get(connection: http.client.HTTPConnection, path: str, accept: str = "*/*") -> http.client.HTTPResponse:
    connection.request("GET", path, headers={"Accept": accept})
    response = connection.getresponse()
    if response.status != 200:
        raise SystemExit(f"GET {path}: HTTP {response.status}")
    return response


def pull(ref: str, dest: Path) -> None:
    host, _, rest = ref.partition("/")
    repository, _, tag = rest.rpartition(":")
    connection = http.client.HTTPConnection(host, timeout=60)
    manifest = json.loads(_get(connection, f"/v2/{repository}/manifests/{tag}", ACCEPT).read())
    layers = list(manifest["layers"])
    dest.mkdir(parents=True)
    blobs = dest / ".blobs"
    blobs.mkdir()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def fetch(own: http.client.HTTPConnection) -> None:
        try:
            _fetch_all(own)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    def _fetch_all(own: http.client.HTTPConnection) -> None:
        while True:
            with lock:
                if not layers:
                    return
                layer = layers.pop()
            response = _get(own, f"/v2/{repository}/blobs/{layer['digest']}")
            hasher = hashlib.sha256()
            title = layer.get("annotations", {}).get("org.opencontainers.image.title", "")
            is_directory = layer["mediaType"].endswith("tar+gzip") and title
            target = blobs / layer["digest"][7:] if is_directory else dest / title
            with target.open("wb") as out:
                while chunk := response.read(1 << 20):
                    hasher.update(chunk)
                    out.write(chunk)
            if "sha256:" + hasher.hexdigest() != layer["digest"]:
                raise SystemExit(f"{layer['digest']}: digest mismatch")
            if is_directory:
                with tarfile.open(target, "r:gz") as archive:
                    # The data filter where the interpreter has it (3.11.4+; Debian 12's python3 is
                    # 3.11.2): the benchmark's own fixture either way.
                    data = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                    archive.extractall(dest, **data)  # type: ignore[arg-type]  # noqa: S202

    workers = [
        threading.Thread(target=fetch, args=(http.client.HTTPConnection(host, timeout=60),)) for _ in range(PARALLEL)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if layers or failures:
        raise SystemExit(f"pull of {ref} failed: {failures or 'a fetch worker ended early'}")


RUNNER_MODULES = ("settings.config", "net.archive", "logs", "net.deadline", "errors", "net.reference")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments == ["--imports-only"]:
        sys.exit(0)
    if arguments[:1] == ["--runner-imports"]:
        arguments = arguments[1:]
        for module in RUNNER_MODULES:
            __import__(f"aicr_runner.{module}")
    pull(arguments[0], Path(arguments[1]))
