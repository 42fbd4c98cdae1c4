"""The ``rbac.extraRules`` docs/installing.md ("Permissions") gives for the recipe
eks/h100/training/ubuntu are exactly what its real charts need beyond the chart's
narrower ClusterRole (``rbac.clusterAdmin: false``): every object the install
creates is granted, and every documented rule is needed.

What the install creates: the real aicr v0.11.1's bundle of the recipe; each
component chart (the shared test data's real charts, two stand-ins named in
tests/support/real_aicr.py) rendered with the bundle's values as ``aicr-runner
mirror`` renders them (``collect`` through a recording renderer: hooks included,
the recipe's lowest Kubernetes version); the CRDs of the charts' ``crds/``
folders, which helm installs before the templates (a disabled subchart's too:
they name kinds, and CRDs are the ClusterRole's); and the bundle's
``<component>/manifests/*.yaml``, which deploy.sh applies with kubectl.
``helm template`` renders with helm's default capabilities (an empty cluster: a
first install); rendering again with every API of the install's CRDs served, and
the snapshot, VerticalPodAutoscaler and OpenShift APIs some charts look for,
changed only the APIService's version (checked by hand, same group and resource).

Each object's kind maps to its API group and resource: a kind a CRD of the install
defines by that CRD's ``spec.names``, a built-in kind by ``BUILT_IN``; any other
kind fails the test by name. The rules are read from the chart's render and from
the docs' YAML block, never copied here. The namespaced Role counts only for
objects in the release namespace, where none of this recipe's components install.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.aicr.recipe import load_recipe
from aicr_runner.mirror.collect import Release, collect
from aicr_runner.mirror.render import ChartRef, HelmRenderer
from tests.chart.helm import helm_binary, renders
from tests.support.installing_doc import documented_extra_rules
from tests.support.real_aicr import RealAicr, RealAicrMissing, recipe_charts_dir

pytestmark = pytest.mark.helm

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "installing.md"
CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
#: The chart's release namespace in tests/chart/helm.py's renders (its Role's namespace).
RELEASE_NAMESPACE = "aicr"
#: What helm does to an object it installs, upgrades, rolls back or uninstalls
#: (kubectl apply, for the bundle's manifests, a subset): the verbs the ClusterRole
#: grants for every kind component charts render.
HELM_VERBS = frozenset({"get", "list", "create", "update", "patch", "delete"})
#: The ClusterRole creates and patches namespaces and never deletes one (docs/installing.md).
NAMESPACE_VERBS_WITHHELD = {"update", "delete"}

#: (API group, kind) -> (resource, namespaced): the built-in kinds the install creates.
BUILT_IN: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "ConfigMap"): ("configmaps", True),
    ("", "LimitRange"): ("limitranges", True),
    ("", "Namespace"): ("namespaces", False),
    ("", "Secret"): ("secrets", True),
    ("", "Service"): ("services", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): ("mutatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): ("validatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): ("validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings",
        False,
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("apiregistration.k8s.io", "APIService"): ("apiservices", False),
    ("apps", "DaemonSet"): ("daemonsets", True),
    ("apps", "Deployment"): ("deployments", True),
    ("batch", "Job"): ("jobs", True),
    ("networking.k8s.io", "NetworkPolicy"): ("networkpolicies", True),
    ("policy", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("rbac.authorization.k8s.io", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("rolebindings", True),
    ("resource.k8s.io", "DeviceClass"): ("deviceclasses", False),
    ("scheduling.k8s.io", "PriorityClass"): ("priorityclasses", False),
    ("storage.k8s.io", "CSIDriver"): ("csidrivers", False),
}

Pair = tuple[str, str]


class _CrdLoader(yaml.SafeLoader):
    """Safe, plus the YAML 1.1 ``=`` scalar a CRD's enum may hold (Go's YAML reads it as text)."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Installed:
    """One object the install creates, and where it comes from."""

    source: str
    #: The namespace of the component that creates it (a namespaced object without one lands there).
    namespace: str
    doc: Mapping[str, Any]

    @property
    def group_kind(self) -> Pair:
        api = str(self.doc.get("apiVersion", ""))
        return (api.rpartition("/")[0], str(self.doc.get("kind", "")))

    @property
    def label(self) -> str:
        name = (self.doc.get("metadata") or {}).get("name", "?")
        return f"{self.group_kind[1]} {name} ({self.source})"


class RecordingRenderer:
    """``HelmRenderer`` that keeps each chart's render and archive."""

    def __init__(self, inner: HelmRenderer, charts: Path) -> None:
        self.inner, self.charts = inner, charts
        self.rendered: list[tuple[ChartRef, str]] = []

    def render(self, chart: ChartRef, values: Sequence[Path], kube_version: str | None) -> str:
        text = self.inner.render(chart, values, kube_version)
        self.rendered.append((chart, text))
        return text

    def archive_facts(self, chart: ChartRef) -> tuple[str, int] | None:
        return self.inner.archive_facts(chart)

    def archive(self, chart: ChartRef) -> Path:
        return self.charts / f"{chart.chart}-{chart.version}.tgz"


def _documents(text: str | bytes, loader: Any = yaml.CSafeLoader) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.load_all(text, Loader=loader) if doc]
    return [item for doc in docs for item in (doc.get("items") or [] if doc.get("kind") == "List" else [doc])]


def _archive_crds(archive: Path) -> list[dict[str, Any]]:
    """The files helm installs from the chart's and its subcharts' ``crds/`` folders."""
    crds: list[dict[str, Any]] = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile() and re.fullmatch(r"[^/]+/(charts/[^/]+/)*crds/.+\.(ya?ml|json)", member.name):
                source = tar.extractfile(member)
                assert source is not None
                crds.extend(_documents(source.read(), _CrdLoader))
    return crds


@pytest.fixture(scope="module")
def installed(real_aicr: RealAicr, tmp_path_factory: pytest.TempPathFactory) -> list[Installed]:
    try:
        charts = recipe_charts_dir(tmp_path_factory.mktemp("charts"))
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    call, bundle = real_aicr.bundle(CRITERIA)
    assert call.exit_code == 0, call.stderr[-2000:]
    summary = load_recipe(bundle / "recipe.yaml")
    renderer = RecordingRenderer(HelmRenderer(str(helm_binary(4)), charts), charts)
    collect(Release(summary, {}, bundle, (), "0.11.1", "aicr-runner:test"), renderer)
    objects: list[Installed] = []
    for chart, text in renderer.rendered:
        objects += [Installed(f"{chart.component} chart", chart.namespace, d) for d in _documents(text)]
        crds = _archive_crds(renderer.archive(chart))
        objects += [Installed(f"{chart.component} chart crds/", chart.namespace, d) for d in crds]
    for component in summary.components:
        for manifest in sorted((bundle / component.name / "manifests").glob("*.y*ml")):
            where = f"bundle {component.name}/manifests/{manifest.name}"
            objects += [Installed(where, component.namespace, d) for d in _documents(manifest.read_text())]
    assert len(renderer.rendered) == 11, [chart.component for chart, _ in renderer.rendered]
    return objects


def _resources(objects: Iterable[Installed]) -> dict[Pair, tuple[str, bool]]:
    """(group, kind) -> (resource, namespaced): the CRDs' among the objects, then the built-ins."""
    known = dict(BUILT_IN)
    for obj in objects:
        if obj.group_kind == ("apiextensions.k8s.io", "CustomResourceDefinition"):
            spec = obj.doc["spec"]
            known[(spec["group"], spec["names"]["kind"])] = (spec["names"]["plural"], spec["scope"] == "Namespaced")
    return known


def _granted(rules: Iterable[Mapping[str, Any]], group: str, resource: str) -> set[str]:
    """The verbs ``rules`` grant on every object of group/resource (rules by resourceNames grant no create)."""
    verbs: set[str] = set()
    for rule in rules:
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            continue
        if {group, "*"} & set(rule.get("apiGroups") or ()) and {resource, "*"} & set(rule.get("resources") or ()):
            verbs |= set(rule.get("verbs") or ())
    return {"get", "list", "watch", "create", "update", "patch", "delete"} if "*" in verbs else verbs


def _not_granted(
    objects: Sequence[Installed], cluster_rules: Sequence[Mapping[str, Any]], role_rules: Sequence[Mapping[str, Any]]
) -> tuple[dict[Pair, set[str]], dict[Pair, list[str]]]:
    """(group, resource) -> the helm verbs neither role grants, and the objects that need them."""
    known = _resources(objects)
    missing: dict[Pair, set[str]] = {}
    needers: dict[Pair, list[str]] = {}
    for obj in objects:
        if obj.group_kind not in known:
            api, kind = obj.doc.get("apiVersion"), obj.group_kind[1]
            reason = "is neither a CRD of the install nor in BUILT_IN: add it to BUILT_IN"
            pytest.fail(f"{obj.label}: apiVersion {api!r} kind {kind!r} {reason}", pytrace=False)
        resource, namespaced = known[obj.group_kind]
        pair = (obj.group_kind[0], resource)
        in_release_ns = (
            namespaced and (obj.doc.get("metadata") or {}).get("namespace", obj.namespace) == RELEASE_NAMESPACE
        )
        rules = [*cluster_rules, *(role_rules if in_release_ns else ())]
        lacking = HELM_VERBS - _granted(rules, *pair)
        if lacking:
            missing.setdefault(pair, set()).update(lacking)
            needers.setdefault(pair, []).append(obj.label)
    return missing, needers


def _chart_rules(extra_rules: Sequence[Mapping[str, Any]] = ()) -> tuple[list[Any], list[Any]]:
    """The rules of the chart's ClusterRole and namespaced Role with ``rbac.clusterAdmin=false``."""
    result = renders({"criteria": CRITERIA, "rbac": {"clusterAdmin": False, "extraRules": list(extra_rules)}}, raw=True)
    return result.one("ClusterRole")["rules"], result.one("Role")["rules"]


def _pairs(rules: Iterable[Mapping[str, Any]]) -> list[Pair]:
    return [(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]]


def _listing(pairs: Iterable[Pair], needers: Mapping[Pair, list[str]] | None = None) -> str:
    lines = []
    for group, resource in sorted(pairs):
        by = needers.get((group, resource), []) if needers else []
        more = f" and {len(by) - 3} more" if len(by) > 3 else ""
        lines.append(f"  {group or 'core'}/{resource}" + (f" (for {'; '.join(by[:3])}{more})" if by else ""))
    return "\n".join(lines)


def test_the_documented_extra_rules_are_exactly_what_the_charts_need(installed: list[Installed]) -> None:
    missing, needers = _not_granted(installed, *_chart_rules())
    # The one Namespace a chart renders: created and patched, never deleted (the role's choice).
    withheld = missing.pop(("", "namespaces"), None)
    assert withheld == NAMESPACE_VERBS_WITHHELD, f"namespaces: the ClusterRole now withholds {withheld}"
    assert needers[("", "namespaces")] == ["Namespace kai-resource-reservation (kai-scheduler chart)"]
    documented = _pairs(documented_extra_rules())
    assert len(documented) == len(set(documented)), f"{DOC}: a resource is listed twice:\n{_listing(documented)}"
    undocumented = set(missing) - set(documented)
    assert not undocumented, (
        f"the install creates these and neither the chart's ClusterRole nor {DOC.name}'s extraRules grant "
        f"{sorted(HELM_VERBS)} on them (the install would be refused):\n{_listing(undocumented, needers)}"
    )
    unneeded = set(documented) - set(missing)
    assert not unneeded, (
        f"{DOC.name}'s extraRules grant these, which the chart's ClusterRole already grants or the install "
        f"never creates:\n{_listing(unneeded)}"
    )
    for rule in documented_extra_rules():
        assert set(rule["verbs"]) >= HELM_VERBS, f"{DOC.name}: {rule} lacks {sorted(HELM_VERBS - set(rule['verbs']))}"


def test_with_the_documented_rules_the_chart_grants_every_object(installed: list[Installed]) -> None:
    """The docs' block as values: the chart's ClusterRole then carries it, and only the
    Namespace's update and delete stay withheld."""
    missing, needers = _not_granted(installed, *_chart_rules(documented_extra_rules()))
    assert missing == {("", "namespaces"): NAMESPACE_VERBS_WITHHELD}, _listing(missing, needers)
