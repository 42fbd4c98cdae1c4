"""The nodes' side: containerd's ``hosts.toml`` for each upstream registry of the list.

Components keep their image names; containerd (``config_path``, e.g.
``/etc/containerd/certs.d``) reads ``<config_path>/<upstream host>/hosts.toml`` and
pulls from the mirror first. The mirror stores ``nvcr.io/nvidia/driver`` as
``REGISTRY/PREFIX/nvcr.io/nvidia/driver`` (``copy.target_of``), so the host entry
names the API root with its path and ``override_path = true`` (containerd 1.5+
and 2.x, docs/hosts.md). ``server`` stays the upstream registry, tried last, as
containerd does by default: in an air-gapped cluster it is unreachable, so an
image missing from the mirror fails to pull instead of coming from elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.rewrite import mirror_path

__all__ = ["hosts_toml", "write_hosts_toml"]

#: containerd's default server of a namespace that differs from its name.
_SERVERS = {"docker.io": "https://registry-1.docker.io"}


def hosts_toml(upstream: str, target: str, *, plain_http: bool = False) -> str:
    """One upstream registry's ``hosts.toml`` for the mirror ``oci://REGISTRY[/PREFIX]``."""
    registry, _, prefix = target.removeprefix("oci://").rstrip("/").partition("/")
    path = "/".join(p for p in ("v2", prefix, mirror_path(upstream)) if p)
    scheme = "http" if plain_http else "https"
    return (
        f"# aicr-runner mirror: pulls of {upstream} images go to the mirror first\n"
        f'server = "{_SERVERS.get(upstream, f"https://{upstream}")}"\n\n'
        f'[host."{scheme}://{registry}/{path}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        "  override_path = true\n"
    )


def write_hosts_toml(items: Iterable[Item], target: str, directory: Path, *, plain_http: bool = False) -> list[Path]:
    """``<directory>/<host>/hosts.toml`` for every registry an image of the list comes from."""
    hosts = sorted({i.reference.split("/", 1)[0] for i in items if i.kind in (Kind.IMAGE, Kind.ARTIFACT)})
    written = []
    for host in hosts:
        path = directory / host / "hosts.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(hosts_toml(host, target, plain_http=plain_http))
        written.append(path)
    return written
