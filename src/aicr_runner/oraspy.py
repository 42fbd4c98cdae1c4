"""oras-py, imported for pulling only.

oras-py imports ``jsonschema`` at module level to validate the manifests it
pushes; the pack pull never pushes, and ``jsonschema`` (with its format checkers
and referencing registry) is about a third of oras-py's import time. It is
bound here through the standard library's ``LazyLoader``: the module object
exists, and the real import runs on first attribute access, if ever. Import
oras-py through this module (never ``import oras...`` directly) so the deferral
is in place before oras-py's own ``import jsonschema`` runs.
"""

from __future__ import annotations

import importlib.util
import sys


def _defer_import(name: str) -> None:
    """Bind ``name`` in ``sys.modules`` to a module that loads itself on first use."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return  # not installed: the import that needs it reports that
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)


_defer_import("jsonschema")

import oras.auth  # noqa: E402 - after the deferral, on purpose
import oras.logger  # noqa: E402
import oras.provider  # noqa: E402

__all__ = ["oras"]
