"""The chart's Lease Role, on its own, is exactly what the install Lease needs.

The chart also binds its ServiceAccount to cluster-admin (bundles need it), which
would hide a Role that is too narrow. Here a ServiceAccount gets only the chart's
rendered Role and RoleBinding, and the runtime's own ``InstallLease`` runs the
whole Lease life cycle with that ServiceAccount's token against the real API
server: take, announce, renew, release, take again. The same token is refused
every Lease of another name and every Lease in another namespace.
"""

from __future__ import annotations

from typing import Any

import pytest

from aicr_runner.errors import LeaseError
from aicr_runner.kube.api import ClientKubeApi, LeaseRecord
from aicr_runner.kube.lease import RELEASES_ANNOTATION, InstallLease
from aicr_runner.settings.config import LeaseSettings
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.scenarios import CHART

pytestmark = pytest.mark.e2e

RELEASE = "gpu"


def lease_rbac_only(helm: Helm, control_plane: ControlPlane, namespace: str) -> tuple[str, str]:
    """Create the chart's ServiceAccount with only the chart's Lease Role bound;
    returns (the Lease name the chart gives the runner, a token for the account)."""
    docs = helm.template(RELEASE, CHART, namespace, values={"accelerator": "h100"})
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    [account] = by_kind["ServiceAccount"]
    [role] = [r for r in by_kind["Role"] if r["metadata"]["name"] == f"{RELEASE}-installer"]
    [binding] = [b for b in by_kind["RoleBinding"] if b["metadata"]["name"] == f"{RELEASE}-installer"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    [job] = by_kind["Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    lease_name = env["AICR_RUNNER_LEASE__NAME"]

    admin = control_plane.admin
    admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding)
    assert "ClusterRoleBinding" in by_kind, "the chart still binds cluster-admin; it is deliberately not applied here"
    return lease_name, control_plane.token(namespace, account["metadata"]["name"])


def settings(name: str, pod: str) -> LeaseSettings:
    return LeaseSettings(name=name, pod_name=pod, job_name=f"{RELEASE}-install", duration_seconds=5, wait_seconds=0)


def test_the_lease_role_alone_covers_the_whole_lease_life_cycle(
    helm: Helm, control_plane: ControlPlane, namespace: str
) -> None:
    lease_name, token = lease_rbac_only(helm, control_plane, namespace)
    api = ClientKubeApi(control_plane.kubernetes_client(token))

    first = InstallLease(api, namespace, settings(lease_name, "pod-a"), poll_seconds=0.1)
    assert first.acquire() < 1.0  # create, no waiting
    first.announce([f"{namespace}/gpu-operator"])  # update
    first.start_renewing(on_lost=lambda reason: pytest.fail(f"lost the Lease: {reason}"))
    first.release()  # get + update

    stored = control_plane.admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease_name}")
    assert stored["metadata"]["annotations"][RELEASES_ANNOTATION]
    assert not stored["spec"].get("holderIdentity"), "released"

    second = InstallLease(api, namespace, settings(lease_name, "pod-b"), poll_seconds=0.1)
    assert second.acquire() < 1.0  # the released Lease is taken with get + update
    assert f"{namespace}/gpu-operator" in second.announced_before
    second.release()
    assert first.lost is False


def test_the_lease_role_grants_no_other_lease(helm: Helm, control_plane: ControlPlane, namespace: str) -> None:
    lease_name, token = lease_rbac_only(helm, control_plane, namespace)
    api = ClientKubeApi(control_plane.kubernetes_client(token))
    other = f"{lease_name}-other"
    control_plane.admin.create(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
        {"metadata": {"name": other}, "spec": {"holderIdentity": "someone"}},
    )
    with pytest.raises(LeaseError, match="HTTP 403") as caught:
        api.get_lease(namespace, other)
    assert token not in caught.value.message
    assert "may not read Leases" in caught.value.message
    with pytest.raises(LeaseError, match="may not update Leases"):
        api.replace_lease(namespace, LeaseRecord(name=other, holder="me", resource_version="1"))

    elsewhere = f"{namespace[:50]}-x"
    control_plane.ensure_namespace(elsewhere)
    with pytest.raises(LeaseError, match=r"HTTP 403.*may not create Leases"):
        api.create_lease(elsewhere, LeaseRecord(name=lease_name, holder="me"))
    with pytest.raises(LeaseError, match="HTTP 403"):
        api.get_lease(elsewhere, lease_name)
