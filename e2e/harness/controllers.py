"""kube-controller-manager against the e2e API server: the real Job controller.

It runs the controllers a Job and its namespace need, and no others:

- ``job``: creates the Job's pods, counts failures, applies backoffLimit,
  podFailurePolicy and activeDeadlineSeconds, marks the Job Complete or Failed;
- ``ttl-after-finished``: deletes finished Jobs after ttlSecondsAfterFinished;
- ``garbage-collector``: deletes a Job's pods when Helm deletes the Job;
- ``serviceaccount`` and ``root-ca-cert-publisher``: every namespace's
  ``default`` ServiceAccount and ``kube-root-ca.crt`` ConfigMap;
- ``serviceaccount-token``: the token controller (it needs the signing key).

- ``node-lifecycle``: lifts the ``node.kubernetes.io/not-ready`` taint once the
  node's kubelet reports Ready (the scheduler places nothing on a tainted node).

Left out on purpose: everything a Job does not touch (the scheduler is its own
process, see node/).

Each controller talks to the API server as its own ServiceAccount in kube-system
(``--use-service-account-credentials``), so the RBAC the API server bootstraps
for it (``system:controller:job-controller``...) is exercised as in a cluster.
No HTTPS endpoint is served (``--secure-port=0``); readiness is judged by what
the controllers do: the ``default`` namespace's ``kube-root-ca.crt`` and
``default`` ServiceAccount appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from e2e.harness.kube import Kube
from e2e.harness.procs import ManagedProcess, StartupError
from e2e.harness.tools import tool

__all__ = ["CONTROLLERS", "start_controller_manager"]

CONTROLLERS = (
    "job-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
)


def start_controller_manager(
    *,
    kubeconfig: Path,
    ca_file: Path,
    service_account_key: Path,
    admin: Kube,
    workdir: Path,
    controllers: Sequence[str] = CONTROLLERS,
    timeout: float = 60.0,
) -> ManagedProcess:
    """Start kube-controller-manager; return once its controllers act."""
    proc = ManagedProcess(
        "kube-controller-manager",
        [
            tool("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=true",
            # The key the API server verifies ServiceAccount tokens with (the token
            # controller signs with it) and the CA published as kube-root-ca.crt.
            f"--service-account-private-key-file={service_account_key}",
            f"--root-ca-file={ca_file}",
            "--leader-elect=false",
            "--secure-port=0",
            "--profiling=false",
            "--v=2",
        ],
        workdir / "kube-controller-manager.log",
    )

    def acting() -> bool | None:
        published = admin.exists("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
        return True if published and admin.exists("/api/v1/namespaces/default/serviceaccounts/default") else None

    try:
        proc.wait_ready(acting, timeout=timeout, what="kube-controller-manager's controllers", interval=0.1)
    except StartupError:
        proc.stop()
        raise
    return proc
