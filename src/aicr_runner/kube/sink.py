"""Where results land: ConfigMaps in a cluster, or a directory for local dry runs."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aicr_runner.errors import CaptureError

if TYPE_CHECKING:  # the Kubernetes API module (and its retry stack) only where a cluster is written
    from aicr_runner.kube.api import KubeApi

__all__ = [
    "CONFIGMAP_BUDGET_BYTES",
    "RESULT_LABELS",
    "ConfigMapSink",
    "DirectorySink",
    "Fitted",
    "Sink",
    "encoded",
    "fit",
    "fit_payload",
    "payload_size",
    "tar_gz",
]

#: The anchor's budget: a ConfigMap holds at most 1 MiB; keep headroom for metadata.
CONFIGMAP_BUDGET_BYTES = 921_600

#: Result objects are the runner's, not Helm's or Argo CD's: no instance label and
#: no tracking annotation, so neither claims nor prunes them.
RESULT_LABELS = {
    "app.kubernetes.io/name": "nvidia-aicr",
    "app.kubernetes.io/managed-by": "aicr-runner",
}


def encoded(text: str) -> bytes:
    """``text`` as UTF-8; what is not (bytes that were not UTF-8, kept by Python as
    lone surrogates) is written as an escape instead of failing the write."""
    return text.encode("utf-8", "backslashreplace")


def payload_size(data: Mapping[str, str], binary_data: Mapping[str, bytes] | None = None) -> int:
    return sum(len(encoded(v)) for v in data.values()) + sum(len(v) for v in (binary_data or {}).values())


@dataclass(frozen=True)
class Fitted:
    """A payload fitted into a sink's budget: what to write, and what was cut to fit."""

    data: dict[str, str]
    binary_data: dict[str, bytes] = field(default_factory=dict)
    #: Keys stored gzip-compressed (as ``<key>.gz`` in binaryData) to fit.
    compressed: tuple[str, ...] = ()
    #: Keys left out: over the budget even compressed.
    dropped: tuple[str, ...] = ()


class Sink(Protocol):
    def fit(
        self,
        data: Mapping[str, str],
        *,
        large: Mapping[str, bytes] | None = None,
        archives: Mapping[str, Path] | None = None,
    ) -> Fitted:
        """``data`` kept whole, then each of ``large`` and ``archives`` fitted into
        what the budget leaves (``fit_payload``): the one place a payload meets the budget."""
        ...

    def put(self, name: str, *, data: Mapping[str, str], binary_data: Mapping[str, bytes] | None = None) -> None: ...

    def describe(self, name: str) -> str:
        """Where ``name`` lands, for log lines and the termination message."""
        ...

    def get(self, name: str, key: str) -> str | None:
        """What an earlier run wrote to ``name``'s ``key``; None when there is none."""
        ...

    def get_data(self, name: str) -> Mapping[str, str]:
        """Every text key an earlier run wrote to ``name`` (empty when none): one read."""
        ...

    def get_payload(self, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]]:
        """Every text and binary key (payloads stored compressed) an earlier run wrote
        to ``name`` (empty when none): one read."""
        ...


class _Budgeted:
    """A sink's budget and its one way to fit a payload into it: a results directory
    holds what the ConfigMap of a Job run would (a plan shows what a Job stores)."""

    #: What one ConfigMap holds (``ConfigMapSink.put`` refuses more).
    budget = CONFIGMAP_BUDGET_BYTES

    def fit(
        self,
        data: Mapping[str, str],
        *,
        large: Mapping[str, bytes] | None = None,
        archives: Mapping[str, Path] | None = None,
    ) -> Fitted:
        return fit_payload(data, large=large, archives=archives, budget=self.budget)


class ConfigMapSink(_Budgeted):
    def __init__(self, api: KubeApi, namespace: str, labels: Mapping[str, str] | None = None) -> None:
        self._api = api
        self.namespace = namespace
        self._labels = {**RESULT_LABELS, **(labels or {})}

    def put(self, name: str, *, data: Mapping[str, str], binary_data: Mapping[str, bytes] | None = None) -> None:
        size = payload_size(data, binary_data)
        if size > CONFIGMAP_BUDGET_BYTES:
            raise CaptureError(
                f"ConfigMap {self.namespace}/{name} payload is {size} bytes, over the "
                f"{CONFIGMAP_BUDGET_BYTES}-byte budget"
            )
        self._api.apply_configmap(self.namespace, name, data=data, binary_data=binary_data, labels=self._labels)

    def describe(self, name: str) -> str:
        return f"configmap {self.namespace}/{name}"

    def get(self, name: str, key: str) -> str | None:
        return self.get_data(name).get(key)

    def get_data(self, name: str) -> Mapping[str, str]:
        return self._api.get_configmap_data(self.namespace, name) or {}

    def get_payload(self, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]]:
        return self._api.get_configmap_payload(self.namespace, name) or ({}, {})


class DirectorySink(_Budgeted):
    """Writes ``<root>/<name>/<key>``; each file is replaced atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, name: str, *, data: Mapping[str, str], binary_data: Mapping[str, bytes] | None = None) -> None:
        target = self.root / name
        try:
            target.mkdir(parents=True, exist_ok=True)
            for key, text in data.items():
                _atomic_write(target / key, encoded(text))
            for key, blob in (binary_data or {}).items():
                _atomic_write(target / key, blob)
        except OSError as exc:
            raise CaptureError(f"writing {encoded(str(target)).decode()} failed: {exc.strerror or exc}") from exc

    def describe(self, name: str) -> str:
        return str(self.root / name)

    def get(self, name: str, key: str) -> str | None:
        path = self.root / name / key
        try:
            return path.read_text(encoding="utf-8") if path.is_file() else None
        except OSError as exc:
            raise CaptureError(f"reading {path} failed: {exc.strerror or exc}") from exc

    def get_payload(self, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]]:
        folder = self.root / name
        try:
            binary = {p.name: p.read_bytes() for p in sorted(folder.glob("*.gz")) if p.is_file()}
        except OSError as exc:
            raise CaptureError(f"reading {folder} failed: {exc.strerror or exc}") from exc
        return self.get_data(name), binary

    def get_data(self, name: str) -> Mapping[str, str]:
        folder = self.root / name
        if not folder.is_dir():
            return {}
        data = {}
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.name.startswith(".") and not path.name.endswith(".gz"):
                try:
                    data[path.name] = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise CaptureError(f"reading {path} failed: {exc}") from exc
        return data


def _atomic_write(path: Path, content: bytes) -> None:
    if "/" in path.name or path.name in ("", ".", ".."):
        raise CaptureError(f"refusing to write result key {path.name!r}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fit(key: str, raw: bytes, budget: int) -> tuple[dict[str, str], dict[str, bytes]] | None:
    """``raw`` as text under ``key``; over ``budget``, gzip-compressed in binaryData
    under ``key.gz`` rather than dropped; None when even that does not fit."""
    if len(raw) <= budget:
        return {key: raw.decode(errors="replace")}, {}
    import gzip  # only a payload over its budget: not on plan's path

    packed = gzip.compress(raw, mtime=0)
    if len(packed) <= budget:
        return {}, {f"{key}.gz": packed}
    return None


def fit_payload(
    data: Mapping[str, str],
    *,
    large: Mapping[str, bytes] | None = None,
    archives: Mapping[str, Path] | None = None,
    budget: int = CONFIGMAP_BUDGET_BYTES,
) -> Fitted:
    """``data`` whole; each of ``large`` (as text, else gzip-compressed) and each
    directory of ``archives`` (as tar+gzip under its key) in what is left, in order;
    what does not fit is dropped, and said."""
    text, binary = dict(data), dict[str, bytes]()
    compressed: list[str] = []
    dropped: list[str] = []
    for key, raw in (large or {}).items():
        fitted = fit(key, raw, budget - payload_size(text, binary))
        if fitted is None:
            dropped.append(key)
            continue
        text.update(fitted[0])
        binary.update(fitted[1])
        compressed += [key] if fitted[1] else []
    for key, directory in (archives or {}).items():
        archive = tar_gz(directory, budget - payload_size(text, binary))
        if archive is None:
            dropped.append(key)
        else:
            binary[key] = archive
    return Fitted(text, binary, tuple(compressed), tuple(dropped))


def tar_gz(directory: Path, budget: int) -> bytes | None:
    """The directory as tar+gzip, or None when it would exceed ``budget`` bytes."""
    import tarfile  # the evidence step only: not on plan's path

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory.parent)), recursive=False)
            if buffer.tell() > budget:
                return None
    data = buffer.getvalue()
    return data if len(data) <= budget else None
