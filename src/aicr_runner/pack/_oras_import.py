"""oras-py, imported for pulling only.

oras-py imports ``jsonschema`` at module level to validate the manifests it
pushes; the pack pull never pushes, and ``jsonschema`` (format checkers,
referencing registry) is about half of oras-py's import time. Until oras-py
touches it, ``jsonschema`` is a stand-in module here that imports the real one
on first attribute access (PEP 562 style). The standard ``LazyLoader`` does not
do here: on Python 3.11 the ``import jsonschema`` statement itself reads the
module's ``__spec__`` and so loads it at once. Import oras-py through this
module (never ``import oras...`` directly) so the stand-in is in place first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """Stands in for a module until one of its attributes is read."""

    def __getattr__(self, attribute: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        # Whoever kept this stand-in (oras-py's module globals) now reads the real names.
        self.__dict__.update({key: value for key, value in vars(real).items() if key != "__name__"})
        return getattr(real, attribute)


def _defer_import(name: str) -> None:
    if name not in sys.modules and importlib.util.find_spec(name) is not None:
        sys.modules[name] = _Deferred(name)


_defer_import("jsonschema")

import oras.auth  # noqa: E402 - after the stand-in, on purpose
import oras.logger  # noqa: E402
import oras.provider  # noqa: E402

__all__ = ["oras"]
