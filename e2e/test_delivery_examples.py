"""The delivery examples, validated by a real API server against the real CRDs.

Flux's CustomResourceDefinitions (from the pinned source- and helm-controller
modules) and Argo CD's (from the pinned argo-cd module) are installed into the
session's kube-apiserver, and every object of examples/delivery/flux-helmrelease.yaml
and examples/delivery/argocd-application.yaml is created with a server-side dry run
and strict field validation: an unknown or misspelled field, a wrong type, a
missing required field or a value outside an enum is refused exactly as on a
cluster, and nothing is stored.

k0rdent's example is not here: its CRDs' Go module (github.com/K0rdent/kcm) is
not served by the module proxy this machine reaches.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import install_crds
from e2e.harness.kube import KubeError
from e2e.tools import REPO_ROOT, argocd_crds, flux_crds

pytestmark = pytest.mark.e2e

FLUX_EXAMPLE = REPO_ROOT / "examples" / "delivery" / "flux-helmrelease.yaml"
ARGOCD_EXAMPLE = REPO_ROOT / "examples" / "delivery" / "argocd-application.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

#: (apiVersion group, kind) -> plural, for every CRD a fixture installed
PLURALS: dict[tuple[str, str], str] = {}


def install(plane: ControlPlane, paths: list[Path]) -> None:
    """The CRDs, applied and Established (``install_crds``), and their plurals noted."""
    for path in paths:
        crd = yaml.safe_load(path.read_text())
        PLURALS[crd["spec"]["group"], crd["spec"]["names"]["kind"]] = crd["spec"]["names"]["plural"]
    install_crds(plane, paths)


def docs_of(example: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(example.read_text()) if doc]


@pytest.fixture(scope="module")
def flux(control_plane: ControlPlane) -> ControlPlane:
    install(control_plane, sorted(flux_crds().glob("*.yaml")))
    return control_plane


@pytest.fixture(scope="module")
def argocd(control_plane: ControlPlane) -> ControlPlane:
    # Only the CRDs of the kinds the example uses (Application) and the AppProject
    # it names: ApplicationSet's CRD is 1.4 MB of OpenAPI the API server would
    # have to build for nothing.
    kinds = {doc["kind"] for doc in docs_of(ARGOCD_EXAMPLE)} | {"AppProject"}
    paths = [
        p
        for p in sorted(argocd_crds().glob("*.yaml"))
        if yaml.safe_load(p.read_text())["spec"]["names"]["kind"] in kinds
    ]
    assert len(paths) == len(kinds), f"{kinds} in {argocd_crds()}"
    install(control_plane, paths)
    return control_plane


def collection(doc: dict[str, Any]) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    plural = PLURALS[group, doc["kind"]]
    return f"/apis/{group}/{version}/namespaces/{doc['metadata']['namespace']}/{plural}"


def dry_run_create(plane: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    plane.ensure_namespace(doc["metadata"]["namespace"])
    return plane.admin.request("POST", collection(doc), doc, query={"dryRun": "All", "fieldValidation": "Strict"})


def flux_docs() -> list[dict[str, Any]]:
    return docs_of(FLUX_EXAMPLE)


def test_the_flux_example_is_accepted_by_the_real_crds(flux: ControlPlane) -> None:
    docs = flux_docs()
    assert [doc["kind"] for doc in docs] == ["Namespace", "OCIRepository", "HelmRelease"]
    namespace, *flux_objects = docs
    # Under another name: the session's API server may already have the example's
    # namespace (a dry run of an existing name answers 409).
    fresh = {**namespace, "metadata": {**namespace["metadata"], "name": f"{namespace['metadata']['name']}-dry-run"}}
    created_namespace = flux.admin.request(
        "POST", "/api/v1/namespaces", fresh, query={"dryRun": "All", "fieldValidation": "Strict"}
    )
    assert created_namespace["kind"] == "Namespace"
    assert flux_objects[0]["metadata"]["namespace"] == flux_objects[1]["metadata"]["namespace"]
    for doc in flux_objects:
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


def test_the_argocd_example_is_accepted_by_the_real_crds(argocd: ControlPlane) -> None:
    docs = docs_of(ARGOCD_EXAMPLE)
    assert {doc["kind"] for doc in docs} == {"Application"}
    for doc in docs:
        created = dry_run_create(argocd, doc)
        assert created["kind"] == doc["kind"]
        assert "uid" in created["metadata"]  # the server answered, not an echo
        # Nothing the example states was pruned as unknown (valuesObject included).
        for key, value in doc["spec"].items():
            assert created["spec"][key] == value, f"{doc['kind']} spec.{key}"
    assert argocd.admin.get(f"{collection(docs[0])}")["items"] == [], "a dry run stores nothing"


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``value`` at the dotted ``path`` (a None value removes it)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))
    *parents, leaf = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        ("spec.source.helm.valueObject", {"service": "eks"}, 'unknown field "spec.source.helm.valueObject"'),
        ("spec.syncPolicy.automated.prun", True, 'unknown field "spec.syncPolicy.automated.prun"'),
        ("spec.syncPolicy.automated.selfHeal", "yes", "spec.syncPolicy.automated.selfHeal"),
        ("spec.destination", None, "spec.destination: Required value"),
    ],
    ids=["misspelled valuesObject", "misspelled prune", "wrong type", "missing destination"],
)
def test_the_api_server_would_refuse_a_broken_argocd_application(
    argocd: ControlPlane, path: str, value: Any, words: str
) -> None:
    """The dry run is a real check: a typo in the example would fail this suite."""
    [application] = docs_of(ARGOCD_EXAMPLE)
    with pytest.raises(KubeError) as raised:
        dry_run_create(argocd, _with(application, path, value))
    assert raised.value.status in (400, 422)  # strict decoding (400) or schema validation (422)
    assert words in str(raised.value), raised.value
