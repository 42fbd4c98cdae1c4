"""What the aicr-runner image costs a node: its size on disk (uncompressed), its
size on the wire (the compressed layers a registry serves) and the time to pull
it from a registry and start it. The image size test (tests/image/test_image_size.py)
holds the image to the budgets below; scripts/bench.py prints the same
measurements beside them, and its output is where the figures in docs/performance.md come from.

The registry is Debian's ``docker-registry`` on loopback, without TLS or auth;
every pull goes to a fresh, empty podman store, so no layer is already there."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.podman import PODMAN, ROOT, RUN_LIMITS

__all__ = [
    "COMPRESSED_BUDGET_BYTES",
    "UNCOMPRESSED_BUDGET_BYTES",
    "compressed_bytes",
    "local_registry",
    "pull_and_start_seconds",
    "push",
    "uncompressed_bytes",
]

#: The image on disk after a pull (podman's size: every layer unpacked).
UNCOMPRESSED_BUDGET_BYTES = 250_000_000
#: The layers as a registry serves them (gzip), what every node downloads.
COMPRESSED_BUDGET_BYTES = 100_000_000

DOCKER_REGISTRY = ROOT / ".tools" / "bin" / "docker-registry"
_MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)


def uncompressed_bytes(image: str) -> int:
    proc = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True, check=True
    )
    return int(proc.stdout.strip())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def local_registry(directory: Path) -> Iterator[str]:
    """A docker-registry on a free loopback port, storing under ``directory``; yields host:port."""
    if not os.access(DOCKER_REGISTRY, os.X_OK):
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "debian"], cwd=ROOT, check=True)
    host = f"127.0.0.1:{_free_port()}"
    config = directory / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {directory / 'storage'}\n"
        f"http:\n  addr: {host}\n  secret: {secrets.token_hex(16)}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    log = directory / "registry.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [str(DOCKER_REGISTRY), "serve", str(config)], stdout=handle, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{host}/v2/", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"docker-registry did not answer on {host}: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield host
    finally:
        process.terminate()
        process.wait(timeout=10)


def push(image: str, host: str, repository: str = "aicr-runner", tag: str = "bench") -> str:
    """The image pushed to the loopback registry (gzip layers, podman's default); its reference there."""
    ref = f"{host}/{repository}:{tag}"
    subprocess.run(
        [*PODMAN, "push", "--quiet", "--tls-verify=false", "--format", "v2s2", image, f"docker://{ref}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return ref


def compressed_bytes(ref: str) -> int:
    """The config and every layer of ``ref``'s manifest, as the registry serves them."""
    host, _, rest = ref.partition("/")
    repository, _, tag = rest.rpartition(":")
    request = urllib.request.Request(
        f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": _MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        manifest = json.load(response)
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def pull_and_start_seconds(ref: str, argv: tuple[str, ...] = ("version",), expect: str = "aicr-runner ") -> float:
    """Wall time to pull ``ref`` into an empty podman store and run ``argv`` from it
    (by default ``aicr-runner version``; its output must start with ``expect``).

    The store is a fresh directory each time (so every layer is downloaded and
    unpacked), removed afterwards."""
    store = Path(tempfile.mkdtemp(prefix="aicr-pull-"))
    podman = [*PODMAN, "--root", str(store / "root"), "--runroot", str(store / "run")]
    try:
        started = time.perf_counter()
        subprocess.run(
            [*podman, "pull", "--quiet", "--tls-verify=false", ref], capture_output=True, text=True, check=True
        )
        run = subprocess.run(
            [*podman, "run", "--rm", "--read-only", *RUN_LIMITS, ref, *argv],
            capture_output=True,
            text=True,
            check=True,
        )
        elapsed = time.perf_counter() - started
        if not run.stdout.startswith(expect):
            raise RuntimeError(f"{ref} {' '.join(argv)} printed {run.stdout!r}, not {expect!r}...")
        return elapsed
    finally:
        # Only this store's images (never `system reset`: networks are machine-wide).
        subprocess.run([*podman, "rmi", "--all", "--force"], capture_output=True, check=False)
        shutil.rmtree(store, ignore_errors=True)
