"""kube-state-metrics, the real program, as the image the recipe's kube-prometheus-stack runs.

kube-prometheus-stack 82.8.0 (the recipe eks/h100/training/ubuntu's) runs its
kube-state-metrics subchart (7.2.0, appVersion 2.18.0) from
``registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.18.0``. That image cannot be
pulled here; its program is the one ``e2e/test_monitoring.py`` runs as a host process:
``tool("kube-state-metrics")``, built from its Go module at ``KUBE_STATE_METRICS_VERSION``
by scripts/bootstrap-tools.sh with the version stamp of the release build. One build
serves both, so the pin follows the subchart's appVersion: a pin the recipe's list does
not name fails the recipe test (its upstream asserts the list names ``KSM_IMAGE``).

The image has the tag's ``Dockerfile`` layout ``FROM scratch`` (its base, distroless
``static-debian12``, cannot be pulled; the program is static and reads the cluster's CA
from its ServiceAccount mount): the binary at ``/kube-state-metrics``, distroless's
``nobody`` as its numeric id (65534:65534), ``ENTRYPOINT ["/kube-state-metrics",
"--port=8080", "--telemetry-port=8081"]``, ports 8080 and 8081. No stand-in label. The
tag hashes the binary and the layout, so it is built once per content (CI builds it once).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from e2e.harness.podman import content_tag, image_exists, podman_build
from e2e.tools import pinned_versions, tool

__all__ = ["KSM_IMAGE", "KSM_VERSION", "kube_state_metrics_image"]

KSM_VERSION = pinned_versions()["KUBE_STATE_METRICS_VERSION"]
#: The name the subchart renders (``image.registry/image.repository:v<appVersion>``).
KSM_IMAGE = f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{KSM_VERSION}"
#: The tag's Dockerfile, its distroless base left out (``USER nobody`` as its number).
LAYOUT = """FROM scratch
COPY kube-state-metrics /kube-state-metrics
USER 65534:65534
ENTRYPOINT ["/kube-state-metrics", "--port=8080", "--telemetry-port=8081"]
EXPOSE 8080 8081
"""


def kube_state_metrics_image() -> str:
    """The image, built with podman from the pinned build (or found: the tag hashes
    the binary and the layout)."""
    binary = tool("kube-state-metrics")
    tag = content_tag("kube-state-metrics", LAYOUT, binary)
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="e2e-kube-state-metrics-") as scratch:
        context = Path(scratch)
        shutil.copy(binary, context / "kube-state-metrics")
        (context / "Containerfile").write_text(LAYOUT)
        podman_build(context, tag)
    return tag
