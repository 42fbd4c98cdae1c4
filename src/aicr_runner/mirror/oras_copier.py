"""The ``Copier`` of ``mirror --to``: the Go ``oras`` CLI and ``helm``.

Why oras: one tool for everything listed (images, multi-arch indexes, Helm OCI
charts, the data pack, any OCI artifact), digests kept, and a re-run sends only
what the target lacks (oras-go checks each node first). The project already
builds it (tools/versions.env ORAS_VERSION). skopeo (Debian bookworm 1.9.3)
copies images only with ``--all`` for indexes and is not built for OCI
artifacts such as charts. oras is a tool of the connected host (docs/air-gap.md):
the runner image carries helm, not oras.

Each call has a deadline; a tool's failure text is classified once
(``errors.classify_tool_failure``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from aicr_runner.errors import ToolError
from aicr_runner.mirror.errors import CopyError, MirrorExit, classify_tool_failure

__all__ = ["OrasCopier"]

_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


def _host(reference: str) -> str:
    return reference.removeprefix("oci://").split("/", 1)[0]


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:400] if lines else "no output"


class OrasCopier:
    def __init__(
        self,
        oras: str = "oras",
        helm: str = "helm",
        *,
        registry_config: Path | None = None,
        plain_http: frozenset[str] = frozenset(),
        timeout_seconds: float = 1800.0,
    ) -> None:
        self.oras, self.helm = oras, helm
        self.registry_config = registry_config
        self.plain_http = plain_http
        self.timeout = timeout_seconds

    def _run(self, argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                list(argv), cwd=cwd, capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except FileNotFoundError as exc:
            raise ToolError(f"{argv[0]} not found: mirror --to copies with oras and helm (docs/air-gap.md)") from exc
        except subprocess.TimeoutExpired as exc:
            raise CopyError(
                MirrorExit.TARGET_UNAVAILABLE, " ".join(argv[1:3]), f"no answer in {self.timeout:g}s"
            ) from exc

    def _flags(self, reference: str, side: str = "") -> list[str]:
        flags = [f"--{side}plain-http"] if _host(reference) in self.plain_http else []
        if self.registry_config is not None:
            flags += [f"--{side}registry-config", str(self.registry_config)]
        return flags

    def _manifest(self, reference: str, *, source_side: bool, descriptor: bool) -> dict[str, object] | None:
        argv = [self.oras, "manifest", "fetch", *self._flags(reference), reference]
        result = self._run([*argv[:3], "--descriptor", *argv[3:]] if descriptor else argv)
        if result.returncode != 0:
            reason = classify_tool_failure(result.stderr, source_side=source_side)
            if reason in (MirrorExit.NOT_FOUND, MirrorExit.TARGET_UNAVAILABLE) and "not found" in result.stderr:
                return None
            raise CopyError(reason, reference, _last(result.stderr))
        loaded = json.loads(result.stdout)
        return loaded if isinstance(loaded, dict) else None

    def digest(self, reference: str, *, source_side: bool) -> str | None:
        found = self._manifest(reference, source_side=source_side, descriptor=True)
        return None if found is None else str(found["digest"])

    def copy(self, source: str, target: str) -> str:
        argv = [self.oras, "cp", *self._flags(source, "from-"), *self._flags(target, "to-"), source, target]
        result = self._run(argv)
        if result.returncode != 0:
            # The source resolved a moment ago: a failure now is the target's, unless it says otherwise.
            raise CopyError(classify_tool_failure(result.stderr, source_side=False), target, _last(result.stderr))
        landed = self.digest(target, source_side=False)
        if landed is None:
            raise CopyError(MirrorExit.INCOMPLETE, target, "oras cp succeeded but the target has no manifest")
        return landed

    def chart_digest(self, reference: str) -> str | None:
        manifest = self._manifest(reference, source_side=False, descriptor=False)
        layers = manifest.get("layers") if manifest else None
        for layer in layers if isinstance(layers, list) else ():
            if isinstance(layer, dict) and layer.get("mediaType") == _CHART_LAYER:
                return str(layer["digest"])
        return None

    def push_chart(self, source: str, chart: str, version: str, target: str) -> tuple[str, bool]:
        with tempfile.TemporaryDirectory(prefix="aicr-mirror-chart-") as tmp:
            work = Path(tmp)
            pulled = self._run(
                [self.helm, "pull", chart, "--repo", source, "--version", version, "--destination", tmp], cwd=work
            )
            archives = sorted(work.glob("*.tgz"))
            if pulled.returncode != 0 or not archives:
                reason = classify_tool_failure(pulled.stderr, source_side=True)
                raise CopyError(reason, f"chart {chart} {version} from {source}", _last(pulled.stderr))
            digest = "sha256:" + hashlib.sha256(archives[0].read_bytes()).hexdigest()
            if self.chart_digest(target) == digest:
                return digest, False
            repository = "oci://" + target.rsplit(":", 1)[0].rsplit("/", 1)[0]
            flags = ["--plain-http"] if _host(target) in self.plain_http else []
            if self.registry_config is not None:
                flags += ["--registry-config", str(self.registry_config)]
            pushed = self._run([self.helm, "push", str(archives[0]), repository, *flags], cwd=work)
            if pushed.returncode != 0:
                raise CopyError(classify_tool_failure(pushed.stderr, source_side=False), target, _last(pushed.stderr))
            return digest, True
