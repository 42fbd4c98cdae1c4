"""Image references in rendered manifests, and in the custom resources operators read.

Three sources, each a fact of a chart or operator version, never a guess from
strings that merely look like images:

* pod templates of every workload kind (containers, init containers, ephemeral
  containers), hook objects included (``helm template`` renders hooks);
* the GPU Operator's ``ClusterPolicy`` (nvidia.com/v1): the operator composes each
  operand's image from ``repository``/``image``/``version`` (its ``ImagePath``),
  and appends ``-<os ID><VERSION_ID>`` to the driver, GDS, GDRCopy and vGPU
  manager tags (``resolveDriverTag``, gpu-operator v25.10.1);
* kai-scheduler's ``Config`` (kai.scheduler/v1): each service's
  ``{name, repository, tag}`` (KAI-Scheduler v0.13.0's operator builds
  ``repository/name:tag``);
* prometheus-operator's ``Prometheus``, ``Alertmanager``, ``ThanosRuler`` and
  ``PrometheusAgent`` (monitoring.coreos.com/v1): ``spec.image`` (and a Thanos
  sidecar's ``spec.thanos.image``), and the config-reloader sidecar the operator
  adds to each, named by its ``--prometheus-config-reloader=`` argument.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Found", "OsRelease", "images_in_documents", "normalize"]

#: Where the pod spec sits in each workload kind.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
#: Container arguments that name an image the program starts (an operator's sidecar).
_IMAGE_ARGS = ("--prometheus-config-reloader=",)
#: prometheus-operator's kinds whose pods the operator creates from ``spec.image``.
_MONITORING_KINDS = frozenset({"Prometheus", "Alertmanager", "ThanosRuler", "PrometheusAgent"})

#: ClusterPolicy operands the operator deploys when their ``enabled`` is not false.
_DEFAULT_ON = ("driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "migManager")
#: Operands deployed only when ``enabled: true`` is written.
_DEFAULT_OFF = ("dcgm", "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager")
#: Operands of sandbox (VM passthrough) workloads: only with ``sandboxWorkloads.enabled``.
_SANDBOX = ("vfioManager", "sandboxDevicePlugin", "vgpuDeviceManager", "kataManager", "ccManager")
#: Operands whose tag the operator suffixes with the node's OS (``-ubuntu24.04``).
_OS_SUFFIXED = frozenset({"driver", "gds", "gdrcopy", "vgpuManager"})


@dataclass(frozen=True)
class OsRelease:
    """The nodes' OS (``/etc/os-release`` ID and VERSION_ID), from the recipe's constraints."""

    id: str
    version_id: str


@dataclass(frozen=True)
class Found:
    image: str
    #: Where it was found, e.g. ``DaemonSet/gpu-operator/nvidia-dcgm`` or ``ClusterPolicy spec.driver``.
    where: str
    note: str = ""


def normalize(ref: str) -> str:
    """The fully qualified reference a container runtime pulls: ``busybox:1.37`` is
    ``docker.io/library/busybox:1.37``; no tag and no digest is ``:latest``."""
    ref = ref.strip()
    first, slash, _ = ref.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        ref = f"docker.io/{ref}" if slash else f"docker.io/library/{ref}"
    last = ref.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        ref += ":latest"
    return ref


def _dig(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _name(doc: Mapping[str, Any]) -> str:
    meta: Mapping[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), Mapping) else {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{doc.get('kind')}/{namespace}{meta.get('name', '')}"


def _pod_images(doc: Mapping[str, Any]) -> Iterator[Found]:
    spec = _dig(doc, _POD_SPEC_PATHS[str(doc.get("kind"))])
    if not isinstance(spec, Mapping):
        return
    hook = _dig(doc, ("metadata", "annotations", "helm.sh/hook"))
    as_hook = f", helm hook {hook}" if hook else ""
    for field in _CONTAINER_LISTS:
        for container in spec.get(field) or ():
            if isinstance(container, Mapping) and isinstance(container.get("image"), str) and container["image"]:
                where = f"{_name(doc)} {field}[{container.get('name', '')}]{as_hook}"
                yield Found(normalize(container["image"]), where)
                yield from _image_args(container, where)


def _image_args(container: Mapping[str, Any], where: str) -> Iterator[Found]:
    for arg in container.get("args") or ():
        for flag in _IMAGE_ARGS:
            if isinstance(arg, str) and arg.startswith(flag) and arg[len(flag) :]:
                yield Found(normalize(arg[len(flag) :]), f"{where} {flag.rstrip('=')}")


def _monitoring_images(doc: Mapping[str, Any]) -> Iterator[Found]:
    for path in (("spec", "image"), ("spec", "thanos", "image")):
        image = _dig(doc, path)
        if isinstance(image, str) and image:
            yield Found(normalize(image), f"{_name(doc)} {'.'.join(path)}")


def _compose(spec: Mapping[str, Any]) -> str | None:
    """gpu-operator's ``ImagePath``: ``image`` verbatim when repository and version
    are empty, else ``repository/image:version`` (``@version`` for a digest)."""
    image, repository, version = (str(spec.get(k) or "") for k in ("image", "repository", "version"))
    if not image:
        return None
    if not repository and not version:
        return image
    joined = f"{repository}/{image}" if repository else image
    return f"{joined}@{version}" if version.startswith("sha256:") else f"{joined}:{version}"


def _operand_on(spec: Mapping[str, Any], operand: str, policy: Mapping[str, Any]) -> bool:
    enabled = _dig(policy, (operand, "enabled"))
    if operand in _SANDBOX:
        return _dig(policy, ("sandboxWorkloads", "enabled")) is True and enabled is not False
    if operand in _DEFAULT_OFF:
        return enabled is True
    return enabled is not False


def _cluster_policy_images(doc: Mapping[str, Any], os_release: OsRelease | None) -> Iterator[Found]:
    policy = doc.get("spec")
    if not isinstance(policy, Mapping):
        return
    wanted = [
        ("operator.initContainer", _dig(policy, ("operator", "initContainer"))),
        ("validator", policy.get("validator")),
    ]
    for operand in (*_DEFAULT_ON, *_DEFAULT_OFF, *_SANDBOX):
        if isinstance(policy.get(operand), Mapping) and _operand_on(policy, operand, policy):
            wanted.append((operand, policy[operand]))
            if operand == "driver":
                wanted.append(("driver.manager", _dig(policy, ("driver", "manager"))))
    for operand, spec in wanted:
        image = _compose(spec) if isinstance(spec, Mapping) else None
        if image is None:
            continue
        where = f"ClusterPolicy spec.{operand}"
        if operand in _OS_SUFFIXED and "sha256:" not in image:
            yield _os_suffixed(image, where, os_release, precompiled=_dig(spec, ("usePrecompiled",)) is True)
        else:
            yield Found(normalize(image), where)


def _os_suffixed(image: str, where: str, os_release: OsRelease | None, *, precompiled: bool) -> Found:
    """The tag the operator pulls on a node: ``<version>-<ID><VERSION_ID>``."""
    if precompiled:
        return Found(normalize(image), where, "precompiled driver: the tag also names each node's kernel")
    if os_release is None:
        return Found(normalize(image), where, "the operator appends -<os><version> of each node to this tag")
    return Found(normalize(f"{image}-{os_release.id}{os_release.version_id}"), where)


def _kai_config_images(doc: Mapping[str, Any]) -> Iterator[Found]:
    """Every ``{name, repository, tag}`` mapping under the Config's spec."""

    def walk(node: Any, path: str) -> Iterator[Found]:
        if isinstance(node, Mapping):
            if all(isinstance(node.get(k), str) and node.get(k) for k in ("name", "repository", "tag")):
                yield Found(normalize(f"{node['repository']}/{node['name']}:{node['tag']}"), f"Config {path}")
                return
            for key, value in node.items():
                yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{path}[{i}]")

    yield from walk(doc.get("spec"), "spec")


def images_in_documents(documents: list[Any], os_release: OsRelease | None = None) -> list[Found]:
    """Every image the objects name or make an operator start, in document order."""
    found: list[Found] = []
    for doc in documents:
        if not isinstance(doc, Mapping):
            continue
        kind, api = str(doc.get("kind", "")), str(doc.get("apiVersion", ""))
        if kind in _POD_SPEC_PATHS:
            found.extend(_pod_images(doc))
        elif kind == "ClusterPolicy" and api.startswith("nvidia.com/"):
            found.extend(_cluster_policy_images(doc, os_release))
        elif kind in _MONITORING_KINDS and api.startswith("monitoring.coreos.com/"):
            found.extend(_monitoring_images(doc))
        elif kind == "Config" and api.startswith("kai.scheduler/"):
            found.extend(_kai_config_images(doc))
        elif kind == "List":
            found.extend(images_in_documents(list(doc.get("items") or ()), os_release))
    return found
