"""Pod spec translation: volumes (secret, configMap, projected, downwardAPI), env, identity."""

from __future__ import annotations

import datetime as dt
import os
from base64 import b64decode
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.harness.kube import KubeError
from e2e.harness.kubelet.model import NODE_NAME, PodSpecUnsupported, _PodStartFailure, expand
from e2e.harness.sandbox import Identity


class _SpecMixin:
    """Turns a pod's volumes, env and securityContext into host files, env and an identity."""

    # -- volumes --------------------------------------------------------------
    def _materialise_volumes(self, pod: Mapping[str, Any], pod_dir: Path) -> dict[str, tuple[Path, bool]]:
        """volume name -> (host directory, read-only by kind)."""
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        out: dict[str, tuple[Path, bool]] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            path = pod_dir / "volumes" / name
            path.mkdir(parents=True)
            if "emptyDir" in volume:
                path.chmod(0o777)  # the kubelet creates emptyDirs world-writable
                out[name] = (path, False)
                self._own(path, fs_group, read_only=False)
                continue
            files: dict[str, tuple[bytes, int]]
            if "secret" in volume:
                src = volume["secret"]
                files = self._source_files(pod, "secret", src["secretName"], src, src.get("defaultMode", 0o644))
            elif "configMap" in volume:
                src = volume["configMap"]
                files = self._source_files(pod, "configMap", src["name"], src, src.get("defaultMode", 0o644))
            elif "projected" in volume:
                files = self._projected_files(pod, volume["projected"])
            elif "downwardAPI" in volume:
                src = volume["downwardAPI"]
                files = self._downward_files(pod, src.get("items") or [], src.get("defaultMode", 0o644))
            else:
                kind = next(k for k in volume if k != "name")
                raise PodSpecUnsupported(f"volume {name!r} of type {kind}")
            _atomic_write(path, files)
            self._own(path, fs_group, read_only=True)
            out[name] = (path, True)
        return out

    @staticmethod
    def _own(path: Path, fs_group: int | None, *, read_only: bool) -> None:
        """What the kubelet's SetVolumeOwnership does for an fsGroup."""
        if fs_group is None or os.geteuid() != 0:
            return
        mask = 0o440 if read_only else 0o660
        for root, dirs, files in os.walk(path):
            for entry in [root, *[os.path.join(root, f) for f in files + dirs]]:
                if os.path.islink(entry):
                    continue
                os.chown(entry, 0, fs_group)
                mode = os.stat(entry).st_mode & 0o7777
                extra = mask | (0o2110 if os.path.isdir(entry) else 0)
                os.chmod(entry, mode | extra)

    def _get_object(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        plural = "secrets" if kind == "secret" else "configmaps"
        try:
            return self.plane.admin.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def _data(kind: str, obj: Mapping[str, Any]) -> dict[str, bytes]:
        if kind == "secret":
            return {k: b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return data

    def _source_files(
        self, pod: Mapping[str, Any], kind: str, name: str, src: Mapping[str, Any], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        obj = self._get_object(pod["metadata"]["namespace"], kind, name)
        if obj is None:
            if src.get("optional"):
                return {}
            raise _PodStartFailure("FailedMount", f'{kind} "{name}" not found')
        data = self._data(kind, obj)
        items = src.get("items")
        if not items:
            return {k: (v, default_mode) for k, v in data.items()}
        files = {}
        for item in items:
            if item["key"] not in data:
                if src.get("optional"):
                    continue
                raise _PodStartFailure("FailedMount", f'{kind} "{name}": key "{item["key"]}" not found')
            files[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
        return files

    def _projected_files(self, pod: Mapping[str, Any], projected: Mapping[str, Any]) -> dict[str, tuple[bytes, int]]:
        default_mode = projected.get("defaultMode", 0o644)
        files: dict[str, tuple[bytes, int]] = {}
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = self._pod_token(
                    pod,
                    sat.get("expirationSeconds", 3600),
                    [sat["audience"]] if sat.get("audience") else None,
                )
                files[sat["path"]] = (token.encode(), default_mode)
            elif "secret" in source or "configMap" in source:
                kind = "secret" if "secret" in source else "configMap"
                src = source[kind]
                files.update(self._source_files(pod, kind, src["name"], src, default_mode))
            elif "downwardAPI" in source:
                files.update(self._downward_files(pod, source["downwardAPI"].get("items") or [], default_mode))
            else:
                raise PodSpecUnsupported(f"projected source {next(iter(source))}")
        return files

    def _downward_files(
        self, pod: Mapping[str, Any], items: Sequence[Mapping[str, Any]], default_mode: int
    ) -> dict[str, tuple[bytes, int]]:
        files = {}
        for item in items:
            if "fieldRef" not in item:
                raise PodSpecUnsupported("downwardAPI resourceFieldRef")
            value = _field_value(pod, item["fieldRef"]["fieldPath"], volume=True)
            files[item["path"]] = (value.encode(), item.get("mode", default_mode))
        return files

    def _pod_token(self, pod: Mapping[str, Any], seconds: int, audiences: list[str] | None) -> str:
        """A token bound to the Pod object, like the kubelet requests."""
        meta = pod["metadata"]
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if audiences:
            spec["audiences"] = audiences
        sa = pod["spec"].get("serviceAccountName") or "default"
        review = self.plane.admin.create(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(review["status"]["token"])

    # -- environment ----------------------------------------------------------
    def service_env(self) -> dict[str, str]:
        """The variables every container gets for the ``kubernetes`` Service."""
        host, port = self.plane.host, str(self.plane.port)
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
        }

    def container_env(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet computes it (image env not included)."""
        namespace = pod["metadata"]["namespace"]
        service = self.service_env()
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind = "configMap" if "configMapRef" in source else "secret"
            ref = source["configMapRef" if kind == "configMap" else "secretRef"]
            obj = self._get_object(namespace, kind, ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise _PodStartFailure("CreateContainerConfigError", f'{kind} "{ref["name"]}" not found')
            for key, value in self._data(kind, obj).items():
                env[source.get("prefix", "") + key] = value.decode()
        for var in container.get("env") or []:
            name = var["name"]
            if "valueFrom" not in var:
                env[name] = expand(var.get("value", ""), env, service)
                continue
            value_from = var["valueFrom"]
            if "fieldRef" in value_from:
                env[name] = _field_value(pod, value_from["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in value_from or "configMapKeyRef" in value_from:
                kind = "secret" if "secretKeyRef" in value_from else "configMap"
                ref = value_from["secretKeyRef" if kind == "secret" else "configMapKeyRef"]
                obj = self._get_object(namespace, kind, ref["name"])
                data = self._data(kind, obj) if obj is not None else None
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        continue
                    what = (
                        f'{kind} "{ref["name"]}" not found'
                        if data is None
                        else (f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
                    )
                    raise _PodStartFailure("CreateContainerConfigError", what)
                env[name] = data[ref["key"]].decode()
            else:
                raise PodSpecUnsupported(f"env {name}: valueFrom {next(iter(value_from))}")
        for key, service_value in service.items():
            env.setdefault(key, service_value)
        return env

    # -- running a container --------------------------------------------------
    def _identity(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[Identity, bool]:
        psc = pod["spec"].get("securityContext") or {}
        csc = container.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser", self.image_user[0]))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", self.image_user[1]))
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot", False))
        if non_root and uid == 0:
            raise _PodStartFailure(
                "CreateContainerConfigError", "container has runAsNonRoot and image will run as root"
            )
        groups = [gid]
        for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])]:
            if g is not None and g not in groups:
                groups.append(g)
        return Identity(int(uid), int(gid), tuple(int(g) for g in groups)), bool(csc.get("readOnlyRootFilesystem"))


def _field_value(pod: Mapping[str, Any], path: str, *, volume: bool = False) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": NODE_NAME,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    for kind in ("labels", "annotations"):
        prefix = f"metadata.{kind}"
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(prefix) + 2 : -2], ""))
        if path == prefix and volume:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(kind) or {}).items()))
    raise PodSpecUnsupported(f"fieldRef {path}")


def _atomic_write(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> None:
    """The kubelet's AtomicWriter layout: files in a timestamped directory, ``..data``
    pointing at it, and a top-level symlink per first path component."""
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = directory / stamp
    payload.mkdir(mode=0o755)
    payload.chmod(0o755)
    tops: set[str] = set()
    for rel, (content, mode) in files.items():
        target = payload / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
        tops.add(rel.split("/", 1)[0])
    (directory / "..data").symlink_to(stamp)
    for top in sorted(tops):
        (directory / top).symlink_to(f"..data/{top}")
    directory.chmod(0o1777)  # the kubelet's volume tmpfs: drwxrwxrwt
