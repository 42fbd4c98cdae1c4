"""A stand-in kubelet: runs the pods the real Job controller creates.

kube-controller-manager (controllers.py) creates a Job's pods; there is no
scheduler. The stand-in registers the Node ``e2e-node``, and
``Kubelet.run_job(release, namespace)`` finds the Job a Helm release created,
waits for the Job controller's next pod, binds it to the node (the Binding
subresource, as the scheduler would), materialises the pod's volumes (emptyDir,
secret, configMap, projected: serviceAccountToken / configMap / secret /
downwardAPI, downwardAPI), resolves each container's
environment like the kubelet (envFrom, env with $(VAR) expansion, valueFrom
secretKeyRef / configMapKeyRef / fieldRef, the KUBERNETES_SERVICE_* variables),
runs the init containers then the container, collects exit code, output and
termination message, and writes the pod status back to the API server (phase,
each container's ``state.terminated`` with exitCode, reason and message, the
image's ID). It watches the Pod object while the container runs: once
the pod is deleted (by a test, the Eviction API, or the garbage collector after
Helm deleted its Job) it sends SIGTERM, then SIGKILL after the deletion's grace
period, reports the final status and completes the deletion, like a kubelet.
Counting failures, backoffLimit, podFailurePolicy, activeDeadlineSeconds and the
Job's conditions are the real Job controller's.

The container runs (see sandbox.py for the choice):
* "podman": from the image scripts/build-image.sh builds from the Dockerfile
  (e2e/harness/podman.py), the real thing;
* "bwrap" / "rewrite": fallbacks where podman is missing: this checkout stands in
  for the image (the container command ``aicr-runner`` is the venv's script).

What it does not do: pull images, enforce resource limits, restart containers,
or run more than one regular container.
"""

from e2e.harness.kubelet.model import (
    FAKE_AICR_PACKAGE,
    FAKE_AICR_PATH,
    ContainerRun,
    JobOutcome,
    JobRun,
    PodDeletion,
    PodSpecUnsupported,
    expand,
)
from e2e.harness.kubelet.node import Kubelet

__all__ = [
    "FAKE_AICR_PACKAGE",
    "FAKE_AICR_PATH",
    "ContainerRun",
    "JobOutcome",
    "JobRun",
    "Kubelet",
    "PodDeletion",
    "PodSpecUnsupported",
    "expand",
]
