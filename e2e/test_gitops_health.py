"""The Flux and Sveltos examples of ``examples/`` against the real API server:
the Kustomization with ``healthCheckExprs`` passes a server-side dry run
against kustomize-controller's own CRD (``flux_crds()``), the HealthCheck
against libsveltos' (``sveltos_crds()``), both the pinned modules' YAML; the
same objects with a field missing that the CRD requires are refused, so the dry
run is a real check of the shape."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import install_crds
from e2e.harness.kube import KubeError
from e2e.tools import flux_crds, sveltos_crds

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "flux-kustomization-health.yaml"
HEALTHCHECKS = "/apis/lib.projectsveltos.io/v1beta1/healthchecks"
KUSTOMIZATIONS = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{namespace}/kustomizations"


def dry_run_create(plane: ControlPlane, namespace: str, doc: dict[str, Any]) -> dict[str, Any]:
    doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    path = KUSTOMIZATIONS.format(namespace=namespace)
    return plane.admin.request("POST", path, doc, query={"dryRun": "All", "fieldValidation": "Strict"})


def test_the_flux_kustomization_passes_a_server_side_dry_run_against_its_crd(
    control_plane: ControlPlane, namespace: str
) -> None:
    install_crds(control_plane, sorted(flux_crds().glob("kustomize.toolkit.fluxcd.io_*.yaml")))
    doc = yaml.safe_load(EXAMPLE.read_text())
    accepted = dry_run_create(control_plane, namespace, doc)
    assert accepted["spec"]["healthCheckExprs"] == doc["spec"]["healthCheckExprs"]
    assert not control_plane.admin.exists(KUSTOMIZATIONS.format(namespace=namespace) + "/" + doc["metadata"]["name"])

    broken = copy.deepcopy(doc)
    del broken["spec"]["healthCheckExprs"][0]["current"]
    with pytest.raises(KubeError) as refused:
        dry_run_create(control_plane, namespace, broken)
    assert refused.value.status == 422
    assert "current" in str(refused.value)


def test_the_sveltos_healthcheck_passes_a_server_side_dry_run_against_its_crd(control_plane: ControlPlane) -> None:
    install_crds(control_plane, sveltos_crds())
    doc = yaml.safe_load((EXAMPLES / "sveltos-healthcheck.yaml").read_text())
    query = {"dryRun": "All", "fieldValidation": "Strict"}
    accepted = control_plane.admin.request("POST", HEALTHCHECKS, doc, query=query)
    assert accepted["spec"]["evaluateHealth"] == doc["spec"]["evaluateHealth"]
    assert accepted["spec"]["resourceSelectors"] == doc["spec"]["resourceSelectors"]

    broken = copy.deepcopy(doc)
    broken["spec"]["resourceSelectors"][0]["labelFilters"][0]["operation"] = "Equals"
    with pytest.raises(KubeError) as refused:
        control_plane.admin.request("POST", HEALTHCHECKS, broken, query=query)
    assert refused.value.status == 422
    assert "operation" in str(refused.value)
