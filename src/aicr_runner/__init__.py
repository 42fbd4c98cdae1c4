"""aicr-runner: runs NVIDIA AI Cluster Runtime (aicr) end to end inside a Kubernetes Job."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("aicr-runner")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
