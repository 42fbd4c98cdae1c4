"""``aicr-runner mirror``'s flow: the plan's steps (fetch, pack, recipe, bundle,
verify: the same code path, handed over by ``cli``), then the list of everything
that install needs, printed (``--list``), copied into a registry (``--to``) or
written into an archive (``--to-archive``); ``--from-archive`` copies an archive's
items with no plan at all.

The plan's own summary goes to stderr with its logs, so stdout holds only the
list (``-o json | jq``, ``-o hauler > haul.yaml``) or the copy's lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aicr_runner import __version__
from aicr_runner.errors import RunnerError
from aicr_runner.mirror.collect import Release, collect
from aicr_runner.mirror.items import Item
from aicr_runner.run.invocation import Invocation
from aicr_runner.settings.config import ENV_PREFIX, AicrSettings, RunnerSettings

if TYPE_CHECKING:
    from aicr_runner.mirror.oras_copier import OrasCopier

__all__ = ["MirrorRequest", "run_from_archive", "run_mirror", "runner_image"]

_RUNNER_REPOSITORY = "ghcr.io/nvidia-aicr/aicr-runner"


@dataclass(frozen=True)
class MirrorRequest:
    fmt: str
    values: Mapping[str, Any]
    charts_dir: Path | None = None
    helm: str = "helm"
    #: ``--to``: ``oci://registry[/prefix]``; empty: list only.
    to: str = ""
    registry_config: Path | None = None
    plain_http: frozenset[str] = frozenset()
    oras: str = "oras"
    #: ``--hosts-toml``: where containerd's hosts.toml files are written after the copy.
    hosts_toml: Path | None = None
    to_archive: Path | None = None
    from_archive: Path | None = None
    #: ``--allow-missing``: references that may be absent at their source.
    allow_missing: frozenset[str] = frozenset()
    #: ``--resolve``: oras' ``HOST:PORT:ADDRESS[:PORT]`` rules for every copy call.
    resolve: tuple[str, ...] = ()


#: The plan's run (``wiring.run``): given by the command line, the floor above this package.
Plan = Callable[[RunnerSettings, Invocation, Mapping[str, str]], int]


def run_mirror(
    settings: RunnerSettings, invocation: Invocation, env: Mapping[str, str], request: MirrorRequest, plan: Plan
) -> int:
    with contextlib.redirect_stdout(sys.stderr):
        code = plan(settings, invocation, env)
    if code != 0:
        print(f"aicr-runner mirror: the plan did not succeed (exit {code}): nothing listed", file=sys.stderr)
        return code
    from aicr_runner.children.process import ShutdownController

    try:
        with ShutdownController().installed() as shutdown:  # helm pull/template stop on SIGTERM
            items = list_items(settings, invocation, env, request, interrupted=shutdown.requested)
        _compare_with_aicr(settings, items)
        release = _ReleaseFiles(settings.aicr, _aicr_version(invocation, settings))
        if request.to:
            return _copy(items, request, release=release)
        if request.to_archive is not None:
            return _archive(items, request, request.to_archive, release)
    except RunnerError as exc:
        print(f"aicr-runner mirror: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    from aicr_runner.mirror.formats import render

    sys.stdout.write(render(items, request.fmt))
    return 0


def _copier(request: MirrorRequest, interrupted: Callable[[], bool], **archive: Any) -> OrasCopier:
    from aicr_runner.mirror.oras_copier import OrasCopier

    return OrasCopier(
        request.oras,
        request.helm,
        registry_config=request.registry_config,
        plain_http=request.plain_http,
        resolve=request.resolve,
        interrupted=interrupted,
        **archive,
    )


def run_from_archive(request: MirrorRequest, archive: Path) -> int:
    """``--from-archive FILE --to``: the archive's items copied and checked, nothing else read."""
    import tempfile

    from aicr_runner.mirror.archive import read_archive

    try:
        with tempfile.TemporaryDirectory(prefix="aicr-mirror-unpacked-") as tmp:
            contents = read_archive(archive, Path(tmp))
            return _copy(list(contents.items), request, sources=contents.sources, local_charts=contents.charts)
    except RunnerError as exc:
        print(f"aicr-runner mirror: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)


@dataclass(frozen=True)
class _ReleaseFiles:
    """What the aicr release files of the list are downloaded with (timeouts, budget) and their tag."""

    settings: AicrSettings
    version: str


def _with_release(items: list[Item], copier: OrasCopier, release: _ReleaseFiles, workdir: Path) -> list[Item]:
    """The release files as one artifact item, its OCI layout a source of ``copier``."""
    from aicr_runner.mirror.release_artifact import with_release_artifact

    listed, sources = with_release_artifact(
        items, release.settings, release.version, workdir, copier, interrupted=copier.interrupted
    )
    copier.sources = {**copier.sources, **sources}
    return listed


def _archive(items: list[Item], request: MirrorRequest, archive: Path, release: _ReleaseFiles) -> int:
    import tempfile

    from aicr_runner.children.process import ShutdownController
    from aicr_runner.mirror.archive import write_archive

    with (
        ShutdownController().installed() as shutdown,
        tempfile.TemporaryDirectory(prefix="aicr-release-") as tmp,
        contextlib.closing(_copier(request, shutdown.requested)) as copier,
    ):
        listed = _with_release(items, copier, release, Path(tmp))
        count = write_archive(listed, archive, copier, progress=print, allow_missing=request.allow_missing)
    print(f"{count} items in {archive} (the aicr release as the artifact {_release_of(listed)})")
    return 0


def _release_of(items: list[Item]) -> str:
    from aicr_runner.mirror.release_artifact import RELEASE_REPOSITORY

    return next((i.reference for i in items if i.reference.startswith(f"{RELEASE_REPOSITORY}:")), "none")


def _copy(items: list[Item], request: MirrorRequest, release: _ReleaseFiles | None = None, **archive: Any) -> int:
    """``--to``: the copy and its final check; one line per item, then the tally."""
    import tempfile

    from aicr_runner.children.process import ShutdownController
    from aicr_runner.mirror.copy import copy_all

    with (
        ShutdownController().installed() as shutdown,
        tempfile.TemporaryDirectory(prefix="aicr-release-") as tmp,
        contextlib.closing(_copier(request, shutdown.requested, **archive)) as copier,
    ):
        if release is not None:
            items = _with_release(items, copier, release, Path(tmp))
        report = copy_all(
            items,
            request.to,
            copier,
            progress=lambda line: print(line, flush=True),
            allow_missing=request.allow_missing,
        )
    for item, why in report.not_copied:
        print(f"not copied {item.reference}: {why}")
    print(
        f"{len(report.copied)} items in {request.to} by digest ({report.sent} copied, "
        f"{len(report.copied) - report.sent} already there); {len(report.not_copied)} not copied"
    )
    _after_copy(items, request)
    return 0


def _after_copy(items: list[Item], request: MirrorRequest) -> None:
    """containerd's hosts.toml when asked, and what to install with."""
    if request.hosts_toml is not None:
        from aicr_runner.mirror.hosts_toml import write_hosts_toml

        registry = request.to.removeprefix("oci://").split("/", 1)[0]
        written = write_hosts_toml(items, request.to, request.hosts_toml, plain_http=registry in request.plain_http)
        print(f"containerd hosts.toml for {len(written)} registries in {request.hosts_toml}")
    mirror = request.to.removeprefix("oci://").rstrip("/")
    release_ref = _release_of(items)
    print(f"chart values to install with: mirror.registry: {mirror}")
    if release_ref != "none":
        print(f"aicr.releaseRef: {mirror}/{release_ref} (the aicr release from the registry)")
    print(
        "images keep their names: the nodes pull them through the mirror (--hosts-toml); without that, "
        f"global.imageRegistry: {mirror}/ghcr.io serves the runner's own image"
    )


def list_items(
    settings: RunnerSettings,
    invocation: Invocation,
    env: Mapping[str, str],
    request: MirrorRequest,
    *,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[Item]:
    from aicr_runner.aicr.recipe import load_recipe
    from aicr_runner.mirror.render import HelmRenderer
    from aicr_runner.mirror.rewrite import UPSTREAM_RECIPE

    work = settings.work_path
    # With mirror.* set the recipe names the mirror; the list is of what to copy into it.
    upstream = work / UPSTREAM_RECIPE
    recipe_path = upstream if upstream.is_file() else work / "recipe.yaml"
    summary = load_recipe(recipe_path)
    aicr_version = _aicr_version(invocation, settings)
    release = Release(
        summary=summary,
        checks=_checks(recipe_path),
        bundle_dir=work / "bundle",
        aicr_files=_aicr_files(settings, env, aicr_version),
        aicr_version=aicr_version,
        runner_image=runner_image(request.values),
        pack_ref=settings.pack.ref,
        phases=[p.value for p in settings.validate.phases] if settings.validate.enabled else [],
        snapshot_agent=(
            settings.snapshot.agent_image(aicr_version)
            if settings.snapshot.enabled or settings.validate.enabled or _snapshot_on(request.values)
            else None
        ),
    )
    return collect(release, HelmRenderer(request.helm, request.charts_dir, interrupted=interrupted))


def _snapshot_on(values: Mapping[str, Any]) -> bool:
    """snapshot.enabled of the values file (a plan ignores snapshot.*: it runs no agent; the cluster will)."""
    snapshot = values.get("snapshot")
    return isinstance(snapshot, Mapping) and snapshot.get("enabled") is True


def _aicr_version(invocation: Invocation, settings: RunnerSettings) -> str:
    """The aicr the plan ran (its report says), else the setting."""
    report = (
        invocation.results_dir / (settings.status_configmap or "-") / "report.json" if invocation.results_dir else None
    )
    if report is not None and report.is_file():
        version = json.loads(report.read_text()).get("aicrVersion")
        if isinstance(version, str) and version:
            return version
    return settings.aicr.version


def _checks(recipe_path: Path) -> dict[str, list[str]]:
    """``validation.<phase>.checks`` of the recipe."""
    import yaml

    doc = yaml.safe_load(recipe_path.read_text()) or {}
    validation = doc.get("validation") if isinstance(doc, dict) else None
    if not isinstance(validation, dict):
        return {}
    return {
        str(phase): [str(c) for c in (spec or {}).get("checks") or ()]
        for phase, spec in validation.items()
        if isinstance(spec, dict)
    }


def _aicr_files(settings: RunnerSettings, env: Mapping[str, str], version: str) -> list[tuple[str, str, int | None]]:
    """The release of the aicr that resolved the recipe (the same the cluster must run): its
    archive for each architecture the Job may land on (both unless the architecture is set)
    and its checksums file; digests and sizes where known (downloaded, or pinned for that version)."""
    from aicr_runner.aicr.release import release_urls
    from aicr_runner.settings.checks import Arch

    explicit = f"{ENV_PREFIX}AICR__ARCH" in env
    arches = [settings.aicr.arch] if explicit else list(Arch)
    pinned = version.removeprefix("v") == settings.aicr.version.removeprefix("v")
    files: list[tuple[str, str, int | None]] = []
    for arch in arches:
        aicr = settings.aicr.model_copy(update={"arch": arch, "version": f"v{version.removeprefix('v')}"})
        archive_url, checksums_url = release_urls(aicr)
        local = settings.work_path / "aicr-release" / archive_url.rsplit("/", 1)[1]
        pin = getattr(settings.aicr.sha256, arch.value, "") if pinned else ""
        files.append((archive_url, _sha256(local) or (f"sha256:{pin}" if pin else ""), _size(local)))
    files.append((checksums_url, "", None))
    return files


def _sha256(path: Path) -> str:
    if not path.is_file():
        return ""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _size(path: Path) -> int | None:
    return path.stat().st_size if path.is_file() else None


def runner_image(values: Mapping[str, Any]) -> str:
    """The runner image the chart renders from these values (image.*, global.imageRegistry)."""
    image: Mapping[str, Any] = values["image"] if isinstance(values.get("image"), Mapping) else {}
    repository = str(image.get("repository") or _RUNNER_REPOSITORY)
    registry = (
        str((values.get("global") or {}).get("imageRegistry") or "")
        if isinstance(values.get("global"), Mapping)
        else ""
    )
    if registry:
        first, _, rest = repository.partition("/")
        has_host = "." in first or ":" in first or first == "localhost"
        repository = f"{registry.rstrip('/')}/{rest if has_host and rest else repository}"
    if image.get("digest"):
        return f"{repository}@{image['digest']}"
    return f"{repository}:{image.get('tag') or __version__}"


def _compare_with_aicr(settings: RunnerSettings, items: list[Item]) -> None:
    """Where the aicr in use has ``aicr mirror list``, its list beside ours: every
    difference is printed on stderr (the list printed stays ours)."""
    from aicr_runner.mirror.aicr_list import differences

    for line in differences(settings, items):
        print(f"aicr-runner mirror: {line}", file=sys.stderr)
