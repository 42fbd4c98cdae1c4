"""What the command line asked of this run, resolved once.

``cli`` reads the arguments and checks them; the rest of the run sees only this
frozen record (never argparse's namespace), so where results go and which local
pack or binary stands in is decided in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = ["Invocation", "Mode"]


class Mode(StrEnum):
    RUN = "run"
    PLAN = "plan"
    #: Validation only, against the recipe recorded at install (``aicr-runner validate``).
    VALIDATE = "validate"


@dataclass(frozen=True)
class Invocation:
    mode: Mode
    #: Where results land outside a cluster, absolute: ``plan --output``, ``run --results-dir``;
    #: None: a Job run, whose results go to ConfigMaps.
    results_dir: Path | None = None
    #: ``plan --pack-dir``, absolute (symlinks kept: the path messages show), checked a directory.
    pack_dir: Path | None = None
    #: ``--aicr-binary`` as given.
    aicr_binary: Path | None = None
    #: ``validate --recipe``, absolute: the recipe recorded at install (a file, or the
    #: recipe ConfigMap mounted into the pod).
    recipe_file: Path | None = None
    #: ``plan --upgrade-from``: the recipe an upgrade crosses from (an absolute file path, or ``cm://ns/name``).
    upgrade_from: str = ""

    @property
    def results_flag(self) -> str:
        """The flag that named ``results_dir`` (for messages)."""
        return "--output" if self.mode is Mode.PLAN else "--results-dir"

    @property
    def in_cluster(self) -> bool:
        """Results go to the cluster's API (a Job run), not to a directory."""
        return self.results_dir is None
