"""The real aicr the tests run: a release folder in GitHub's layout, found
through ``AICR_TEST_RELEASES_DIR``.

``scripts/test.sh`` sets the variable to ``<repo>/../shared/testdata/aicr-releases``
(where CI provides the release); elsewhere, export it. The folder holds
``v0.11.1/aicr_0.11.1_linux_amd64.tar.gz`` and ``v0.11.1/aicr_checksums.txt``: a
real aicr v0.11.1 (linux/amd64) built unmodified from NVIDIA/aicr's tag, without
NVIDIA's Sigstore attestation. A test that needs it and does not find it fails
with ``RealAicrMissing``'s message; it never skips.

``RealAicr`` runs that binary and remembers what a recipe or bundle gave within
the session: the binary is 60 MB and the machine small, and the same inputs give
the same outputs (the comparisons below rely on it, and a test checks it once).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ARCHIVE",
    "LEAVES",
    "RELEASES_ENV",
    "TAG",
    "THIN",
    "UNKNOWN",
    "AicrCall",
    "FolderMirror",
    "RealAicr",
    "RealAicrMissing",
    "combo",
    "component_charts_dir",
    "criteria_words",
    "extract_binary",
    "recipe_charts_dir",
    "release_dir",
]

RELEASES_ENV = "AICR_TEST_RELEASES_DIR"
TAG = "v0.11.1"
ARCHIVE = "aicr_0.11.1_linux_amd64.tar.gz"
CHECKSUMS = "aicr_checksums.txt"
#: What the README of the release folder says ``aicr --version`` prints.
VERSION_LINE = "aicr version 0.11.1 (commit: bc05c6b, date: 2026-03-21T10:02:14Z)"


def combo(**criteria: str) -> dict[str, str]:
    return criteria


#: Criteria v0.11.1 resolves, each to the overlays that carry every stated value.
LEAVES = [
    combo(service="eks", accelerator="h100", intent="training", os="ubuntu"),
    combo(service="eks", accelerator="h100", intent="training", os="ubuntu", platform="kubeflow"),
    combo(service="eks", accelerator="h100", intent="inference", os="ubuntu", platform="dynamo"),
    combo(service="eks", accelerator="gb200", intent="training", os="ubuntu"),
    combo(service="eks", accelerator="gb200", intent="inference", os="ubuntu", platform="dynamo"),
    combo(service="eks", accelerator="h100", intent="inference"),
    combo(service="aks", accelerator="h100", intent="training", os="ubuntu"),
    combo(service="aks", accelerator="h100", intent="inference", os="ubuntu", platform="dynamo"),
    combo(service="gke", accelerator="h100", intent="training", os="cos", platform="kubeflow"),
    combo(service="gke", accelerator="h100", intent="inference", os="cos"),
    combo(service="kind", accelerator="h100", intent="training"),
    combo(service="kind", accelerator="h100", intent="inference", platform="dynamo"),
    combo(service="gke", intent="training", os="cos"),
]
#: Criteria v0.11.1 resolves without a stated value (exit 0, the criteria echoed back).
THIN = [
    combo(service="eks", accelerator="a100", intent="training", os="ubuntu"),
    combo(service="aks", accelerator="gb200", intent="inference"),
    combo(service="gke", accelerator="h100", intent="training", os="ubuntu"),
]
#: Criteria with a value v0.11.1 does not know (aicr exits 8).
UNKNOWN = [
    (combo(service="lke", accelerator="h100", intent="training"), "service", "lke"),
    (combo(service="eks", accelerator="h200", intent="training"), "accelerator", "h200"),
    (combo(service="eks", accelerator="h100", intent="training", os="ol"), "os", "ol"),
    (combo(service="eks", accelerator="h100", intent="inference", os="ubuntu", platform="nim"), "platform", "nim"),
]


class RealAicrMissing(RuntimeError):
    """The release folder is not where ``AICR_TEST_RELEASES_DIR`` says."""


def releases_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    value = env.get(RELEASES_ENV, "")
    if not value:
        raise RealAicrMissing(
            f"{RELEASES_ENV} is not set: the real-aicr tests need the folder of aicr releases in GitHub's "
            f"layout ({TAG}/{ARCHIVE} and {TAG}/{CHECKSUMS}). scripts/test.sh sets it to "
            "<repo>/../shared/testdata/aicr-releases; outside it, export the variable"
        )
    return Path(value)


def release_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``<releases>/v0.11.1``, checked to hold the archive and its checksums."""
    root = releases_root(environ)
    folder = root / TAG
    missing = [name for name in (ARCHIVE, CHECKSUMS) if not (folder / name).is_file()]
    if missing:
        raise RealAicrMissing(
            f"{RELEASES_ENV}={root}: {folder} lacks {', '.join(missing)}; the real-aicr tests need aicr "
            f"{TAG} in GitHub's release layout there"
        )
    return folder


def component_charts_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The real component charts of the shared test data (``<chart>-<version>.tgz``):
    ``AICR_TEST_COMPONENT_CHARTS_DIR``, else ``component-charts`` beside the releases folder."""
    env = os.environ if environ is None else environ
    explicit = env.get("AICR_TEST_COMPONENT_CHARTS_DIR")
    folder = Path(explicit) if explicit else releases_root(environ).parent / "component-charts"
    if not (folder / "gpu-operator-v25.10.1.tgz").is_file():
        raise RealAicrMissing(f"{folder} holds no real component charts (set AICR_TEST_COMPONENT_CHARTS_DIR)")
    return folder


def recipe_charts_dir(dest: Path, environ: Mapping[str, str] | None = None) -> Path:
    """``dest`` filled with the charts of the recipe eks/h100/training/ubuntu as
    ``<chart>-<pinned version>.tgz``: the real ones, and the two stand-ins of
    ``not-pinned/`` under the pinned file names (skyhook-operator v0.13.1 for the
    pinned v0.14.0, which was not buildable from public source here; nvsentinel)."""
    import shutil

    real = component_charts_dir(environ)
    dest.mkdir(parents=True, exist_ok=True)
    for archive in real.glob("*.tgz"):
        (dest / archive.name).symlink_to(archive)
    shutil.copy(real / "not-pinned" / "skyhook-operator-v0.13.1.tgz", dest / "skyhook-operator-v0.14.0.tgz")
    (dest / "nvsentinel-v1.1.0.tgz").symlink_to(real / "not-pinned" / "nvsentinel-v1.1.0.tgz")
    return dest


def expected_archive_sha256(folder: Path) -> str:
    for line in (folder / CHECKSUMS).read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name.strip() == ARCHIVE:
            return digest.strip()
    raise RealAicrMissing(f"{folder / CHECKSUMS} has no line for {ARCHIVE}")


def extract_binary(dest: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The release's ``aicr`` in ``dest``, after its archive matched the checksums file."""
    folder = release_dir(environ)
    archive = folder / ARCHIVE
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    if actual != expected_archive_sha256(folder):
        raise RealAicrMissing(f"{archive}: sha256 {actual} does not match {folder / CHECKSUMS}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        member = tar.getmember("aicr")
        source = tar.extractfile(member)
        assert source is not None, f"{archive}: aicr is not a regular file"
        binary = dest / "aicr"
        binary.write_bytes(source.read())
    binary.chmod(0o755)
    return binary


@dataclass(frozen=True)
class AicrCall:
    """One finished aicr call."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class RealAicr:
    """The real binary, with a session cache of what its calls gave."""

    binary: Path
    workdir: Path
    _calls: dict[tuple[str, ...], AicrCall] = field(default_factory=dict)

    def run(self, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> AicrCall:
        """Run aicr (never cached); ``env`` is added to a minimal environment."""
        import time

        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir / "home")}
        started = time.monotonic()
        proc = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            cwd=cwd or self.workdir,
            env={**base, **(env or {})},
        )
        seconds = time.monotonic() - started
        return AicrCall((str(self.binary), *args), proc.returncode, proc.stdout, proc.stderr, seconds)

    def recipe(self, criteria: Mapping[str, str]) -> tuple[AicrCall, Path]:
        """``aicr --log-json recipe <criteria> --output <file>``, once per criteria
        in the session; the recipe file (absent when aicr refused)."""
        words = criteria_words(criteria)
        key = ("recipe", *words)
        output = self.workdir / "recipes" / ("_".join(words).replace("--", "") or "none") / "recipe.yaml"
        if key not in self._calls:
            output.parent.mkdir(parents=True, exist_ok=True)
            self._calls[key] = self.run("--log-json", "recipe", *words, "--output", str(output))
        return self._calls[key], output

    def bundle(self, criteria: Mapping[str, str]) -> tuple[AicrCall, Path]:
        """``aicr bundle`` of that recipe into a fresh directory, once per criteria."""
        call, recipe = self.recipe(criteria)
        assert call.exit_code == 0, f"aicr recipe {criteria} exited {call.exit_code}: {call.stderr[-2000:]}"
        key = ("bundle", *criteria_words(criteria))
        output = recipe.parent / "bundle"
        if key not in self._calls:
            self._calls[key] = self.run("--log-json", "bundle", "--recipe", str(recipe), "--output", str(output))
        return self._calls[key], output


def criteria_words(criteria: Mapping[str, str]) -> list[str]:
    words: list[str] = []
    for name in ("service", "accelerator", "intent", "os", "platform"):
        if criteria.get(name):
            words += [f"--{name}", criteria[name]]
    return words


class FolderMirror:
    """Serves a folder over HTTP the way a release mirror does (``<base>/<tag>/<file>``),
    recording each path asked for. ``host`` is where the server listens and what
    ``base_url`` names: loopback for local runs; a pod network passes its own."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.requests: list[str] = []
        #: Requests that ended in an error (a client hanging up mid-answer).
        self.errors: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that hangs up early (a download cut short) is not the
                # test's output: keep it instead of printing a traceback to stderr.
                mirror.errors.append(f"{client_address}: {sys.exc_info()[1]!r}")

        handler = functools.partial(Handler, directory=str(root))
        self._server = Server((host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FolderMirror:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
