"""``aicr-runner mirror``'s own flags, and the request they make (checked at the boundary).

Imported when the command line is built: argparse and the format names only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aicr_runner.mirror.items import FORMATS

if TYPE_CHECKING:
    from aicr_runner.mirror.command import MirrorRequest

__all__ = ["add_options", "request_from"]


def add_options(mirror: argparse.ArgumentParser) -> None:
    """What to do with the list, where the plan lands, how to reach the registries."""
    what = mirror.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="print the list (on stdout)")
    what.add_argument(
        "--to",
        metavar="oci://REGISTRY[/PREFIX]",
        help="copy every listed image, chart and artifact there (oras; digests kept; what is there is not sent "
        "again), then check each one there by digest",
    )
    what.add_argument(
        "--to-archive",
        type=Path,
        metavar="FILE",
        help="write them into one archive (an OCI image layout and the repository charts, a tar) to carry across",
    )
    mirror.add_argument(
        "--from-archive",
        type=Path,
        metavar="FILE",
        help="with --to, inside: copy what an archive of --to-archive holds (no plan, no criteria, no upstream)",
    )
    mirror.add_argument("-o", "--format", choices=FORMATS, default="table", help="table (default), json, hauler, zarf")
    mirror.add_argument(
        "--work-dir",
        dest="output",
        type=Path,
        default=Path("aicr-mirror"),
        metavar="DIR",
        help="where the plan's recipe, bundle and run report land (default: ./aicr-mirror)",
    )
    mirror.add_argument(
        "--charts-dir",
        type=Path,
        metavar="DIR",
        help="chart archives (<chart>-<version>.tgz) to render instead of pulling them from their source",
    )
    _add_registry_options(mirror)


def _add_registry_options(mirror: argparse.ArgumentParser) -> None:
    """How to reach the registries, and what the nodes get."""
    mirror.add_argument(
        "--registry-config",
        type=Path,
        metavar="FILE",
        help="a docker config.json with the registries' credentials (for oras and helm; never printed)",
    )
    mirror.add_argument(
        "--hosts-toml",
        type=Path,
        metavar="DIR",
        help="with --to: write containerd's <DIR>/<upstream registry>/hosts.toml for the nodes "
        "(copy DIR to their config_path, e.g. /etc/containerd/certs.d)",
    )
    mirror.add_argument(
        "--allow-missing",
        action="append",
        default=[],
        metavar="REFERENCE",
        help="with --to or --to-archive: an image or artifact of the list that may be absent at its source "
        "(reported, not copied; repeat it); any other absent item fails the copy (exit 41)",
    )
    mirror.add_argument(
        "--plain-http",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a registry served over plain HTTP, no TLS (repeat it); every other one is HTTPS",
    )
    mirror.add_argument(
        "--resolve",
        action="append",
        default=[],
        metavar="HOST:PORT:ADDRESS[:PORT]",
        help="with --to or --to-archive: reach registry HOST:PORT at ADDRESS (oras' --resolve, as curl's; "
        "repeat it), e.g. an upstream behind split DNS",
    )


def request_from(args: argparse.Namespace, values: Mapping[str, Any]) -> MirrorRequest:
    """The request, every flag checked: ConfigError names the flag, the value and what it takes."""
    from aicr_runner.errors import ConfigError
    from aicr_runner.mirror.command import MirrorRequest
    from aicr_runner.settings.checks import Invalid, problem_line
    from aicr_runner.settings.mirror_checks import mirror_registry

    problems: list[str] = []
    target = ""
    if args.to is not None:
        try:
            target = _target(args.to, mirror_registry)
        except Invalid as exc:
            problems.append(problem_line("--to", args.to, exc))
    config = args.registry_config
    if config is not None and not config.is_file():
        problems.append(problem_line("--registry-config", str(config), Invalid("no such file")))
    if args.from_archive is not None and not args.from_archive.is_file():
        problems.append(problem_line("--from-archive", str(args.from_archive), Invalid("no such file")))
    elif args.from_archive is not None and args.to is None:
        problems.append(problem_line("--from-archive", str(args.from_archive), Invalid("needs --to (where it goes)")))
    problems += [
        problem_line("--resolve", rule, Invalid(_RESOLVE_RULE)) for rule in args.resolve if not _resolves(rule)
    ]
    if args.hosts_toml is not None and args.to is None:
        problems.append(problem_line("--hosts-toml", str(args.hosts_toml), Invalid("needs --to (the mirror it names)")))
    if problems:
        raise ConfigError(problems)
    return MirrorRequest(
        args.format,
        values,
        Path(os.path.abspath(args.charts_dir)) if args.charts_dir else None,
        to=target,
        registry_config=Path(os.path.abspath(config)) if config else None,
        plain_http=frozenset(args.plain_http),
        allow_missing=frozenset(args.allow_missing),
        resolve=tuple(args.resolve),
        hosts_toml=Path(os.path.abspath(args.hosts_toml)) if args.hosts_toml else None,
        to_archive=Path(os.path.abspath(args.to_archive)) if args.to_archive else None,
        from_archive=Path(os.path.abspath(args.from_archive)) if args.from_archive else None,
    )


_RESOLVE_RULE = "must be HOST:PORT:ADDRESS[:PORT], like nvcr.io:443:10.0.0.5 or nvcr.io:443:10.0.0.5:8443"


def _resolves(rule: str) -> bool:
    """An oras ``--resolve`` rule: a host, its port, an IPv4 address, optionally the address's port."""
    import re

    port = r"([1-9][0-9]{0,4})"
    matched = re.fullmatch(rf"[A-Za-z0-9.-]+:{port}:[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}(?::{port})?", rule)
    return matched is not None and all(int(p) <= 65535 for p in matched.groups() if p)


def _target(value: str, registry: Callable[[object], str]) -> str:
    from aicr_runner.settings.checks import Invalid

    if not value.startswith("oci://") or not value.removeprefix("oci://"):
        raise Invalid("must be oci://<registry>[/<prefix>], like oci://mirror.example.com:5000/aicr")
    return "oci://" + registry(value.removeprefix("oci://"))
