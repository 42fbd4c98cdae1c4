"""The e2e suite's node: containerd, a real kubelet and a real kube-scheduler
(built from the API server's Kubernetes module and version) run the pods the
real Job controller creates, with the chart's own pod spec.

* host.py: the session's slot on the machine (bridge, pod subnet, DNAT for the
  ``kubernetes`` Service, cgroup root, the kubelet's sysctls), undone at teardown;
* containerd.py: containerd with a private root and socket, CNI bridge config;
* images.py: the sandbox image, the test image, loading images into containerd;
* node.py: kubelet and kube-scheduler, up once the Node is Ready and untainted;
* pods.py: ``Kubelet``, what a test sees of the pods (``run_job`` -> ``JobRun``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from e2e.harness.node.host import HostNetwork, claim_host_network
from e2e.harness.node.images import derive_image, load_image
from e2e.harness.node.model import (
    ContainerRun,
    JobOutcome,
    JobRun,
    PodDeletion,
)
from e2e.harness.node.node import NODE_NAME, RealNode, start_node
from e2e.harness.node.pods import Kubelet
from e2e.tools import REPO_ROOT, tool

__all__ = [
    "CHART_DEFAULT_IMAGE",
    "E2E_ORAS",
    "FAKE_AICR_PACKAGE",
    "FAKE_AICR_PATH",
    "NODE_NAME",
    "ContainerRun",
    "HostNetwork",
    "JobOutcome",
    "JobRun",
    "Kubelet",
    "PodDeletion",
    "RealNode",
    "claim_host_network",
    "derive_image",
    "load_image",
    "pod_fake_aicr_launcher",
    "start_node",
    "test_image",
]

#: Where the e2e image has the contract-faithful fake aicr (chart value aicrBinary.path)...
FAKE_AICR_PATH = "/usr/local/bin/aicr"
#: ...its package (the launcher runs it with the image's Python)...
FAKE_AICR_PACKAGE = "/opt/fake-aicr/fake_aicr"
#: ...and the pinned Go oras (the fake's evidence publish pushes with it: FAKE_AICR_ORAS).
E2E_ORAS = "/opt/e2e-tools/oras"


def _chart_default_image() -> str:
    chart = yaml.safe_load((REPO_ROOT / "chart" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO_ROOT / "chart" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"


#: The image a release's pods ask for when the chart's image values are left alone.
CHART_DEFAULT_IMAGE = _chart_default_image()


def pod_fake_aicr_launcher(directory: Path) -> Path:
    """The fake aicr's launcher as the pods run it (the image's Python)."""
    from tests.fake_aicr import install_fake_aicr
    from tests.support.podman import IMAGE_PYTHON

    return install_fake_aicr(directory, python=IMAGE_PYTHON, package_dir=FAKE_AICR_PACKAGE)


@functools.cache
def test_image() -> str:
    """The built aicr-runner image plus the test material pods need (a layer on
    top; the image's own files are untouched)."""
    import tempfile

    from tests.fake_aicr import PACKAGE_DIR
    from tests.support.podman import built_image

    launcher = pod_fake_aicr_launcher(Path(tempfile.mkdtemp(prefix="e2e-fake-aicr-")))
    return derive_image(
        built_image(),
        {FAKE_AICR_PATH: launcher, FAKE_AICR_PACKAGE: PACKAGE_DIR, E2E_ORAS: tool("oras")},
    )
