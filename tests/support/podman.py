"""The aicr-runner image as scripts/build-image.sh builds it, and podman as this
machine runs it (shared by the image tests and the e2e kubelet's podman mode).

runc, not crun (crun fails on hybrid cgroup hosts); cgroupfs (no systemd); explicit
ulimits (without them runc fails to set rlimits here)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from e2e.harness.podman import PODMAN

__all__ = [
    "BUILD_SCRIPT",
    "IMAGE_PYTHON",
    "PODMAN",
    "ROOT",
    "RUN_LIMITS",
    "ImageBuildError",
    "built_image",
    "podman_available",
]

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-image.sh"
RUN_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
#: Where the image's Python lives (the runtime venv; it has PyYAML, which the fake aicr needs).
IMAGE_PYTHON = "/opt/venv/bin/python"


class ImageBuildError(RuntimeError):
    """scripts/build-image.sh failed; the message carries its output."""


def podman_available() -> bool:
    return shutil.which("podman") is not None and shutil.which("runc") is not None


@functools.cache
def built_image() -> str:
    """The image reference for this checkout, built (or found up to date) by
    scripts/build-image.sh: its last line of output."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ImageBuildError(f"scripts/build-image.sh failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return lines[-1]
