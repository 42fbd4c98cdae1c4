"""The ``Copier`` of ``mirror --to``: the Go ``oras`` CLI and ``helm``.

Why oras: one tool for everything listed (images, multi-arch indexes, Helm OCI
charts, the data pack, any OCI artifact), digests kept, and a re-run sends only
what the target lacks (oras-go checks each node first). The project already
builds it (tools/versions.env ORAS_VERSION). skopeo (Debian bookworm 1.9.3)
copies images only with ``--all`` for indexes and is not built for OCI
artifacts such as charts. oras is a tool of the connected host (docs/air-gap.md):
the runner image carries helm, not oras.

oras moves the bytes; the digests are read in the runner's process
(``mirror.digest_reads``: the source's, the target's, the final check's), so an item
the target already holds by digest costs no process at all, and one it lacks costs
one (``oras cp``). A registry only oras can log in to (a credential helper) has its
digests read by ``oras manifest fetch``, as every read was before.

Each call has a deadline; a tool's failure text is classified once
(``mirror.errors.classify_tool_failure``).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from aicr_runner.errors import ToolError
from aicr_runner.mirror.digest_reads import LAYOUT, DigestReads
from aicr_runner.mirror.errors import CopyError, MirrorExit, classify_tool_failure
from aicr_runner.mirror.tool_call import last_line, run_tool

__all__ = ["LAYOUT", "OrasCopier", "sha256_of"]

_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
_COPIED_DIGEST = re.compile(r"^Digest: (sha256:[0-9a-f]{64})$", re.MULTILINE)
#: oras stamps the push time into an artifact's manifest; a fixed one keeps its digest the files' alone.
_CREATED = "1970-01-01T00:00:00Z"


def _never() -> bool:
    return False


#: How much of a tool's last line a failure quotes.
_SAID = 400


def _host(reference: str) -> str:
    return reference.removeprefix("oci://").split("/", 1)[0]


class OrasCopier:
    def __init__(
        self,
        oras: str = "oras",
        helm: str = "helm",
        *,
        registry_config: Path | None = None,
        plain_http: frozenset[str] = frozenset(),
        timeout_seconds: float = 1800.0,
        interrupted: Callable[[], bool] = _never,
        sources: Mapping[str, str] | None = None,
        local_charts: Mapping[tuple[str, str, str], Path] | None = None,
        resolve: Sequence[str] = (),
    ) -> None:
        self.oras, self.helm = oras, helm
        self.interrupted = interrupted
        #: Source reference -> ``oci-layout:DIR:TAG`` (an archive's copy), and (repository, chart,
        #: version) -> the archive's chart file: ``--from-archive`` reads these, never the upstream.
        self.sources: Mapping[str, str] = sources or {}
        self.local_charts: Mapping[tuple[str, str, str], Path] = local_charts or {}
        self.registry_config = registry_config
        self.plain_http = plain_http
        #: oras' ``--resolve HOST:PORT:ADDRESS[:PORT]`` rules (a registry reached at another
        #: address than its name's, as curl's ``--resolve``), for every oras call.
        self.resolve = tuple(resolve)
        self.timeout = timeout_seconds
        self.reads = DigestReads(
            registry_config=registry_config,
            plain_http=plain_http,
            resolve=self.resolve,
            timeout_seconds=timeout_seconds,
            interrupted=lambda: self.interrupted(),  # noqa: PLW0108 - read when asked: it may be replaced
        )

    def close(self) -> None:
        """The digest reads' connections released (a dropped copier releases them too)."""
        self.reads.close()

    def _run(self, argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """One tool call: it ends by its deadline, and at once on SIGTERM (the tool is
        stopped; oras writes a tag only after its content, so no tag names a partial
        image, and a re-run sends only what is missing)."""
        try:
            return run_tool(
                argv,
                cwd=cwd,
                timeout=self.timeout,
                interrupted=self.interrupted,
                timed_out=lambda: CopyError(
                    MirrorExit.TARGET_UNAVAILABLE, " ".join(argv[1:3]), f"no answer in {self.timeout:g}s"
                ),
            )
        except FileNotFoundError as exc:
            raise ToolError(f"{argv[0]} not found: mirror --to copies with oras and helm (docs/air-gap.md)") from exc

    def _flags(self, reference: str, side: str = "") -> list[str]:
        if reference.startswith(LAYOUT):
            return [f"--{side}oci-layout"]
        flags = [f"--{side}plain-http"] if _host(reference) in self.plain_http else []
        if self.registry_config is not None:
            flags += [f"--{side}registry-config", str(self.registry_config)]
        for rule in self.resolve:
            flags += [f"--{side}resolve", rule]
        return flags

    def _source(self, reference: str) -> str:
        """Where a source reference is read from: an archive's OCI layout when it holds it."""
        return self.sources.get(reference, reference)

    def _manifest(self, reference: str, *, source_side: bool, descriptor: bool) -> dict[str, object] | None:
        # Layouts never reach here: DigestReads serves every one of them.
        argv = [self.oras, "manifest", "fetch", *self._flags(reference), reference]
        result = self._run([*argv[:3], "--descriptor", *argv[3:]] if descriptor else argv)
        if result.returncode != 0:
            reason = classify_tool_failure(result.stderr, source_side=source_side)
            if reason in (MirrorExit.NOT_FOUND, MirrorExit.TARGET_UNAVAILABLE) and "not found" in result.stderr:
                return None
            raise CopyError(reason, reference, last_line(result.stderr, _SAID))
        loaded = json.loads(result.stdout)
        return loaded if isinstance(loaded, dict) else None

    def digest(self, reference: str, *, source_side: bool) -> str | None:
        where = self._source(reference) if source_side else reference
        if self.reads.serves(where):
            return self.reads.digest(where, source_side=source_side)
        found = self._manifest(where, source_side=source_side, descriptor=True)
        return None if found is None else str(found["digest"])

    def copy(self, source: str, target: str) -> str:
        source = self._source(source)
        argv = [
            self.oras,
            "cp",
            *self._flags(source, "from-"),
            *self._flags(target, "to-"),
            source.removeprefix(LAYOUT),
            target.removeprefix(LAYOUT),
        ]
        result = self._run(argv)
        if result.returncode != 0:
            # The source resolved a moment ago: a failure now is the target's, unless it says otherwise.
            raise CopyError(
                classify_tool_failure(result.stderr, source_side=False), target, last_line(result.stderr, _SAID)
            )
        # oras cp prints the digest it copied ("Digest: sha256:..."): one call less per item;
        # the final check resolves every target all the same.
        printed = _COPIED_DIGEST.search(result.stdout)
        landed = printed.group(1) if printed else self.digest(target, source_side=False)
        if landed is None:
            raise CopyError(MirrorExit.INCOMPLETE, target, "oras cp succeeded but the target has no manifest")
        return landed

    def push_layout(self, layout: str, files_dir: Path, files: Sequence[tuple[str, str]], artifact_type: str) -> str:
        """``oras push`` ``files`` (name and media type, in ``files_dir``) into the OCI layout
        ``layout`` as one artifact, each layer titled with its name, its creation time fixed
        (the same files, the same digest: a re-run finds it in the target); the manifest's digest."""
        argv = [
            self.oras,
            "push",
            "--oci-layout",
            "--artifact-type",
            artifact_type,
            "--annotation",
            f"org.opencontainers.image.created={_CREATED}",
            layout.removeprefix(LAYOUT),
            *(f"{name}:{media_type}" for name, media_type in files),
        ]
        result = self._run(argv, cwd=files_dir)
        printed = _COPIED_DIGEST.search(result.stdout)
        if result.returncode != 0 or printed is None:
            raise CopyError(MirrorExit.TARGET_UNAVAILABLE, layout, last_line(result.stderr or result.stdout, _SAID))
        return printed.group(1)

    def chart_digest(self, reference: str) -> str | None:
        if self.reads.serves(reference):
            manifest = self.reads.manifest(reference, source_side=False)
        else:
            manifest = self._manifest(reference, source_side=False, descriptor=False)
        layers = manifest.get("layers") if manifest else None
        for layer in layers if isinstance(layers, list) else ():
            if isinstance(layer, dict) and layer.get("mediaType") == _CHART_LAYER:
                return str(layer["digest"])
        return None

    def pull_chart(self, source: str, chart: str, version: str, destination: Path) -> Path:
        """A repository chart's archive in ``destination`` (an archive's copy when it holds one)."""
        local = self.local_charts.get((source, chart, version))
        if local is not None:
            return local
        destination.mkdir(parents=True, exist_ok=True)
        before = set(destination.glob("*.tgz"))
        argv = [self.helm, "pull", chart, "--repo", source, "--version", version, "--destination", str(destination)]
        pulled = self._run(argv, cwd=destination)
        archives = sorted(set(destination.glob("*.tgz")) - before)
        if pulled.returncode != 0 or not archives:
            reason = classify_tool_failure(pulled.stderr, source_side=True)
            raise CopyError(reason, f"chart {chart} {version} from {source}", last_line(pulled.stderr, _SAID))
        return archives[0]

    def push_chart(self, source: str, chart: str, version: str, target: str) -> tuple[str, bool]:
        with tempfile.TemporaryDirectory(prefix="aicr-mirror-chart-") as tmp:
            archive = self.pull_chart(source, chart, version, Path(tmp))
            digest = sha256_of(archive)
            if self.chart_digest(target) == digest:
                return digest, False
            repository = "oci://" + target.rsplit(":", 1)[0].rsplit("/", 1)[0]
            flags = ["--plain-http"] if _host(target) in self.plain_http else []
            if self.registry_config is not None:
                flags += ["--registry-config", str(self.registry_config)]
            pushed = self._run([self.helm, "push", str(archive), repository, *flags], cwd=Path(tmp))
            if pushed.returncode != 0:
                raise CopyError(
                    classify_tool_failure(pushed.stderr, source_side=False), target, last_line(pushed.stderr, _SAID)
                )
            return digest, True


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"
