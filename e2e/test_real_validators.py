"""The real aicr v0.11.1 and its real ``deployment`` validator on the e2e node.

The chart is installed with the criteria ``eks``/``h100``/``training``/``ubuntu``,
whose v0.11.1 recipe lists the deployment checks ``operator-health``,
``expected-resources``, ``gpu-operator-version`` and ``check-nvidia-smi``. The
pod, from the built image, downloads the real aicr v0.11.1, makes the recipe and
bundle, runs the bundle's real ``deploy.sh`` against stand-in component charts
(as ``e2e/test_real_aicr.py`` does) and the real ``aicr validate``, which starts
one Job per check with the validator image ``e2e/validators.py`` builds and loads
into the node under its published name: the real kubelet runs the real checks.

What stands in, and why (e2e/README.md):
- the component charts (public repositories are unreachable), each a ConfigMap
  recording its values; two carry more, because the bundle and the checks need it:
  ``skyhook-operator`` renders the ``skyhooks.skyhook.nvidia.com`` CRD (cluster
  scoped, as NVIDIA's chart ships it in its templates, with an open schema) so
  deploy.sh's ``kubectl apply`` of the bundle's Skyhook manifest succeeds, and
  ``gpu-operator`` renders the operator Deployment (``e2e.validators``) whose one
  pod runs the node's pause program;
- the snapshot: a ConfigMap with the API server's real version (the snapshot
  agent's image is not available here), as in ``e2e/test_real_aicr.py``.
``check-nvidia-smi`` cannot pass here (no node has a GPU): aicr skips it, and the
verdict names it with aicr's reason.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import NODE_NAME, Kubelet, RealNode, load_image
from e2e.harness.node.node import PAUSE_IMAGE
from e2e.harness.procs import wait_for
from e2e.helm_redirect import HELM_REDIRECT_DIR, STAND_IN_TEMPLATE
from e2e.scenarios import CHART, RELEASE, RunResults, extra_env, releases_in
from e2e.test_real_aicr import SNAPSHOT, image_path, snapshot_configmap
from e2e.validators import (
    GPU_OPERATOR_TEMPLATE,
    VALIDATOR_IMAGE,
    ValidatorsMissing,
    deployment_controllers,
    validator_archive,
    validator_image,
)
from tests.support.real_aicr import TAG, FolderMirror, extract_binary

pytestmark = pytest.mark.e2e

CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
SKYHOOK_CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: skyhooks.skyhook.nvidia.com
spec:
  group: skyhook.nvidia.com
  names:
    kind: Skyhook
    listKind: SkyhookList
    plural: skyhooks
    singular: skyhook
  scope: Cluster
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"""
#: Extra templates of a stand-in chart, by chart name.
EXTRA_TEMPLATES = {
    "skyhook-operator": {"skyhook-crd.yaml": SKYHOOK_CRD},
    "gpu-operator": {"operator.yaml": GPU_OPERATOR_TEMPLATE.replace("__IMAGE__", PAUSE_IMAGE)},
}


@pytest.fixture(scope="module")
def eks_recipe(real_aicr_release: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recipe and bundle the same aicr gives on this host for CRITERIA."""
    import subprocess

    work = tmp_path_factory.mktemp("real-validators-host")
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    flags = [word for name, value in CRITERIA.items() for word in (f"--{name}", value)]
    for args in (["recipe", *flags, "--output", "recipe.yaml"], ["bundle", "--recipe", "recipe.yaml", "--output", "b"]):
        subprocess.run([str(binary), *args], cwd=work, check=True, capture_output=True, timeout=120)
    return {"recipe": yaml.safe_load((work / "recipe.yaml").read_text()), "bundle": work / "b"}


@pytest.fixture(scope="module")
def stand_in_charts(
    helm: Helm, eks_recipe: dict[str, Any], pod_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FolderMirror]:
    """A local chart repository with a stand-in for every chart of the recipe
    (``skyhook-customizations`` has none: deploy.sh applies its manifest)."""
    root = tmp_path_factory.mktemp("validator-stand-in-charts")
    repo = root / "charts"
    for ref in eks_recipe["recipe"]["componentRefs"]:
        if not ref.get("chart"):
            continue
        source = root / "src" / ref["chart"]
        (source / "templates").mkdir(parents=True)
        chart = {"apiVersion": "v2", "name": ref["chart"], "version": ref["version"], "appVersion": ref["version"]}
        (source / "Chart.yaml").write_text(yaml.safe_dump(chart))
        (source / "templates" / "stand-in.yaml").write_text(STAND_IN_TEMPLATE)
        for name, text in EXTRA_TEMPLATES.get(ref["chart"], {}).items():
            (source / "templates" / name).write_text(text)
        helm.run("package", str(source), "--destination", str(repo))
    helm.run("repo", "index", str(repo))
    with FolderMirror(root, host=pod_host) as served:
        yield served


@pytest.fixture(scope="module")
def validator_on_node(node: RealNode) -> str:
    """The validator image, loaded into the node's containerd under the published name."""
    try:
        image = validator_image(validator_archive())
    except ValidatorsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    load_image(node.runtime, image, VALIDATOR_IMAGE)
    return image


@pytest.fixture
def controllers(control_plane: ControlPlane, tmp_path: Path) -> Iterator[None]:
    with deployment_controllers(control_plane, tmp_path / "deployment-controllers"):
        yield


@pytest.fixture
def components_removed_after(helm: Helm, control_plane: ControlPlane, eks_recipe: dict[str, Any]) -> Iterator[None]:
    yield
    # The control plane is the session's: later scenarios assert their runs
    # installed none of the embedded components.
    for ref in eks_recipe["recipe"]["componentRefs"]:
        if ref["name"] in releases_in(helm, ref["namespace"]):
            helm.uninstall(ref["name"], ref["namespace"])
    # The garbage collector deletes the operator's ReplicaSet and pod after the
    # Deployment: a later run must not find a pod of this one.
    wait_for(lambda: not operator_pods(control_plane) or None, timeout=60, what="the stand-in operator's pods gone")


class ValidatorPods:
    """The validator pods aicr validate creates, as the API server last showed
    each (a watch in a background thread: aicr deletes each check's Job once read)."""

    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane
        # Pods of an earlier test (still being deleted) are not this run's.
        self._since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._version = ""
        self.pods: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="validator-pods")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self._plane.admin.watch(
                    "/api/v1/namespaces/aicr-validation/pods",
                    # the pod template's labels (the Job's job-type label is not on it)
                    labelSelector="aicr.nvidia.com/validator",
                    resourceVersion=self._version,
                    timeoutSeconds="5",
                ):
                    pod = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        self._version = ""  # too old: start again from the current state
                        break
                    # The next watch goes on from here: no pod is missed between two watches.
                    self._version = pod["metadata"]["resourceVersion"]
                    if pod["metadata"]["creationTimestamp"] < self._since:
                        continue
                    with self._changed:
                        self.pods[pod["metadata"]["name"]] = pod
                        self._changed.notify_all()
            except Exception as exc:  # noqa: BLE001 - an API blip: watch again, and say so if nothing is seen
                self.errors.append(repr(exc))
                self._stop.wait(0.5)

    def ended(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """Once ``count`` pods have a terminated container (or ``timeout``): every pod seen."""

        def terminated() -> list[dict[str, Any]]:
            return [p for p in self.pods.values() if _exit_code(p) is not None]

        with self._changed:
            self._changed.wait_for(lambda: len(terminated()) >= count, timeout=timeout)
            return list(self.pods.values())

    def stop(self) -> None:
        self._stop.set()


def _exit_code(pod: dict[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return int(terminated["exitCode"])
    return None


@pytest.fixture
def validator_pods(control_plane: ControlPlane) -> Iterator[ValidatorPods]:
    pods = ValidatorPods(control_plane)
    yield pods
    pods.stop()


def evidence(test: dict[str, Any]) -> list[str]:
    """What a check printed (its pod log without the validator's slog lines)."""
    return [line for line in test.get("stdout") or [] if not line.startswith("time=")]


#: The checks of the recipe's deployment phase, in aicr's catalog order, with the
#: exit code each validator pod ends with here and the CTRF status aicr gives it.
CHECKS = [
    ("operator-health", 0, "passed"),
    ("expected-resources", 0, "passed"),
    ("gpu-operator-version", 0, "passed"),
    ("check-nvidia-smi", 2, "skipped"),
]
VERDICT = "validation passed: 3 of 4 checks passed, 1 skipped: check-nvidia-smi (no GPU nodes found in the cluster)"


def operator_pods(plane: ControlPlane) -> list[dict[str, Any]]:
    """The pods operator-health counts: ``app=gpu-operator`` in ``gpu-operator``."""
    found = plane.admin.get("/api/v1/namespaces/gpu-operator/pods", labelSelector="app=gpu-operator")
    return list(found["items"])


def install(  # noqa: PLR0917 - one install's inputs
    helm: Helm,
    plane: ControlPlane,
    namespace: str,
    kubelet: Kubelet,
    release_mirror: FolderMirror,
    charts: FolderMirror,
    deploy_flags: str,
    *,
    fail_on_error: bool = True,
    extra: dict[str, Any] | None = None,
) -> str:
    """The chart for CRITERIA with validation of the deployment phase (plus the
    ``extra`` top-level values); returns the API server's version (the snapshot's)."""
    server_version = snapshot_configmap(plane, namespace)
    path = f"{HELM_REDIRECT_DIR}:{image_path(kubelet)}"
    helm.install(
        RELEASE,
        CHART,
        namespace,
        values={
            **CRITERIA,
            **kubelet.image_values(),
            "aicrVersion": TAG,
            "aicrReleaseBaseUrl": release_mirror.base_url,
            # No NVIDIA attestation in this release: warn runs it and says so.
            "aicrProvenance": {"mode": "warn"},
            "validate": {"enabled": True, "phases": ["deployment"], "failOnError": fail_on_error},
            "validateArgs": ["--snapshot", f"cm://{namespace}/{SNAPSHOT}"],
            "deployFlags": deploy_flags,
            "job": {
                "extraEnv": extra_env(PATH=path, E2E_CHART_REPO=f"{charts.base_url}/charts"),
                # One pod: a failed run is not retried behind the test's back.
                "backoffLimit": 0,
            },
            **(extra or {}),
        },
    )
    return server_version


def assert_validator_pods(pods: ValidatorPods, exit_codes: dict[str, int]) -> None:
    """Each check ran as its own pod on the node, from the image loaded under the
    published name, on the pod network, and ended with ``exit_codes[check]``."""
    seen = sorted(
        (
            p["metadata"]["labels"]["aicr.nvidia.com/validator"],
            p["spec"]["containers"][0]["image"],
            p["spec"]["nodeName"],
            bool(p["spec"].get("hostNetwork")),
            _exit_code(p),
        )
        for p in pods.ended(len(exit_codes), timeout=30)
    )
    expected = sorted((name, VALIDATOR_IMAGE, NODE_NAME, False, code) for name, code in exit_codes.items())
    assert seen == expected, (seen, pods.errors[-3:])


#: The verdict when the operator's pod never came up (aicr's message for operator-health).
NO_OPERATOR_POD = (
    "validation failed: 1 failed: operator-health ([NOT_FOUND] no gpu-operator pods found) (of 4 checks, 2 passed)"
)


def run_events(plane: ControlPlane, namespace: str, job: str) -> dict[str, str]:
    """The runner's Events on its Job: reason -> note."""
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return {
        e["reason"]: e["note"]
        for e in items
        if (e.get("regarding") or {}).get("name") == job and e.get("reportingController") == "aicr-runner"
    }


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fail_on_error", [True, False], ids=["failOnError", "no-failOnError"])
def test_without_the_operators_pod_operator_health_fails_with_aicrs_message(  # noqa: PLR0917 - fixtures
    fail_on_error: bool,
    helm: Helm,
    control_plane: ControlPlane,
    namespace: str,
    validator_on_node: str,
    redirect_kubelet: Kubelet,
    release_mirror: FolderMirror,
    stand_in_charts: FolderMirror,
    eks_recipe: dict[str, Any],
    validator_pods: ValidatorPods,
    components_removed_after: None,
) -> None:
    """No Deployment controller runs here (no ``controllers`` fixture): the
    stand-in operator's Deployment is installed but never gets a pod, as when an
    operator's pods cannot start. deploy.sh with the chart's ``--no-wait``.

    Under validate.failOnError the run fails with aicr's exit 8. Without it the
    validate step still fails (with a ValidateFailed Event), the run exits 0 (the
    bash chart's gate) and its phase is ``SucceededWithFailures``: never plain green."""
    assert not operator_pods(control_plane), "a pod of an earlier run would make operator-health pass"
    install(
        helm,
        control_plane,
        namespace,
        redirect_kubelet,
        release_mirror,
        stand_in_charts,
        "--best-effort --no-wait",
        fail_on_error=fail_on_error,
    )
    run = redirect_kubelet.run_job(RELEASE, namespace, timeout=800)

    results = RunResults(control_plane, namespace)
    notes = run_events(control_plane, namespace, run.job_name)
    if fail_on_error:
        assert run.exit_code == 8, run.describe()
        expected = f"Failed (exit 8): Validation FAILED (exit 8): {NO_OPERATOR_POD} [aicr v0.11.1]"
        assert (run.termination_message, results.report()["phase"]) == (expected, "Failed")
        assert "RunFailed" in notes, notes
    else:
        assert run.exit_code == 0, run.describe()
        expected = (
            f"SucceededWithFailures (exit 0): AICR Job complete, but validation FAILED (exit 8): {NO_OPERATOR_POD} "
            "(validate.failOnError=true fails the Job instead) [aicr v0.11.1]"
        )
        assert (run.termination_message, results.report()["phase"]) == (expected, "SucceededWithFailures")
        assert "RunSucceededWithFailures" in notes, notes
    validate = results.step("validate")
    assert (validate["status"], validate["exitCode"], validate["classification"]) == ("failed", 8, "validation-failed")
    assert validate["message"] == NO_OPERATOR_POD
    assert notes["ValidateFailed"] == NO_OPERATOR_POD, notes
    assert re.search(r"aicr validate exited exit_code=8 step=validate\b", run.output), "aicr itself failed the phase"
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    counted = ("tests", "passed", "failed", "skipped", "pending", "other")
    summary = {key: ctrf["results"]["summary"][key] for key in counted}
    assert summary == {"tests": 4, "passed": 2, "failed": 1, "skipped": 1, "pending": 0, "other": 0}
    tests = ctrf["results"]["tests"]
    assert [(t["name"], t["status"], t.get("message")) for t in tests] == [
        ("operator-health", "failed", "[NOT_FOUND] no gpu-operator pods found"),
        ("expected-resources", "passed", None),
        ("gpu-operator-version", "passed", None),
        ("check-nvidia-smi", "skipped", None),
    ]
    # The Deployment is there (gpu-operator-version read its version); its pod is not.
    assert evidence(tests[2]) == ["Detected GPU Operator version: v25.10.1", "Constraint: >= v24.6.0 \u2192 true"]
    deployment = control_plane.admin.get("/apis/apps/v1/namespaces/gpu-operator/deployments/gpu-operator")
    assert deployment["spec"]["replicas"] == 1
    assert not deployment.get("status", {}).get("replicas"), "no Deployment controller acted on it"
    assert_validator_pods(validator_pods, {"operator-health": 1, "expected-resources": 0, **PASSING_PODS})
    print(f"\nno operator pod: validate {validate['durationSeconds']:.1f}s; CTRF {summary}")


#: The exit codes of the two validator pods whose verdict does not depend on the operator's pod.
PASSING_PODS = {"gpu-operator-version": 0, "check-nvidia-smi": 2}


@pytest.mark.timeout(900)
def test_the_real_validator_runs_every_deployment_check_and_operator_health_passes(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    namespace: str,
    validator_on_node: str,
    controllers: None,
    redirect_kubelet: Kubelet,
    release_mirror: FolderMirror,
    stand_in_charts: FolderMirror,
    eks_recipe: dict[str, Any],
    validator_pods: ValidatorPods,
    components_removed_after: None,
) -> None:
    recipe = eks_recipe["recipe"]
    assert recipe["validation"]["deployment"]["checks"] == [name for name, _, _ in CHECKS]
    # Without --no-wait (values.yaml: drop it when validating after the install):
    # deploy.sh's helm returns once the gpu-operator Deployment is available, so
    # its pod is Running when operator-health looks.
    server_version = install(
        helm, control_plane, namespace, redirect_kubelet, release_mirror, stand_in_charts, "--best-effort"
    )
    run = redirect_kubelet.run_job(RELEASE, namespace, timeout=800)

    # Under validate.failOnError the run is green: three checks passed, and the
    # one that cannot pass here (no GPU node) is named with aicr's reason.
    assert run.exit_code == 0, run.describe()
    assert run.termination_message == "Succeeded (exit 0): AICR Job complete [aicr v0.11.1]", run.describe()
    results = RunResults(control_plane, namespace)
    report = results.report()
    assert (report["phase"], report["exitCode"]) == ("Succeeded", 0)
    validate = results.step("validate")
    assert (validate["status"], validate["exitCode"], validate["classification"]) == (
        "succeeded",
        0,
        "validation-passed",
    ), validate
    assert validate["message"] == VERDICT
    assert re.search(r"aicr validate exited exit_code=0 step=validate\b", run.output), "aicr itself exited 0"

    # The CTRF, check by check: aicr's statuses and what each validator printed.
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    assert ctrf["results"]["tool"] == {"name": "aicr", "version": "0.11.1"}
    summary = {
        key: ctrf["results"]["summary"][key] for key in ("tests", "passed", "failed", "skipped", "pending", "other")
    }
    assert summary == {"tests": 4, "passed": 3, "failed": 0, "skipped": 1, "pending": 0, "other": 0}
    tests = ctrf["results"]["tests"]
    assert [(t["name"], t["status"], t.get("message"), t["suite"]) for t in tests] == [
        (name, status, None, ["deployment"]) for name, _, status in CHECKS
    ]
    [operator] = operator_pods(control_plane)
    by_name = {t["name"]: t for t in tests}
    assert evidence(by_name["operator-health"]) == [
        "Found 1 gpu-operator pod(s):",
        f"  {operator['metadata']['name']}: Running",
        "Running: 1/1",
    ]
    assert evidence(by_name["expected-resources"]) == ["All expected resources are healthy"]
    assert evidence(by_name["gpu-operator-version"]) == [
        "Detected GPU Operator version: v25.10.1",
        "Constraint: >= v24.6.0 \u2192 true",
    ]
    assert evidence(by_name["check-nvidia-smi"]) == []
    assert any(
        'msg=SKIP reason="[INTERNAL] no GPU nodes found in the cluster: skip"' in line
        for line in by_name["check-nvidia-smi"]["stdout"]
    ), by_name["check-nvidia-smi"]

    # The stand-in operator's pod: made by the Deployment and ReplicaSet
    # controllers, run by the node, still Running.
    assert operator["status"]["phase"] == "Running"
    assert operator["spec"]["nodeName"] == NODE_NAME
    assert [ref["kind"] for ref in operator["metadata"]["ownerReferences"]] == ["ReplicaSet"]

    # Each check ran as its own pod on the node, from the image loaded under the
    # published name, on the pod network; its exit code is the CTRF status.
    assert_validator_pods(validator_pods, {name: code for name, code, _ in CHECKS})

    # The readiness pre-flight read the snapshot: the server version passed; the
    # snapshot carries no OS measurement, so aicr skipped the recipe's OS constraints.
    readiness = [line for line in run.output.splitlines() if "readiness constraint" in line]
    assert any("passed name=K8s.server.version" in line and server_version in line for line in readiness), readiness
    skipped = sorted(re.findall(r"readiness constraint skipped name=(\S+)", run.output))
    assert skipped == ["OS.release.ID", "OS.release.VERSION_ID", "OS.sysctl./proc/sys/kernel/osrelease"], readiness

    # deploy: every component of the eks recipe installed by the real deploy.sh
    deploy = results.step("deploy")
    components = recipe["componentRefs"]
    assert deploy["message"] == f"AICR install complete: {len(components)}/{len(components)} installed", deploy
    for ref in components:
        if ref.get("chart"):
            release = releases_in(helm, ref["namespace"])[ref["name"]]
            assert (release["status"], release["chart"]) == ("deployed", f"{ref['chart']}-{ref['version']}"), ref
    assert control_plane.admin.exists("/apis/skyhook.nvidia.com/v1alpha1/skyhooks/tuning"), "the bundle's Skyhook"
    print(
        f"\nthe real validate: {validate['durationSeconds']:.1f}s for {len(CHECKS)} checks; CTRF {summary}; "
        f"the pod ran {run.containers[-1].seconds:.1f}s"
    )
