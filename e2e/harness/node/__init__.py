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

__all__ = [
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
    "start_node",
]
