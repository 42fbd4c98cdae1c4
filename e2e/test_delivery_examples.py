"""The examples, as their comments say, against a real API server and the real CRDs.

Every file in examples/ opens with the commands that use it, "In order". Each
example's commands run here in that order against the session's kube-apiserver,
with the objects they make checked by a strict server-side dry run (``kubectl
--dry-run=server --validate=strict``; ``fieldValidation=Strict`` through the API):
an unknown or misspelled field, a wrong type, a missing required field, a value
outside an enum, or an object in a namespace that does not exist yet is refused
exactly as on a cluster, and nothing is stored. ``kubectl create secret ...`` runs
as written; ``kubectl apply -f`` applies the file's objects one by one, in the
file's order; ``helm upgrade --install`` of the published chart renders this
checkout's chart (the same version) with the same flags and applies what it
renders. Namespaces are the exception: a dry-run namespace does not exist for the
next object, so a Namespace (from ``kubectl create namespace``, a manifest or
``--create-namespace``) is dry-run checked and then created for real. Every run
gets its own namespace names (``aicr`` becomes ``aicr-<run>``), so one example
cannot lean on what another created; the namespaces a tool's installation makes
(``argocd`` for Argo CD, ``kcm-system`` for k0rdent) exist from the start.

Flux's CustomResourceDefinitions (from the pinned source- and helm-controller
modules) and Argo CD's (from the pinned argo-cd module) are installed. Kinds
without a CRD here are checked as strict YAML instead (no duplicate key; a name;
a namespace exactly when the kind is namespaced, and one that exists at that point
in the order): k0rdent's ServiceTemplate and MultiClusterService (their CRDs' Go
module, github.com/K0rdent/kcm, is not served by the module proxy this machine
reaches) and Sveltos's ClusterProfile (not vendored by this project). The manifests
a Sveltos ClusterProfile Secret carries are applied as a child cluster would, in
their order.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.flux import install_crds
from e2e.harness.kube import KubeError
from e2e.tools import REPO_ROOT, argocd_crds, flux_crds, tool

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
    argo = {doc["kind"] for doc in docs_of(ARGOCD_EXAMPLE) if doc["apiVersion"].startswith("argoproj.io/")}
    kinds = argo | {"AppProject"}
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
    # The snippet in docs/supply-chain.md is this example's source, verbatim.
    page = (REPO_ROOT / "docs" / "supply-chain.md").read_text()
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
    assert [doc["kind"] for doc in docs] == ["Secret", "Application"]
    for doc in docs[1:]:
        created = dry_run_create(argocd, doc)
        assert created["kind"] == doc["kind"]
        assert "uid" in created["metadata"]  # the server answered, not an echo
        # Nothing the example states was pruned as unknown (valuesObject included).
        for key, value in doc["spec"].items():
            assert created["spec"][key] == value, f"{doc['kind']} spec.{key}"
    assert argocd.admin.get(f"{collection(docs[1])}")["items"] == [], "a dry run stores nothing"


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
    [application] = [doc for doc in docs_of(ARGOCD_EXAMPLE) if doc["kind"] == "Application"]
    with pytest.raises(KubeError) as raised:
        dry_run_create(argocd, _with(application, path, value))
    assert raised.value.status in (400, 422)  # strict decoding (400) or schema validation (422)
    assert words in str(raised.value), raised.value


# -- every example, as its comments say, in their order ---------------------------------------------

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*/*.yaml"))
#: The published chart the values examples install; this checkout's chart stands in for it.
PUBLISHED_CHART = "oci://ghcr.io/nvidia-aicr/charts/nvidia-aicr"
#: Kinds with no CRD in this suite -> whether they are namespaced (see the module docstring).
WITHOUT_CRD: dict[tuple[str, str], bool] = {
    ("k0rdent.mirantis.com/v1beta1", "ServiceTemplate"): True,
    ("k0rdent.mirantis.com/v1beta1", "MultiClusterService"): False,
    ("config.projectsveltos.io/v1beta1", "ClusterProfile"): False,
}
#: Namespaces the examples name, renamed per run.
EXAMPLE_NAMESPACES = ("aicr", "argocd", "kcm-system")
#: What the delivery tools' own installations create: Argo CD's and k0rdent's namespaces.
INSTALLED_BY_THE_TOOLS = ("argocd", "kcm-system")
#: The variables the examples' commands read, with stand-in values.
STEP_VARIABLES = {"REGISTRY_USER": "robot", "REGISTRY_TOKEN": "not-a-token", "OIDC_TOKEN": "not.an.oidc-token"}
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class StepFailed(AssertionError):
    """A documented command that would fail on a cluster, with what the cluster said."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML that refuses a duplicate key (plain PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(key, deep=True) for key, _ in node.value]
    repeated = sorted({str(key) for key in keys if keys.count(key) > 1})
    if repeated:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {repeated}", node.start_mark)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def strict_docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc]


def documented_steps(example: Path) -> list[str]:
    """The commands under the example's ``# In order ...:`` comment, continuation lines joined."""
    lines = example.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# In order")), None)
    assert start is not None, f"{example.name} does not say in which order to use it (# In order ...)"
    steps: list[str] = []
    pending = ""
    for line in lines[start + 1 :]:
        if not line.startswith("#   "):
            if steps or pending:
                break
            continue  # the sentence that opened the block wraps onto this line
        pending += line[1:].strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        steps.append(pending)
        pending = ""
    assert not pending, f"{example.name}: a continued line ends the block: {pending}"
    return steps


def command_argv(step: str, variables: dict[str, str]) -> list[str]:
    """``step`` as a POSIX shell reads it: one command, quotes removed, ``$VAR`` expanded."""
    lexer = shlex.shlex(step, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    argv = list(lexer)
    operators = [word for word in argv if word and set(word) <= set("();<>|&")]
    if operators or "$(" in step or "`" in step:
        raise StepFailed(f"{step!r}: not one plain command (shell operators {operators} or substitutions)")

    def expand(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise StepFailed(f"{step!r}: ${name} is not a variable the example's comment names")
        return variables[name]

    return [re.sub(r"\$(?:\{(\w+)\}|(\w+))", expand, word) for word in argv]


@dataclass
class ExampleRun:
    """Runs an example's commands against the session's API server under fresh namespace names."""

    plane: ControlPlane
    home: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    #: namespaces that exist (as renamed) at this point of the order
    namespaces: set[str] = field(default_factory=set)
    #: (kind, namespace/name) of every object the API server accepted (dry run) or was checked as YAML
    checked: list[tuple[str, str]] = field(default_factory=list)

    def rename(self, namespace: str) -> str:
        return f"{namespace}-{self.suffix}" if namespace in EXAMPLE_NAMESPACES else namespace

    def tools_installed(self) -> None:
        for namespace in INSTALLED_BY_THE_TOOLS:
            self.create_namespace(self.rename(namespace))

    # -- processes -----------------------------------------------------------------------------
    def _run(self, argv: list[str], *, stdin: str | None = None) -> str:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "KUBECONFIG": str(self.plane.kubeconfig)}
        proc = subprocess.run(
            argv, cwd=REPO_ROOT, env=env, input=stdin, capture_output=True, text=True, check=False, timeout=120
        )
        if proc.returncode != 0:
            raise StepFailed(f"{' '.join(argv)} (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    def kubectl(self, *argv: str, stdin: str | None = None) -> str:
        return self._run([str(tool("kubectl")), *argv], stdin=stdin)

    # -- steps ---------------------------------------------------------------------------------
    def step(self, step: str) -> None:
        argv = command_argv(step, {"HOME": str(self.home), **STEP_VARIABLES})
        if argv[0] == "kubectl":
            self.kubectl_step(argv[1:])
        elif argv[0] == "helm":
            self.helm_step(argv[1:])
        else:
            raise StepFailed(f"{step!r}: this suite runs kubectl and helm steps")

    def kubectl_step(self, args: list[str]) -> None:
        namespace, args = self._namespace_flag(args)
        if args[:2] == ["create", "namespace"] and len(args) == 3:
            self.create_namespace(self.rename(args[2]))
        elif args[:1] == ["create"]:
            scope = ["-n", namespace] if namespace else []
            made = json.loads(self.kubectl(*scope, *args, "--dry-run=server", "--validate=strict", "-o", "json"))
            self.checked.append((made["kind"], f"{namespace}/{made['metadata']['name']}"))
        elif args[:2] == ["apply", "-f"] and len(args) == 3 and namespace is None:
            for doc in strict_docs((REPO_ROOT / args[2]).read_text()):
                self.apply(doc, rename=True)
        else:
            raise StepFailed(f"kubectl {' '.join(args)}: not a step this suite knows how to check")

    def helm_step(self, args: list[str]) -> None:
        namespace, args = self._namespace_flag(args)
        if args[:2] != ["upgrade", "--install"] or len(args) < 4 or namespace is None:
            raise StepFailed(f"helm {' '.join(args)}: expected helm upgrade --install RELEASE CHART -n NAMESPACE ...")
        release, chart, rest = args[2], args[3], args[4:]
        assert chart == PUBLISHED_CHART, chart
        version = yaml.safe_load((REPO_ROOT / "chart" / "Chart.yaml").read_text())["version"]
        flags: list[str] = []
        words = iter(rest)
        for word in words:
            if word == "--version":
                assert next(words) == version, "the example installs another chart version than this checkout's"
            elif word == "--create-namespace":
                if namespace not in self.namespaces:
                    self.create_namespace(namespace)
            elif word in ("-f", "--values", "--set", "--set-string"):
                flags += [word, next(words)]
            else:
                raise StepFailed(f"helm: {word}: a flag this suite does not translate")
        if namespace not in self.namespaces:
            raise StepFailed(
                f'helm upgrade --install -n {namespace}: Error: create: namespaces "{namespace}" not found'
            )
        rendered = self._run(
            [str(tool("helm")), "template", release, str(REPO_ROOT / "chart"), "-n", namespace, *flags]
        )
        for doc in strict_docs(rendered):
            self.apply(doc, rename=False)

    def _namespace_flag(self, args: list[str]) -> tuple[str | None, list[str]]:
        out, namespace = [], None
        words = iter(args)
        for word in words:
            if word in ("-n", "--namespace"):
                namespace = self.rename(next(words))
            elif word.startswith("--namespace="):
                namespace = self.rename(word.partition("=")[2])
            else:
                out.append(word)
        return namespace, out

    # -- objects -------------------------------------------------------------------------------
    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name, "--dry-run=server", "--validate=strict")
        self.kubectl("create", "namespace", name)
        self.namespaces.add(name)

    def apply(self, doc: dict[str, Any], *, rename: bool) -> None:
        doc = copy.deepcopy(doc)
        meta = doc.setdefault("metadata", {})
        if rename and doc.get("kind") == "Namespace":
            meta["name"] = self.rename(meta["name"])
        elif rename and "namespace" in meta:
            meta["namespace"] = self.rename(meta["namespace"])
        key = (doc.get("apiVersion", ""), doc.get("kind", ""))
        where = f"{meta.get('namespace', '')}/{meta.get('name')}"
        if key in WITHOUT_CRD:
            self._check_without_crd(doc, namespaced=WITHOUT_CRD[key])
        elif doc.get("kind") == "Namespace":
            body = json.dumps(doc)
            self.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-", stdin=body)
            self.kubectl("apply", "--server-side", "-f", "-", stdin=body)
            self.namespaces.add(meta["name"])
        else:
            body = json.dumps(doc)
            self.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-", stdin=body)
        self.checked.append((str(doc.get("kind")), where))
        if doc.get("kind") == "Secret" and doc.get("type") == "addons.projectsveltos.io/cluster-profile":
            # What Sveltos applies in each child the ClusterProfile selects, in its order.
            for manifests in doc.get("stringData", {}).values():
                for child in strict_docs(manifests):
                    self.apply(child, rename=True)

    def _check_without_crd(self, doc: dict[str, Any], *, namespaced: bool) -> None:
        meta = doc["metadata"]
        what = f"{doc['kind']} {meta.get('name')!r}"
        if not isinstance(meta.get("name"), str) or not _DNS1123.fullmatch(meta["name"]):
            raise StepFailed(f"{what}: metadata.name must be a DNS-1123 name")
        if not isinstance(doc.get("spec"), dict):
            raise StepFailed(f"{what}: no spec")
        if namespaced and "namespace" not in meta:
            raise StepFailed(f"{what}: a namespaced kind without metadata.namespace")
        if not namespaced and "namespace" in meta:
            raise StepFailed(f"{what}: a cluster-scoped kind with metadata.namespace {meta['namespace']!r}")
        if namespaced and meta["namespace"] not in self.namespaces:
            raise StepFailed(f'{what}: namespaces "{meta["namespace"]}" not found')


@pytest.fixture
def example_run(flux: ControlPlane, argocd: ControlPlane, tmp_path: Path) -> ExampleRun:
    """A fresh run: Flux's and Argo CD's CRDs installed, Argo CD's and k0rdent's
    namespaces made, and a HOME whose ~/.docker/config.json the Flux example reads."""
    docker = tmp_path / ".docker"
    docker.mkdir()
    (docker / "config.json").write_text('{"auths": {"ghcr.io": {"auth": "cm9ib3Q6bm90LWEtdG9rZW4="}}}')
    run = ExampleRun(flux, home=tmp_path)
    run.tools_installed()
    return run


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_example_works_as_its_comments_say_in_their_order(example_run: ExampleRun, example: Path) -> None:
    steps = documented_steps(example)
    assert steps, example.name
    for step in steps:
        example_run.step(step)
    # Each command reached the API server (or the strict YAML check), and the file's own
    # objects are among what was checked.
    names = {where.rpartition("/")[2] for _, where in example_run.checked}
    for doc in strict_docs(example.read_text()):
        if "kind" in doc:
            assert doc["metadata"]["name"] in names, f"{doc['kind']} {doc['metadata']['name']} was not applied"
    if example.parent.name == "values":
        namespace = example_run.rename("aicr")
        assert any(kind == "Job" and where.startswith(f"{namespace}/") for kind, where in example_run.checked)


def test_the_values_examples_use_the_published_chart_name_and_version() -> None:
    """The owner is the project's (no ``<owner>`` left to fill in), the version the chart's."""
    version = yaml.safe_load((REPO_ROOT / "chart" / "Chart.yaml").read_text())["version"]
    examples = sorted((REPO_ROOT / "examples" / "values").glob("*.yaml"))
    assert examples
    for example in examples:
        [helm] = [step for step in documented_steps(example) if step.startswith("helm ")]
        assert f" {PUBLISHED_CHART} " in f" {helm} ", example.name
        assert f"--version {version} " in helm, example.name
        assert f"-f examples/values/{example.name}" in helm, example.name


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (
            "kubectl -n aicr create secret docker-registry acme-registry-cred --docker-server=ghcr.io "
            '--docker-username="$REGISTRY_USER" --docker-password="$REGISTRY_TOKEN"',
            "not found",
        ),
        (
            "helm upgrade --install aicr oci://ghcr.io/nvidia-aicr/charts/nvidia-aicr "
            "--version 0.4.0 -n aicr -f examples/values/k0s-h200-training.yaml",
            "not found",
        ),
        ("kubectl -n aicr create secret generic x --from-literal=token=<token>", "shell operators"),
        ("kubectl -n aicr create secret generic x --from-literal=token=$TOKEN", "$TOKEN is not a variable"),
    ],
    ids=["secret before its namespace", "helm without --create-namespace", "a <placeholder>", "an unnamed variable"],
)
def test_a_step_out_of_order_or_not_runnable_is_refused(example_run: ExampleRun, step: str, words: str) -> None:
    """What the examples once said (a Secret in ``aicr`` before ``--create-namespace``
    made it, ``<user>`` where a shell reads a redirection) fails here, as on a cluster."""
    with pytest.raises(StepFailed, match=re.escape(words)):
        example_run.step(step)


def test_kinds_without_a_crd_are_held_to_strict_yaml(example_run: ExampleRun) -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate keys"):
        strict_docs("kind: MultiClusterService\nspec: {}\nspec: {}\n")
    service_template = {
        "apiVersion": "k0rdent.mirantis.com/v1beta1",
        "kind": "ServiceTemplate",
        "metadata": {"name": "nvidia-aicr-0-4-0", "namespace": "aicr"},
        "spec": {"helm": {}},
    }
    with pytest.raises(StepFailed, match="not found"):
        example_run.apply(service_template, rename=True)  # aicr-<run> was never made
    example_run.create_namespace(example_run.rename("aicr"))
    example_run.apply(service_template, rename=True)
    with pytest.raises(StepFailed, match=r"cluster-scoped kind with metadata\.namespace"):
        example_run.apply(
            {**service_template, "kind": "MultiClusterService", "metadata": {"name": "x", "namespace": "aicr"}},
            rename=True,
        )
