"""Flux's source-controller and helm-controller against the e2e API server.

Both are built from their Go modules (tools/versions.env) and run as processes on
loopback, as cluster admin (the admin kubeconfig), without leader election:

- source-controller: stores artifacts under a temp directory
  (``--storage-path``) and serves them on a loopback port (``--storage-addr``,
  advertised to helm-controller as ``--storage-adv-addr``; only helm-controller,
  on this host, reads it: no pod does);
- helm-controller: fetches the chart artifact from there and runs Helm (v4, the
  Helm its module links) against the API server.

Metrics and health listen on loopback ports; readiness is each controller's
``/readyz``. Their CRDs come from the same module versions (``.tools/flux-crds``)
and are applied before the controllers start.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import Kube, KubeError
from e2e.harness.procs import ManagedProcess, free_port, wait_for
from e2e.harness.tools import tool

__all__ = ["Flux", "apply", "condition", "get", "install_crds", "resource_path", "start_flux"]

#: (apiVersion, kind) -> plural, for the objects the Flux scenarios apply.
_PLURALS = {
    ("v1", "Secret"): "secrets",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Namespace"): "namespaces",
    ("source.toolkit.fluxcd.io/v1", "OCIRepository"): "ocirepositories",
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"): "helmreleases",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "customresourcedefinitions",
}


def resource_path(doc: Mapping[str, Any]) -> str:
    """The API path of ``doc`` (an object with apiVersion, kind and metadata)."""
    api_version, kind = doc["apiVersion"], doc["kind"]
    try:
        plural = _PLURALS[(api_version, kind)]
    except KeyError:
        raise KeyError(f"no API path known for {api_version} {kind}") from None
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = doc["metadata"].get("namespace")
    scope = f"/namespaces/{namespace}" if namespace and kind != "Namespace" else ""
    return f"{prefix}{scope}/{plural}/{doc['metadata']['name']}"


def apply(client: Kube, doc: Mapping[str, Any], *, manager: str = "e2e") -> dict[str, Any]:
    """Server-side apply (``kubectl apply --server-side``) of one object."""
    path = resource_path(doc)
    return client.request(
        "PATCH",
        f"{path}?fieldManager={quote(manager)}&force=true",
        dict(doc),
        content_type="application/apply-patch+yaml",
    )


def install_crds(plane: ControlPlane, crds: Path | Iterable[Path], *, timeout: float = 60.0) -> list[str]:
    """Apply every CRD in ``crds`` (a directory of YAML files, or the files) and
    wait until each is Established."""
    names = []
    for path in sorted(crds.glob("*.yaml")) if isinstance(crds, Path) else crds:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                apply(plane.admin, doc)
                names.append(str(doc["metadata"]["name"]))

    def established() -> bool | None:
        for name in names:
            crd = plane.admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") != "True":
                return None
        return True

    wait_for(established, timeout=timeout, what=f"CRDs {', '.join(names)} Established")
    return names


@dataclass
class Flux:
    storage: Path
    storage_address: str  # host:port where source-controller serves artifacts
    processes: list[ManagedProcess] = field(default_factory=list)
    crds: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(f"--- {p.name}:\n{p.log_tail(lines)}" for p in self.processes)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop(grace=5)
        self.processes.clear()


def _ready(port: int) -> bool | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
        return True if resp.status == 200 else None


def start_flux(plane: ControlPlane, workdir: Path, crd_folder: Path, *, timeout: float = 90.0) -> Flux:
    """Install Flux's CRDs (the YAML files in ``crd_folder``, of the controllers'
    versions), start source-controller and helm-controller, and return once both
    answer /readyz."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    crds = install_crds(plane, crd_folder)
    storage = workdir / "source-controller-storage"
    storage.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KUBECONFIG": str(plane.kubeconfig), "HOME": str(workdir)}
    storage_port = free_port()
    flux = Flux(storage=storage, storage_address=f"127.0.0.1:{storage_port}", crds=crds)
    specs = {
        "source-controller": [
            f"--storage-path={storage}",
            f"--storage-addr=127.0.0.1:{storage_port}",
            f"--storage-adv-addr=127.0.0.1:{storage_port}",
        ],
        "helm-controller": [],
    }
    try:
        for name, extra in specs.items():
            health, metrics = free_port(), free_port()
            proc = ManagedProcess(
                name,
                [
                    tool(name),
                    "--enable-leader-election=false",
                    f"--health-addr=127.0.0.1:{health}",
                    f"--metrics-addr=127.0.0.1:{metrics}",
                    "--log-level=debug",
                    *extra,
                ],
                workdir / f"{name}.log",
                env=env,
                cwd=workdir,
            )
            flux.processes.append(proc)
            proc.wait_ready(partial(_ready, health), timeout=timeout, what=f"{name} /readyz")
    except BaseException:
        flux.stop()
        raise
    flux.startup_seconds = time.monotonic() - started
    return flux


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type ``kind``, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


def get(client: Kube, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return client.get(resource_path(doc))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
