"""Where the harness finds the binaries it runs: one folder (etcd, kube-apiserver,
kubelet, helm, ...), then ``PATH`` for what a system package provides (containerd,
runc, iptables, docker-registry, htpasswd, podman).

The harness imports nothing outside itself, the standard library and its
third-party packages: whoever runs it says where the tools are, once, before
starting anything::

    from e2e.harness import tools
    tools.use_tools(Path("bin"))          # a folder of binaries, as envtest takes one
    tools.use_tools(my_locator)           # or a function name -> path

Without a call, ``KUBEBUILDER_ASSETS`` (envtest's variable) names the folder. This
project's e2e/conftest.py passes ``e2e.tools.tool``, which builds a missing pinned
tool on first use.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["Locator", "ToolMissing", "in_folder", "tool", "use_tools"]

#: A tool's name -> its executable.
Locator = Callable[[str], Path]
#: envtest's variable for its folder of binaries; the default folder here too.
ASSETS_ENV = "KUBEBUILDER_ASSETS"


class ToolMissing(FileNotFoundError):
    """A tool the harness needs is in neither the folder nor ``PATH``."""


def in_folder(folder: Path) -> Locator:
    """``folder / name`` when it is executable, else ``name`` on ``PATH``."""

    def locate(name: str) -> Path:
        candidate = folder / name
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return candidate
        found = shutil.which(name)
        if found:
            return Path(found)
        raise ToolMissing(f"{name}: not an executable in {folder}, nor on PATH")

    return locate


#: The caller's setting (one entry once use_tools ran): one for the whole harness.
_chosen: list[Locator] = []


def use_tools(where: Path | Locator) -> None:
    """From now on the harness runs the tools in the folder ``where`` (or those
    the function ``where`` names)."""
    _chosen[:] = [in_folder(where) if isinstance(where, Path) else where]


def tool(name: str) -> Path:
    """The executable ``name`` as the caller's setting (or ``KUBEBUILDER_ASSETS``) locates it."""
    if _chosen:
        return _chosen[0](name)
    assets = os.environ.get(ASSETS_ENV, "")
    if not assets:
        raise ToolMissing(
            f"{name}: no folder of tools: call e2e.harness.tools.use_tools(<folder>) first, or set {ASSETS_ENV}"
        )
    return in_folder(Path(assets))(name)
