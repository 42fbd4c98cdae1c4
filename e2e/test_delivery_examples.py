"""The delivery examples, validated by a real API server against the real CRDs.

Flux's CustomResourceDefinitions (from the pinned source- and helm-controller
modules) are installed into the session's kube-apiserver, and every Flux object of
examples/delivery/flux-helmrelease.yaml is created with a server-side dry run and
strict field validation: an unknown or misspelled field, a wrong type or a value
outside an enum is refused exactly as on a cluster, and nothing is stored.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import KubeError
from e2e.tools import REPO_ROOT, flux_crds

pytestmark = pytest.mark.e2e

FLUX_EXAMPLE = REPO_ROOT / "examples" / "delivery" / "flux-helmrelease.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def flux(control_plane: ControlPlane) -> ControlPlane:
    admin = control_plane.admin
    names = []
    for path in sorted(Path(flux_crds()).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        if not admin.exists(f"{CRDS}/{crd['metadata']['name']}"):
            admin.create(CRDS, crd)
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            conditions = admin.get(f"{CRDS}/{name}").get("status", {}).get("conditions", [])
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established within 60s"
            time.sleep(0.2)
    return control_plane


def collection(doc: dict[str, Any]) -> str:
    group_version = doc["apiVersion"]
    plural = {"OCIRepository": "ocirepositories", "HelmRelease": "helmreleases"}[doc["kind"]]
    return f"/apis/{group_version}/namespaces/{doc['metadata']['namespace']}/{plural}"


def dry_run_create(plane: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    plane.ensure_namespace(doc["metadata"]["namespace"])
    return plane.admin.request("POST", collection(doc), doc, query={"dryRun": "All", "fieldValidation": "Strict"})


def flux_docs() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(FLUX_EXAMPLE.read_text()) if doc]


def test_the_flux_example_is_accepted_by_the_real_crds(flux: ControlPlane) -> None:
    docs = flux_docs()
    assert {doc["kind"] for doc in docs} == {"OCIRepository", "HelmRelease"}
    for doc in docs:
        created = dry_run_create(flux, doc)
        assert created["kind"] == doc["kind"]
        # Nothing the example states was pruned as unknown.
        for key, value in doc["spec"].items():
            assert created["spec"][key] == value, f"{doc['kind']} spec.{key}"


def test_the_chart_source_is_verified_with_cosign_keyless(flux: ControlPlane) -> None:
    [source] = [doc for doc in flux_docs() if doc["kind"] == "OCIRepository"]
    verify = dry_run_create(flux, source)["spec"]["verify"]
    assert verify["provider"] == "cosign"
    [identity] = verify["matchOIDCIdentity"]
    assert identity["issuer"] == r"^https://token\.actions\.githubusercontent\.com$"
    assert identity["subject"].startswith(
        r"^https://github\.com/nvidia-aicr/aicr-runner/\.github/workflows/release\.yaml@"
    )
    # The README's snippet (from docs/chart.md) is this example's source, verbatim.
    page = (REPO_ROOT / "docs" / "chart.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, re.S)]
    [snippet] = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "OCIRepository"]
    assert snippet == source


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"provider": "gpg"}, "Unsupported value"),
        ({"matchOIDCIdentity": [{"issuer": "x"}]}, "subject"),
        ({"matchOIDCIdentities": []}, "unknown field"),
    ],
    ids=["unknown provider", "identity without subject", "misspelled field"],
)
def test_the_api_server_would_refuse_a_broken_verify(flux: ControlPlane, change: dict[str, Any], words: str) -> None:
    """The dry run is a real check: it catches what a typo in the example would be."""
    [source] = [doc for doc in flux_docs() if doc["kind"] == "OCIRepository"]
    broken = {**source, "spec": {**source["spec"], "verify": {"provider": "cosign", **change}}}
    with pytest.raises(KubeError) as raised:
        dry_run_create(flux, broken)
    assert raised.value.status in (400, 422)  # strict decoding (400) or schema validation (422)
    assert words in str(raised.value), raised.value
