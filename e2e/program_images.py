"""Real programs of the recipe's charts, as the images those charts run.

The recipe eks/h100/training/ubuntu's charts run images this machine cannot pull. Where
the Go module proxy serves a program at the version its chart names, scripts/
bootstrap-tools.sh builds it (``tool(name)``, with its release build's version stamp)
and this module puts it in its project's published image layout, ``FROM scratch`` (the
projects' bases, distroless or busybox, cannot be pulled; the programs are static), to be
pushed upstream under the published name. Each pin in tools/versions.env is its chart's
appVersion: ``e2e/test_air_gapped_recipe.py`` fails when the recipe's list does not name
an image built here. No stand-in label. A tag hashes the binaries and the layout, so each
image is built once per content (CI builds each once).

- **kube-state-metrics** (kube-prometheus-stack 82.8.0's subchart 7.2.0): also the host
  process ``e2e/test_monitoring.py`` runs, one build for both. The tag's ``Dockerfile``:
  ``/kube-state-metrics``, distroless's ``nobody`` as its number (65534).
- **node-exporter** (the prometheus-node-exporter subchart 4.52.0): its ``Dockerfile``,
  ``/bin/node_exporter``, busybox's ``nobody`` (65534).
- **node-feature-discovery** (gpu-operator v25.10.1's subchart 0.18.2): the tag's
  ``minimal`` variant, which ``registry.k8s.io/nfd/node-feature-discovery:<tag>`` is:
  ``nfd-master``, ``nfd-worker`` and ``nfd-gc`` in ``/usr/bin`` (the chart's commands
  name them; the topology updater is off in the chart), the worker's example
  configuration, user 65534, and ``GRPC_GO_LOG_SEVERITY_LEVEL=INFO``. The build reads
  the node's files under ``/host-<path>``, as the chart mounts them.
- **prometheus-operator** and **prometheus-config-reloader** (kube-prometheus-stack's
  appVersion v0.89.0, one module): each its ``Dockerfile``'s ``/bin/<program>``, user
  65534. The operator passes the reloader's name to each Prometheus it starts.
- **Prometheus** v3.10.0 and **Alertmanager** v0.31.1, which the operator starts from the
  chart's ``Prometheus`` and ``Alertmanager`` objects: their ``Dockerfile``s'
  ``/bin/prometheus`` (built with only the Kubernetes service discovery, the one the
  operator's configuration uses: tools/versions.env ``PROMETHEUS_SERVER_TAGS``) and
  ``/bin/alertmanager`` with ``/bin/amtool``, user 65534, the working directory, port,
  entrypoint and default arguments. Left out: the example configuration files (the
  operator passes its own), promtool (another pin of the module), licences.
- **prometheus-adapter** v0.12.0 (the chart prometheus-adapter 5.3.0's appVersion): its
  ``Dockerfile``'s ``/adapter``, user 65534 (its distroless base's ``/tmp`` is a volume
  the chart mounts).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from e2e.harness.podman import content_tag, image_exists, podman_build
from e2e.tools import nfd_config, pinned_versions, tool

__all__ = [
    "ADAPTER_IMAGE",
    "ALERTMANAGER_IMAGE",
    "CONFIG_RELOADER_IMAGE",
    "KSM_IMAGE",
    "KSM_VERSION",
    "NFD_IMAGE",
    "NODE_EXPORTER_IMAGE",
    "PROGRAM_IMAGES",
    "PROMETHEUS_IMAGE",
    "PROMETHEUS_OPERATOR_IMAGE",
    "program_images",
]

_PINS = pinned_versions()
KSM_VERSION = _PINS["KUBE_STATE_METRICS_VERSION"]
#: The names the charts render (``image.registry/image.repository:<tag>``).
KSM_IMAGE = f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{KSM_VERSION}"
NODE_EXPORTER_IMAGE = f"quay.io/prometheus/node-exporter:{_PINS['NODE_EXPORTER_VERSION']}"
NFD_IMAGE = f"registry.k8s.io/nfd/node-feature-discovery:{_PINS['NFD_VERSION']}"
OPERATOR_VERSION = _PINS["PROMETHEUS_OPERATOR_VERSION"]
PROMETHEUS_OPERATOR_IMAGE = f"quay.io/prometheus-operator/prometheus-operator:{OPERATOR_VERSION}"
CONFIG_RELOADER_IMAGE = f"quay.io/prometheus-operator/prometheus-config-reloader:{OPERATOR_VERSION}"
ALERTMANAGER_IMAGE = f"quay.io/prometheus/alertmanager:{_PINS['ALERTMANAGER_VERSION']}"
ADAPTER_IMAGE = f"registry.k8s.io/prometheus-adapter/prometheus-adapter:{_PINS['PROMETHEUS_ADAPTER_VERSION']}"


def prometheus_release(module_version: str) -> str:
    """Prometheus v3.X.Y is published as its module's v0.3XX.Y: ``v0.310.0`` is ``v3.10.0``."""
    minor, patch = module_version.removeprefix("v0.").split(".")
    return f"v{minor[0]}.{int(minor[1:])}.{patch}"


PROMETHEUS_IMAGE = f"quay.io/prometheus/prometheus:{prometheus_release(_PINS['PROMETHEUS_SERVER_VERSION'])}"


@dataclass(frozen=True)
class ProgramImage:
    """One image: its layout (a Containerfile) and the files it copies, each from a
    function giving its path (called when the image is built: a tool is bootstrapped then)."""

    name: str
    layout: str
    files: Mapping[str, Callable[[], Path]]


PROGRAM_IMAGES: dict[str, ProgramImage] = {
    KSM_IMAGE: ProgramImage(
        "kube-state-metrics",
        """FROM scratch
COPY kube-state-metrics /kube-state-metrics
USER 65534:65534
ENTRYPOINT ["/kube-state-metrics", "--port=8080", "--telemetry-port=8081"]
EXPOSE 8080 8081
""",
        {"kube-state-metrics": lambda: tool("kube-state-metrics")},
    ),
    NODE_EXPORTER_IMAGE: ProgramImage(
        "node-exporter",
        """FROM scratch
COPY node_exporter /bin/node_exporter
EXPOSE 9100
USER 65534:65534
ENTRYPOINT ["/bin/node_exporter"]
""",
        {"node_exporter": lambda: tool("node-exporter")},
    ),
    NFD_IMAGE: ProgramImage(
        "node-feature-discovery",
        """FROM scratch
USER 65534:65534
ENV GRPC_GO_LOG_SEVERITY_LEVEL="INFO"
COPY nfd-worker.conf /etc/kubernetes/node-feature-discovery/nfd-worker.conf
COPY nfd-master nfd-worker nfd-gc /usr/bin/
""",
        {
            "nfd-worker.conf": lambda: nfd_config() / "nfd-worker.conf",
            "nfd-master": lambda: tool("nfd-master"),
            "nfd-worker": lambda: tool("nfd-worker"),
            "nfd-gc": lambda: tool("nfd-gc"),
        },
    ),
    PROMETHEUS_OPERATOR_IMAGE: ProgramImage(
        "prometheus-operator",
        """FROM scratch
COPY operator /bin/operator
USER 65534
ENTRYPOINT ["/bin/operator"]
""",
        {"operator": lambda: tool("prometheus-operator")},
    ),
    CONFIG_RELOADER_IMAGE: ProgramImage(
        "prometheus-config-reloader",
        """FROM scratch
COPY prometheus-config-reloader /bin/prometheus-config-reloader
USER 65534
ENTRYPOINT ["/bin/prometheus-config-reloader"]
""",
        {"prometheus-config-reloader": lambda: tool("prometheus-config-reloader")},
    ),
    PROMETHEUS_IMAGE: ProgramImage(
        "prometheus",
        """FROM scratch
COPY prometheus /bin/prometheus
WORKDIR /prometheus
USER 65534
EXPOSE 9090
VOLUME ["/prometheus"]
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
""",
        {"prometheus": lambda: tool("prometheus")},
    ),
    ALERTMANAGER_IMAGE: ProgramImage(
        "alertmanager",
        """FROM scratch
COPY amtool alertmanager /bin/
USER 65534
EXPOSE 9093
VOLUME ["/alertmanager"]
WORKDIR /alertmanager
ENTRYPOINT ["/bin/alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
""",
        {"amtool": lambda: tool("amtool"), "alertmanager": lambda: tool("alertmanager")},
    ),
    ADAPTER_IMAGE: ProgramImage(
        "prometheus-adapter",
        """FROM scratch
COPY adapter /adapter
USER 65534
ENTRYPOINT ["/adapter"]
""",
        {"adapter": lambda: tool("prometheus-adapter")},
    ),
}


def program_image(image: ProgramImage) -> str:
    """The local image, built with podman (or found: the tag hashes the files and the layout)."""
    files = {name: source() for name, source in image.files.items()}
    tag = content_tag(image.name, image.layout, *files.values())
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix=f"e2e-{image.name}-") as scratch:
        context = Path(scratch)
        for name, path in files.items():
            shutil.copy(path, context / name)
        (context / "Containerfile").write_text(image.layout)
        podman_build(context, tag)
    return tag


def program_images() -> dict[str, str]:
    """Published name -> the local image, for every program built here."""
    return {published: program_image(image) for published, image in PROGRAM_IMAGES.items()}
