"""Locate the pinned test tools, building them on first use.

``tool(name)`` returns the path of a tool from tools/versions.env. When the binary
is missing or its stamp does not match the pin, it runs
``scripts/bootstrap-tools.sh <target>`` (which builds or copies it from the
machine-wide cache) and then looks again. Tests never skip because a tool is
missing: either the bootstrap provides it or the test fails with the bootstrap's
own output.

etcd and kube-apiserver follow the envtest convention: when ``KUBEBUILDER_ASSETS``
names a directory holding both, those binaries win over the pinned builds
(kube-controller-manager too, when the directory holds it).

The floor's API server (KUBE_APISERVER_FLOOR_VERSION: the oldest Kubernetes minor
the chart supports) is the tool ``floor_apiserver_name()``, a name carrying its
minor (``kube-apiserver-1.33``); KUBEBUILDER_ASSETS never replaces it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "TOOLS_BIN",
    "BootstrapError",
    "argocd_crds",
    "floor_apiserver_name",
    "flux_crds",
    "npm_tarball",
    "pinned_versions",
    "report_crds",
    "sveltos_crds",
    "tool",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO_ROOT / ".tools" / "bin"
BOOTSTRAP = REPO_ROOT / "scripts" / "bootstrap-tools.sh"
VERSIONS_ENV = REPO_ROOT / "tools" / "versions.env"

#: tool name -> (bootstrap target, versions.env key of its pin or None)
_TOOLS: dict[str, tuple[str, str | None]] = {
    "helm": ("helm", "HELM_VERSION"),
    "helm3": ("helm3", "HELM3_VERSION"),
    "oras": ("oras", "ORAS_VERSION"),
    "actionlint": ("actionlint", "ACTIONLINT_VERSION"),
    "cosign": ("cosign", "COSIGN_VERSION"),
    "etcd": ("kube-apiserver", "ETCD_VERSION"),
    "kube-apiserver": ("kube-apiserver", "KUBERNETES_VERSION"),
    "kube-controller-manager": ("kube-controller-manager", "KUBERNETES_VERSION"),
    "kubectl": ("kubectl", "KUBERNETES_VERSION"),
    "kubelet": ("kubelet", "KUBERNETES_VERSION"),
    "kube-scheduler": ("kube-scheduler", "KUBERNETES_VERSION"),
    "pause": ("pause", "PAUSE_VERSION"),
    "source-controller": ("source-controller", "SOURCE_CONTROLLER_VERSION"),
    "helm-controller": ("helm-controller", "HELM_CONTROLLER_VERSION"),
    "aicr": ("aicr", "AICR_VERSION"),
    "kube-state-metrics": ("kube-state-metrics", "KUBE_STATE_METRICS_VERSION"),
    "promtool": ("promtool", "PROMETHEUS_VERSION"),
    "node-exporter": ("node-exporter", "NODE_EXPORTER_VERSION"),
    "nfd-master": ("nfd-master", "NFD_VERSION"),
    "nfd-worker": ("nfd-worker", "NFD_VERSION"),
    "nfd-gc": ("nfd-gc", "NFD_VERSION"),
    "prometheus-operator": ("prometheus-operator", "PROMETHEUS_OPERATOR_VERSION"),
    "prometheus-config-reloader": ("prometheus-config-reloader", "PROMETHEUS_OPERATOR_VERSION"),
    "prometheus": ("prometheus", "PROMETHEUS_SERVER_VERSION"),
    "alertmanager": ("alertmanager", "ALERTMANAGER_VERSION"),
    "amtool": ("amtool", "ALERTMANAGER_VERSION"),
    "prometheus-adapter": ("prometheus-adapter", "PROMETHEUS_ADAPTER_VERSION"),
    # Debian packages: found on PATH after the bootstrap installed them.
    "docker-registry": ("debian", None),
    "htpasswd": ("debian", None),
    "podman": ("debian", None),
    "runc": ("debian", None),
    "jq": ("debian", None),
    "containerd": ("debian", None),
    "ctr": ("debian", None),
    "iptables": ("debian", None),
}
_ENVTEST = ("etcd", "kube-apiserver")


class BootstrapError(RuntimeError):
    """The bootstrap ran but the tool is still not there."""


@functools.cache
def pinned_versions() -> dict[str, str]:
    """KEY=VALUE pairs of tools/versions.env (quotes stripped, comments skipped)."""
    pins: dict[str, str] = {}
    for raw in VERSIONS_ENV.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        pins[key.strip()] = value.strip().strip("'\"")
    return pins


def floor_apiserver_name() -> str:
    """``kube-apiserver-<minor>`` of KUBE_APISERVER_FLOOR_VERSION (the bootstrap's name for it)."""
    major, minor, _ = pinned_versions()["KUBE_APISERVER_FLOOR_VERSION"].removeprefix("v").split(".", 2)
    return f"kube-apiserver-{major}.{minor}"


def _entry(name: str) -> tuple[str, str | None]:
    """(bootstrap target, pin key) of ``name``; KeyError for an unknown tool."""
    if name == floor_apiserver_name():
        return ("kube-apiserver-floor", "KUBE_APISERVER_FLOOR_VERSION")
    if name not in _TOOLS:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(sorted([*_TOOLS, floor_apiserver_name()]))}")
    return _TOOLS[name]


def _envtest_asset(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not assets:
        return None
    base = Path(assets)
    if all(os.access(base / n, os.X_OK) for n in _ENVTEST):
        return base / name
    return None


def _located(name: str) -> Path | None:
    target, pin_key = _entry(name)
    if target == "debian":
        found = shutil.which(name)
        return Path(found) if found else None
    path = TOOLS_BIN / name
    stamp = TOOLS_BIN / f".{name}.version"
    if not os.access(path, os.X_OK) or not stamp.is_file():
        return None
    if pin_key is not None and stamp.read_text().strip() != pinned_versions()[pin_key]:
        return None
    return path


def _bootstrap(target: str) -> str:
    proc = subprocess.run(
        ["bash", str(BOOTSTRAP), target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise BootstrapError(f"scripts/bootstrap-tools.sh {target} failed (exit {proc.returncode}):\n{output}")
    return output


@functools.cache
def _tool(name: str) -> Path:
    target, _ = _entry(name)
    if name in _ENVTEST and (asset := _envtest_asset(name)) is not None:
        return asset
    if name == "kube-controller-manager":
        kcm = _envtest_asset(name)
        if kcm is not None and os.access(kcm, os.X_OK):
            return kcm
    path = _located(name)
    if path is not None:
        return path
    output = _bootstrap(target)
    path = _located(name)
    if path is None:
        raise BootstrapError(f"{name}: scripts/bootstrap-tools.sh {target} did not provide it:\n{output}")
    return path


def tool(name: str) -> Path:
    """Absolute path of the pinned tool ``name``, bootstrapping it when needed."""
    return _tool(name)


@functools.cache
def npm_tarball() -> Path:
    """The cached npm tarball of SIGSTORE_NPM_PACKAGE (real Sigstore test material)."""
    spec = pinned_versions()["SIGSTORE_NPM_PACKAGE"]
    name, _, version = spec.rpartition("@")
    path = REPO_ROOT / ".tools" / "npm" / f"{name}-{version}.tgz"
    if not path.is_file():
        output = _bootstrap("npm")
        if not path.is_file():
            raise BootstrapError(f"{spec}: scripts/bootstrap-tools.sh npm did not provide {path}:\n{output}")
    return path


def _crd_directory(target: str, want: str) -> Path:
    """``.tools/<target>``, copied by the bootstrap and stamped with ``want``."""
    directory = REPO_ROOT / ".tools" / target
    stamp = directory / ".version"
    if not stamp.is_file() or stamp.read_text() != want:
        output = _bootstrap(target)
        if not stamp.is_file() or stamp.read_text() != want:
            raise BootstrapError(
                f"{target} {want}: scripts/bootstrap-tools.sh {target} did not provide them:\n{output}"
            )
    return directory


@functools.cache
def flux_crds() -> Path:
    """The directory of Flux's CRDs at the pinned source-, helm- and kustomize-controller versions."""
    pins = pinned_versions()
    return _crd_directory(
        "flux-crds",
        f"{pins['SOURCE_CONTROLLER_VERSION']} {pins['HELM_CONTROLLER_VERSION']} {pins['KUSTOMIZE_CONTROLLER_VERSION']}",
    )


@functools.cache
def argocd_crds() -> Path:
    """The directory of Argo CD's CRDs (Application, AppProject, ApplicationSet) at the pinned version."""
    return _crd_directory("argocd-crds", pinned_versions()["ARGOCD_VERSION"])


@functools.cache
def sveltos_crds() -> Path:
    """The directory holding Sveltos' HealthCheck CRD at the pinned libsveltos version."""
    return _crd_directory("sveltos-crds", pinned_versions()["LIBSVELTOS_VERSION"])


@functools.cache
def nfd_config() -> Path:
    """The directory holding NFD's worker configuration example (``nfd-worker.conf``) at the pinned version."""
    return _crd_directory("nfd-config", pinned_versions()["NFD_VERSION"])


@functools.cache
def report_crds() -> Path:
    """The report CRDs at the pinned versions: ``openreports/`` (Report, ClusterReport
    from the reports-api module) and ``wgpolicy/`` (PolicyReport, ClusterPolicyReport
    from Kyverno's module)."""
    pins = pinned_versions()
    return _crd_directory("report-crds", f"{pins['OPENREPORTS_VERSION']} {pins['KYVERNO_VERSION']}")
