"""Building blocks of the end-to-end scenarios (e2e/test_scenarios.py).

Component charts: tiny charts that hold only ConfigMaps (no kubelet is needed for
them), packaged with ``helm package`` and pushed with ``helm push`` to the
session registry, so the bundle's deploy.sh installs them with the real helm.

Org pack: a data pack that registers the private service value ``acme`` and
whose components are those charts. Each scenario writes its own pack, with the
components placed in a namespace of their own, so what a scenario deployed (or
did not) can be told apart from every other scenario's releases.

Release mirror: an HTTP server on ``pod_host`` (the node's bridge address, where
the pods reach this host) that serves an aicr release the way GitHub does
(``<base>/<tag>/aicr_<ver>_linux_<arch>.tar.gz`` and ``aicr_checksums.txt``),
with faults on request: a wrong checksum, connection resets, 503 with
Retry-After.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet
from e2e.harness.registry import Registry
from e2e.tools import REPO_ROOT
from tests.fake_aicr.packs import write_pack

__all__ = [
    "ACME_CRITERIA",
    "CHART",
    "COMPONENT_CHARTS",
    "PACK_AUTH_FILE",
    "RELEASE",
    "ReleaseMirror",
    "RunResults",
    "checksums_file",
    "closed_port",
    "embedded_base_components",
    "extra_env",
    "push_component_charts",
    "release_archive",
    "releases_in",
    "wait_for_job_end",
    "write_org_pack",
]

CHART = REPO_ROOT / "chart"
#: The release name every scenario installs the chart under.
RELEASE = "nvidia-aicr"
ACME_CRITERIA: dict[str, str] = {"service": "acme", "accelerator": "h100", "intent": "training"}
#: Where the chart mounts the dataPackSecret's .dockerconfigjson in the pod.
PACK_AUTH_FILE = "/etc/aicr-runner/pack-auth/config.json"
#: name -> version of the component charts the org pack installs.
COMPONENT_CHARTS = {"acme-agent": "1.0.0", "acme-config": "0.3.1"}
FAKE_AICR_EMBEDDED = REPO_ROOT / "tests" / "fake_aicr" / "embedded.yaml"


# -- component charts ---------------------------------------------------------------------


def _write_component_chart(root: Path, name: str, version: str) -> Path:
    """A chart whose only object is a ConfigMap holding its values."""
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": name,
                "description": f"{name}: one ConfigMap (end-to-end scenarios)",
                "type": "application",
                "version": version,
                "appVersion": version,
            },
            sort_keys=False,
        )
    )
    (root / "values.yaml").write_text("replicas: 1\nmode: default\n")
    (root / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: {{ .Release.Name }}-settings\n"
        "data:\n"
        "  chart: {{ .Chart.Name }}-{{ .Chart.Version }}\n"
        "  replicas: {{ .Values.replicas | quote }}\n"
        "  mode: {{ .Values.mode | quote }}\n"
    )
    return root


def push_component_charts(helm: Helm, registry: Registry, workdir: Path) -> str:
    """Package every component chart and push it with ``helm push`` (plain HTTP,
    the registry's credentials); returns the OCI repository they live in."""
    repository = f"oci://{registry.host}/charts"
    for name, version in COMPONENT_CHARTS.items():
        source = _write_component_chart(workdir / "src" / name, name, version)
        helm.run("package", str(source), "--destination", str(workdir / "packages"))
        package = workdir / "packages" / f"{name}-{version}.tgz"
        helm.run(
            "push",
            str(package),
            repository,
            "--plain-http",
            "--username",
            registry.username,
            "--password",
            registry.password,
        )
    return repository


def embedded_base_components() -> list[str]:
    """The components of the fake aicr's embedded ``base`` overlay: every recipe
    carries them, org pack or not."""
    embedded = yaml.safe_load(FAKE_AICR_EMBEDDED.read_text())
    base = next(o for o in embedded["overlays"] if o["name"] == "base")
    return [str(ref["name"]) for ref in base["componentRefs"]]


# -- the org pack -------------------------------------------------------------------------


def write_org_pack(
    root: Path,
    *,
    chart_repository: str,
    namespace: str,
    accelerators: tuple[str, ...] = ("h100",),
    charts: Mapping[str, str] = COMPONENT_CHARTS,
) -> Path:
    """A pack registering ``service: acme`` (overlay apiVersion aicr.run/v1beta1)
    with the component ``charts`` (name -> version; acme-agent first), installed
    into ``namespace``: one overlay ``acme-<accelerator>-training`` per
    accelerator. The others depend on acme-agent; its values come from the pack."""
    return write_pack(
        root,
        components=[
            {
                "name": name,
                "helm": {
                    "defaultRepository": chart_repository,
                    "defaultChart": name,
                    "defaultVersion": version,
                    "defaultNamespace": namespace,
                },
            }
            for name, version in charts.items()
        ],
        overlays={
            f"acme-{accelerator}-training": {
                "criteria": {**ACME_CRITERIA, "accelerator": accelerator},
                "constraints": [{"name": "K8s.server.version", "value": ">= 1.31"}],
                "componentRefs": [
                    {"name": "acme-agent", "type": "Helm", "valuesFile": "components/acme-agent/values.yaml"},
                    *(
                        {"name": name, "type": "Helm", "dependencyRefs": ["acme-agent"]}
                        for name in charts
                        if name != "acme-agent"
                    ),
                ],
                "validation": {"deployment": {"checks": ["operator-health", "acme-agent-ready"]}},
            }
            for accelerator in accelerators
        },
        files={"components/acme-agent/values.yaml": "replicas: 3\nmode: from-the-pack\n"},
    )


def extra_env(**variables: str) -> list[dict[str, str]]:
    """``job.extraEnv`` entries (how FAKE_AICR_* knobs reach aicr and deploy.sh)."""
    return [{"name": k, "value": v} for k, v in variables.items()]


# -- results in the API server ------------------------------------------------------------


@dataclass
class RunResults:
    """What a run left in its namespace."""

    plane: ControlPlane
    namespace: str

    def configmap(self, name: str) -> dict[str, Any] | None:
        return self.plane.configmap(self.namespace, name)

    def data(self, name: str) -> dict[str, str]:
        cm = self.configmap(name)
        assert cm is not None, f"ConfigMap {self.namespace}/{name} does not exist"
        return dict(cm.get("data") or {})

    def binary(self, name: str) -> dict[str, bytes]:
        import base64

        cm = self.configmap(name)
        assert cm is not None, f"ConfigMap {self.namespace}/{name} does not exist"
        return {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}

    def report(self) -> dict[str, Any]:
        return dict(json.loads(self.data("aicr-run-status")["report.json"]))

    def statuses(self) -> dict[str, str]:
        return {s["state"]: s["status"] for s in self.report()["steps"]}

    def step(self, state: str) -> dict[str, Any]:
        return dict(next(s for s in self.report()["steps"] if s["state"] == state))

    def configmap_names(self) -> set[str]:
        items = self.plane.admin.get(f"/api/v1/namespaces/{self.namespace}/configmaps")["items"]
        return {i["metadata"]["name"] for i in items}


def releases_in(helm: Helm, namespace: str) -> dict[str, dict[str, Any]]:
    """Every Helm release of every state in ``namespace``, by name, as ``helm list -A`` shows them."""
    return {r["name"]: r for r in helm.list_releases() if r["namespace"] == namespace}


def wait_for_job_end(kubelet: Kubelet, namespace: str, *, timeout: float = 120.0) -> tuple[str, str]:
    """The release's Job once the Job controller has finished it: ("Complete" |
    "Failed", reason). Called when its last pod has ended, so this waits for the
    controller to act on that, and asserts that no other pod of the Job appeared."""
    job = kubelet.find_job(RELEASE, namespace)
    ended = kubelet.wait_for_job_end(job, timeout=timeout)
    assert kubelet.next_pod(job) is None, "the Job ran another pod"
    return ended


# -- the release mirror ---------------------------------------------------------------------


class ReleaseMirror:
    """Serves ``/<tag>/<archive>`` and ``/<tag>/aicr_checksums.txt`` on ``host``
    (``pod_host``: the pods reach it there, not on loopback).

    ``faults[path]`` lists what happens to the next requests of that path, in
    order: ``"reset"`` (the connection is torn down with a TCP RST before any
    answer) or ``"503"`` (503 with ``Retry-After: 1``); once the list is used up
    the file is served. ``requests`` records every request and what it got.
    """

    def __init__(self, files: Mapping[str, bytes], *, host: str) -> None:
        self.files = dict(files)
        self.faults: dict[str, list[str]] = {}
        self.requests: list[tuple[str, str, float]] = []  # (path, what was done, time.monotonic())
        self._lock = threading.Lock()
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with mirror._lock:
                    pending = mirror.faults.get(self.path) or []
                    action = pending.pop(0) if pending else "serve"
                    mirror.requests.append((self.path, action, time.monotonic()))
                if action == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if action == "503":
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = mirror.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def served(self, path: str) -> list[str]:
        """What each request of ``path`` got, in order."""
        with self._lock:
            return [action for p, action, _ in self.requests if p == path]

    def times(self, path: str) -> list[float]:
        """When each request of ``path`` arrived (time.monotonic())."""
        with self._lock:
            return [at for p, _, at in self.requests if p == path]

    def __enter__(self) -> ReleaseMirror:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


#: What the fake release carries as its attestation unless told otherwise: the
#: fake aicr has no real provenance (scenarios run with aicrProvenance.mode=off).
PLACEHOLDER_ATTESTATION = b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}\n'


def release_archive(launcher: Path, *, attestation: bytes = PLACEHOLDER_ATTESTATION) -> bytes:
    """``aicr_<ver>_linux_<arch>.tar.gz`` as goreleaser lays it out: the binary
    (here ``launcher``), its Sigstore attestation, README and LICENSE."""
    buffer = io.BytesIO()
    members = {
        "aicr": (launcher.read_bytes(), 0o755),
        "aicr-attestation.sigstore.json": (attestation, 0o644),
        "README.md": (b"# aicr (fake, end-to-end scenarios)\n", 0o644),
        "LICENSE": (b"Apache-2.0\n", 0o644),
    }
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, (content, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = mode
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def checksums_file(entries: Mapping[str, bytes | str]) -> bytes:
    """A goreleaser ``aicr_checksums.txt``: ``<sha256>  <name>`` per line; a str
    value is written as the digest verbatim (to serve a wrong one)."""
    lines = []
    for name, content in entries.items():
        digest = content if isinstance(content, str) else hashlib.sha256(content).hexdigest()
        lines.append(f"{digest}  {name}\n")
    return "".join(lines).encode()


@contextlib.contextmanager
def closed_port(host: str) -> Iterator[int]:
    """A port of ``host`` nothing listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = int(probe.getsockname()[1])
    yield port
