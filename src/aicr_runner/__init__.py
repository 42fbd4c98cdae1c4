"""aicr-runner: runs NVIDIA AI Cluster Runtime (aicr) end to end inside a Kubernetes Job."""

#: The one place the version is written; pyproject.toml reads it from here
#: (no importlib.metadata at import time: ``aicr-runner version`` stays fast).
__version__ = "0.1.0"

__all__ = ["__version__"]
