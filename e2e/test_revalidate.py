"""Re-validation on the e2e node: ``aicr-runner validate`` from the chart's CronJob,
with the real aicr v0.11.1 and NVIDIA's real ``deployment`` validator.

One install for the module (``e2e/test_real_validators.py``'s eks/h100/training/ubuntu
install, the stand-in gpu-operator's pod Running, ``revalidate.schedule`` set),
then re-validations as users start them (``kubectl create job --from=cronjob/...``)
and one the real CronJob controller starts on its schedule. The CronJob controller
runs only in the test that waits for it (``more_controllers``), so no scheduled run
interferes with the others. The tests share the install and its verdict history:
they run in the module's order, each leaving the operator's pod Running and the
install Lease free.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.kube.api import ClientKubeApi
from aicr_runner.kube.lease import HELD_FOR_ANNOTATION, InstallLease
from aicr_runner.settings.config import LeaseSettings
from e2e import test_real_validators as rv
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet, RealNode, derive_image, load_image
from e2e.harness.node.model import JobRun
from e2e.harness.procs import wait_for
from e2e.helm_redirect import HELM_REDIRECT, HELM_REDIRECT_DIR
from e2e.scenarios import CHART, RELEASE, RunResults, releases_in
from e2e.tools import tool
from e2e.validators import deployment_controllers, more_controllers
from tests.support.real_aicr import FolderMirror, extract_binary

pytestmark = pytest.mark.e2e

# The module fixtures of the real-validator tests (an instance per module).
eks_recipe = rv.eks_recipe
stand_in_charts = rv.stand_in_charts
validator_on_node = rv.validator_on_node

CRONJOB = f"{RELEASE}-install-revalidate"
SERVICE_ACCOUNT = f"{RELEASE}-installer"
LEASE = f"{RELEASE}-install"
HISTORY = "aicr-validate-result-history"
#: Where the derived image holds the real aicr (used only with aicrBinary.path).
PREINSTALLED_AICR = "/opt/aicr/bin/aicr"
#: The steps of a validation-only run (run/machine.py VALIDATE_TRANSITIONS).
VALIDATE_STEPS = {
    "fetch",
    "pack",
    "lease",
    "recorded-recipe",
    "snapshot",
    "validate",
    "capture-verdict",
    "publish",
    "capture-evidence",
}
SUCCEEDED = "Succeeded (exit 0): AICR validation complete (validation only: nothing deployed) [aicr v0.11.1]"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


@dataclass
class Installed:
    namespace: str
    kubelet: Kubelet
    #: sha256 of the real aicr the image holds at PREINSTALLED_AICR
    aicr_sha256: str
    #: the release's values (``helm get values``)
    values: dict[str, Any]
    workdir: Path
    #: (namespace, name) of every Helm release this install owns: the chart's and the recipe's components'
    owned: frozenset[tuple[str, str]]


@pytest.fixture(scope="module")
def installed(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    node: RealNode,
    e2e_image: str,
    real_aicr_release: Path,
    validator_on_node: str,
    release_mirror: FolderMirror,
    stand_in_charts: FolderMirror,
    eks_recipe: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Installed]:
    """The eks install with validation and ``revalidate.schedule`` (every minute),
    the Deployment and ReplicaSet controllers running for the module."""
    work = tmp_path_factory.mktemp("revalidate")
    wrapper = work / "helm"
    wrapper.write_text(HELM_REDIRECT)
    wrapper.chmod(0o755)
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(real_aicr_release.parent)})
    files = {f"{HELM_REDIRECT_DIR}/helm": wrapper, PREINSTALLED_AICR: binary}
    image = derive_image(e2e_image, files)
    load_image(node.runtime, image)
    kubelet = Kubelet(node, image)
    namespace = f"revalidate-{secrets.token_hex(3)}"
    control_plane.ensure_namespace(namespace)
    extra = {"revalidate": {"schedule": "* * * * *"}}
    with deployment_controllers(control_plane, work / "deployment-controllers"):
        charts = stand_in_charts
        rv.install(helm, control_plane, namespace, kubelet, release_mirror, charts, "--best-effort", extra=extra)
        run = kubelet.run_job(RELEASE, namespace, timeout=800)
        assert run.exit_code == 0, run.describe()
        values = yaml.safe_load(helm.run("get", "values", RELEASE, "-n", namespace, "-o", "yaml").stdout)
        sha = hashlib.sha256(binary.read_bytes()).hexdigest()
        components = {(ref["namespace"], ref["name"]) for ref in eks_recipe["recipe"]["componentRefs"]}
        yield Installed(namespace, kubelet, sha, values, work, frozenset({(namespace, RELEASE), *components}))
        for ref in eks_recipe["recipe"]["componentRefs"]:
            if ref["name"] in releases_in(helm, ref["namespace"]):
                helm.uninstall(ref["name"], ref["namespace"])
        wait_for(lambda: not rv.operator_pods(control_plane) or None, timeout=60, what="the operator's pods gone")


# -- helpers -----------------------------------------------------------------------------


def kubectl(plane: ControlPlane, *args: str) -> str:
    argv = [str(tool("kubectl")), f"--kubeconfig={plane.kubeconfig}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def helm_state(helm: Helm, env: Installed) -> dict[tuple[str, str], tuple[int, str]]:
    """The install's own releases: (namespace, name) -> (revision, status). Only
    its own: the session's other tests leave releases of the same names in other
    namespaces, some still being retried by their Jobs."""
    state = {
        (r["namespace"], r["name"]): (int(r["revision"]), r["status"])
        for r in helm.list_releases()
        if (r["namespace"], r["name"]) in env.owned
    }
    assert (env.namespace, RELEASE) in state, state
    assert len(state) > 1, f"the install's components: {state}"
    return state


def history(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    found = plane.configmap(namespace, HISTORY)
    assert found is not None, f"no {HISTORY}"
    return list(json.loads(found["data"]["history.json"]))


def events_on(plane: ControlPlane, namespace: str, kind: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, note) of the runner's Events regarding ``kind``/``name``."""
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [
        (e["type"], e["reason"], e.get("note", ""))
        for e in items
        if (e.get("regarding") or {}).get("kind") == kind
        and (e.get("regarding") or {}).get("name") == name
        and e.get("reportingController") == "aicr-runner"
    ]


def revalidate(plane: ControlPlane, env: Installed, name: str) -> JobRun:
    """A re-validation from the CronJob's template, as users start one now."""
    kubectl(plane, "create", "job", "-n", env.namespace, f"--from=cronjob/{CRONJOB}", name)
    return env.kubelet.run_job(RELEASE, env.namespace, job_name=name, timeout=600)


def by(run: JobRun) -> str:
    """A re-validation's ``runBy`` in the verdict history."""
    return f"revalidate {run.job_name}/{run.pod_name}"


def verdict(results: RunResults) -> dict[str, str]:
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    return {t["name"]: t["status"] for t in ctrf["results"]["tests"]}


def assert_validated_only(results: RunResults) -> None:
    steps = {s["state"]: s["status"] for s in results.report()["steps"]}
    assert set(steps) <= VALIDATE_STEPS, steps
    assert steps["recorded-recipe"] == "succeeded", steps


def recorded_recipe_digest(plane: ControlPlane, namespace: str) -> str:
    found = plane.configmap(namespace, "aicr-recipe")
    assert found is not None
    return "sha256:" + hashlib.sha256(found["data"]["recipe.yaml"].encode()).hexdigest()


def scale_operator(plane: ControlPlane, replicas: int) -> None:
    """Scale the stand-in operator and wait, by watching, until its pods are gone
    (0) or one is Running and Ready (1)."""
    path = "/api/v1/namespaces/gpu-operator/pods"
    plane.admin.merge_patch(
        "/apis/apps/v1/namespaces/gpu-operator/deployments/gpu-operator", {"spec": {"replicas": replicas}}
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        listed = plane.admin.get(path, labelSelector="app=gpu-operator")
        pods = {p["metadata"]["name"]: p for p in listed["items"]}
        if _operator_settled(pods, replicas):
            return
        for event in plane.admin.watch(
            path,
            labelSelector="app=gpu-operator",
            resourceVersion=listed["metadata"]["resourceVersion"],
            timeoutSeconds="30",
        ):
            pod = event["object"]
            if event["type"] == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                pods[pod["metadata"]["name"]] = pod
            if _operator_settled(pods, replicas):
                return
    raise AssertionError(f"the operator's pods did not settle at {replicas}")


def _operator_settled(pods: dict[str, dict[str, Any]], replicas: int) -> bool:
    if replicas == 0:
        return not pods
    ready = [
        p
        for p in pods.values()
        if not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") == "Running"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]
    return len(ready) == replicas and len(pods) == replicas


# -- the tests ---------------------------------------------------------------------------


@pytest.mark.timeout(1500)
def test_a_revalidation_from_the_cronjob_validates_only_against_the_recorded_recipe(
    helm: Helm, control_plane: ControlPlane, installed: Installed
) -> None:
    env, plane = installed, control_plane
    before = helm_state(helm, env)
    assert before[env.namespace, RELEASE] == (1, "deployed")
    [install_entry] = history(plane, env.namespace)
    assert install_entry["runBy"].startswith("install "), install_entry

    run = revalidate(plane, env, "revalidate-now")

    assert run.exit_code == 0, run.describe()
    assert run.termination_message == SUCCEEDED, run.describe()
    assert helm_state(helm, env) == before, "no helm release changed"
    results = RunResults(plane, env.namespace)
    assert_validated_only(results)
    digest = recorded_recipe_digest(plane, env.namespace)
    recorded = results.step("recorded-recipe")["message"]
    assert recorded.startswith(
        f"recipe recorded at install: /etc/aicr-runner/recorded-recipe/recipe.yaml ({digest[:19]}"
    ), recorded
    assert verdict(results) == {name: status for name, _, status in rv.CHECKS}
    assert results.step("validate")["message"] == rv.VERDICT
    entries = history(plane, env.namespace)
    assert [e["runBy"].split()[0] for e in entries] == ["install", "revalidate"], entries
    assert entries[0] == install_entry
    assert entries[1]["runBy"] == by(run), entries[1]
    assert {e["recipeDigest"] for e in entries} == {digest}
    assert entries[1]["checks"]["passed"] == ["expected-resources", "gpu-operator-version", "operator-health"]
    for forbidden in ("aicr recipe", "aicr bundle", "deploy.sh"):
        assert f"{forbidden} " not in run.output, forbidden


@pytest.mark.timeout(1500)
def test_a_regression_is_an_event_on_the_job_and_the_cronjob_and_a_recovery_follows(
    helm: Helm, control_plane: ControlPlane, installed: Installed
) -> None:
    env, plane = installed, control_plane
    before = helm_state(helm, env)
    scale_operator(plane, 0)
    try:
        run = revalidate(plane, env, "revalidate-regressed")
    finally:
        scale_operator(plane, 1)

    # validate.failOnError (the install's): the failed check fails the run, exit 8.
    assert run.exit_code == 8, run.describe()
    assert run.termination_message.startswith("Failed (exit 8): "), run.describe()
    assert rv.NO_OPERATOR_POD in run.termination_message, run.describe()
    results = RunResults(plane, env.namespace)
    report = results.report()
    assert report["phase"] == "Failed"
    assert verdict(results)["operator-health"] == "failed"
    entries = history(plane, env.namespace)
    previous, regressed = entries[-2], entries[-1]
    assert regressed["runBy"] == by(run)
    assert regressed["checks"]["failed"] == ["operator-health"], regressed
    note = f"checks that passed on {previous['time']} now fail: operator-health"
    assert ("Warning", "ValidationRegressed", note) in events_on(plane, env.namespace, "Job", run.job_name)
    assert ("Warning", "ValidationRegressed", note) in events_on(plane, env.namespace, "CronJob", CRONJOB)
    assert f"validation regressed since {previous['time']}: operator-health" in report["warnings"], report
    assert "validation regressed" in results.data("aicr-run-status")["summary.txt"]
    capture = results.step("capture-verdict")
    assert capture["status"] == "warned", capture
    assert f"; REGRESSED since {previous['time']}: operator-health" in capture["message"], capture

    recovered_run = revalidate(plane, env, "revalidate-recovered")

    assert recovered_run.exit_code == 0, recovered_run.describe()
    entries = history(plane, env.namespace)
    assert [e["runBy"] for e in entries[-2:]] == [by(run), by(recovered_run)], entries
    assert "failed" not in entries[-1]["checks"]
    note = f"checks that failed on {regressed['time']} now pass: operator-health"
    events = events_on(plane, env.namespace, "Job", recovered_run.job_name)
    assert ("Normal", "ValidationRecovered", note) in events, events
    assert not [e for e in events if e[1] == "ValidationRegressed"], events
    assert helm_state(helm, env) == before, "no helm release changed"


@pytest.mark.timeout(900)
def test_a_revalidation_while_an_install_holds_the_lease_ends_at_once_with_exit_33(
    helm: Helm, control_plane: ControlPlane, installed: Installed
) -> None:
    env, plane = installed, control_plane
    path = f"/apis/coordination.k8s.io/v1/namespaces/{env.namespace}/leases/{LEASE}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    holder = f"{env.namespace}/{RELEASE}-install-e2e/install-pod"
    held = plane.admin.merge_patch(
        path, {"spec": {"holderIdentity": holder, "acquireTime": now, "renewTime": now, "leaseDurationSeconds": 600}}
    )
    before = (helm_state(helm, env), history(plane, env.namespace))
    try:
        run = revalidate(plane, env, "revalidate-during-install")
        after = plane.admin.get(path)
    finally:
        plane.admin.merge_patch(path, {"spec": {"holderIdentity": ""}})

    assert run.exit_code == 33, run.describe()
    assert "install in progress, not validated" in run.termination_message, run.describe()
    results = RunResults(plane, env.namespace)
    report = results.report()
    assert report["exitCode"] == 33, report
    assert "install in progress, not validated" in report["message"], report
    lease = results.step("lease")
    assert lease["status"] == "failed", lease
    assert holder in lease["message"], lease
    assert lease["durationSeconds"] < 5, "looked at once, never waited"
    steps = {s["state"]: s["status"] for s in report["steps"]}
    assert steps.get("validate", "skipped") == "skipped", steps
    # The install is not disturbed: its Lease untouched, no release, no history entry.
    assert after["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
    assert (helm_state(helm, env), history(plane, env.namespace)) == before


@pytest.mark.timeout(900)
def test_an_install_starting_during_a_revalidation_takes_the_lease_at_once_and_the_verdict_is_discarded(
    helm: Helm, control_plane: ControlPlane, installed: Installed
) -> None:
    """The runtime's own InstallLease, with the release's ServiceAccount (the chart's
    Role), takes the Lease from a re-validation in progress without waiting
    (``wait_seconds=0`` would give up at once), as soon as the re-validation has
    taken it; the re-validation then discards its verdict."""
    env, plane = installed, control_plane
    path = f"/apis/coordination.k8s.io/v1/namespaces/{env.namespace}/leases/{LEASE}"
    api = ClientKubeApi(plane.kubernetes_client(plane.token(env.namespace, SERVICE_ACCOUNT)))
    settings = LeaseSettings(name=LEASE, pod_name="install-pod", job_name=f"{RELEASE}-install-e2e", wait_seconds=0)
    install = InstallLease(api, env.namespace, settings)
    taken: list[dict[str, Any]] = []

    def install_starts(line: str) -> bool:
        if not taken and "step started step=recorded-recipe" in line:
            validation_held = plane.admin.get(path)
            install.acquire()
            taken.append(validation_held)
        return False

    before = kept(helm, plane, env)
    try:
        kubectl(plane, "create", "job", "-n", env.namespace, f"--from=cronjob/{CRONJOB}", "revalidate-preempted")
        run = env.kubelet.run_job(
            RELEASE, env.namespace, job_name="revalidate-preempted", timeout=600, terminate_when=install_starts
        )
        after = plane.admin.get(path)
    finally:
        install.release()

    assert taken, run.describe()
    held_for = taken[0]["metadata"]["annotations"][HELD_FOR_ANNOTATION]
    assert (taken[0]["spec"]["holderIdentity"].split("/")[0], held_for) == ("revalidate-preempted", "validation")
    assert after["spec"]["holderIdentity"] == install.holder, "the re-validation never handed it back or took it again"
    assert after["metadata"]["annotations"][HELD_FOR_ANNOTATION] == "install"
    assert run.exit_code == 33, run.describe()
    results = RunResults(plane, env.namespace)
    capture = results.step("capture-verdict")
    assert (capture["status"], capture["exitCode"]) == ("failed", 33), capture
    assert "over during the validation: its verdict may be of a half-installed cluster" in capture["message"]
    assert results.step("validate")["status"] in ("succeeded", "failed"), "it validated before it knew"
    assert "over during the validation" in run.termination_message, run.describe()
    # Nothing of the voided verdict is kept or told.
    assert kept(helm, plane, env) == before
    reasons = {reason for _, reason, _ in events_on(plane, env.namespace, "Job", "revalidate-preempted")}
    assert not reasons & {"ValidationRegressed", "ValidationRecovered"}, reasons


def kept(helm: Helm, plane: ControlPlane, env: Installed) -> tuple[Any, ...]:
    """What a validation keeps: the release's Helm state, the history, the verdict ConfigMap."""
    verdict_map = plane.configmap(env.namespace, "aicr-validate-result") or {}
    return helm_state(helm, env), history(plane, env.namespace), verdict_map.get("data")


def mirror_bytes(mirror: FolderMirror, root: Path, start: int) -> dict[str, int]:
    """The files the mirror served from request ``start`` on, with their sizes."""
    return {p: (root / p.lstrip("/")).stat().st_size for p in mirror.requests[start:]}


def api_requests(events: list[dict[str, Any]], user: str) -> dict[str, Any]:
    """One user's requests: total, writes, and writes by client (user agent) and verb+resource."""
    mine = [e for e in events if e["user"]["username"] == user]
    writes = [e for e in mine if e["verb"] in WRITES]
    by: dict[str, int] = {}
    for e in writes:
        key = f"{e.get('userAgent', '').split('/')[0]} {e['verb']} {(e.get('objectRef') or {}).get('resource', '')}"
        by[key] = by.get(key, 0) + 1
    return {"requests": len(mine), "writes": len(writes), "writes_by": dict(sorted(by.items()))}


def wait_for_scheduled_job(plane: ControlPlane, namespace: str, since: str) -> str:
    """The name of the first Job the CronJob controller creates after ``since`` (a watch)."""
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    deadline = time.monotonic() + 150
    version = plane.admin.get(path)["metadata"]["resourceVersion"]
    while time.monotonic() < deadline:
        for event in plane.admin.watch(path, resourceVersion=version, timeoutSeconds="30"):
            job = event["object"]
            version = job["metadata"].get("resourceVersion", version)
            owners = job["metadata"].get("ownerReferences") or []
            if (
                event["type"] == "ADDED"
                and [(o["kind"], o["name"]) for o in owners] == [("CronJob", CRONJOB)]
                and job["metadata"]["creationTimestamp"] >= since
            ):
                return str(job["metadata"]["name"])
    raise AssertionError("the CronJob controller created no Job within 150 s")


@pytest.mark.timeout(900)
def test_the_cronjob_controller_runs_a_revalidation_on_schedule_and_what_it_costs(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    installed: Installed,
    release_mirror: FolderMirror,
    real_aicr_release: Path,
    tmp_path: Path,
) -> None:
    env, plane = installed, control_plane
    before = helm_state(helm, env)
    served, since = len(release_mirror.requests), plane.audit_offset()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # The CronJob controller only for this test: the schedule is every minute.
    with more_controllers(plane, env.workdir / "cronjob-controller", ("cronjob-controller",)):
        name = wait_for_scheduled_job(plane, env.namespace, started)
    run = env.kubelet.run_job(RELEASE, env.namespace, job_name=name, timeout=600)

    assert run.exit_code == 0, run.describe()
    assert helm_state(helm, env) == before, "no helm release changed"
    results = RunResults(plane, env.namespace)
    assert_validated_only(results)
    assert verdict(results) == {n: status for n, _, status in rv.CHECKS}
    assert history(plane, env.namespace)[-1]["runBy"] == by(run)
    job = plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{name}")
    annotations = job["metadata"]["annotations"]
    assert annotations.get("cronjob.kubernetes.io/instantiate") != "manual", annotations
    # The controller's own mark: the schedule time it ran (every minute: on the minute).
    scheduled = annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    assert scheduled.endswith(":00Z"), scheduled
    assert name == f"{CRONJOB}-{int(datetime.fromisoformat(scheduled).timestamp()) // 60}", (name, scheduled)
    wait_for(
        lambda: (plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{name}")["status"]).get(
            "completionTime"
        ),
        timeout=60,
        what="the Job's completion",
    )
    job = plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{name}")

    downloaded = mirror_bytes(release_mirror, real_aicr_release.parent, served)
    audit = plane.audit_events_until_now(since)
    runner = api_requests(audit, f"system:serviceaccount:{env.namespace}:{SERVICE_ACCOUNT}")
    validators = api_requests(audit, "system:serviceaccount:aicr-validation:aicr-validator")
    figures = {
        "measured": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpus": 2,
        "downloaded_bytes": sum(downloaded.values()),
        "downloaded": downloaded,
        "runner_service_account": runner,
        "validator_service_account": validators,
        "pod_seconds": round(run.containers[-1].seconds, 1),
        "validate_seconds": round(results.step("validate")["durationSeconds"], 1),
        "fetch_seconds": round(results.step("fetch")["durationSeconds"], 1),
        "job_seconds": _seconds(job["status"]["startTime"], job["status"]["completionTime"]),
    }
    (tmp_path / "revalidate-figures.json").write_text(json.dumps(figures, indent=2, sort_keys=True))
    print("\nrevalidate, one scheduled run:", json.dumps(figures, sort_keys=True))
    # Each run downloads the aicr release again (the image has no aicr).
    assert any(p.endswith(".tar.gz") for p in downloaded), downloaded
    assert runner["writes"] > 0, runner


def _seconds(start: str, end: str) -> float:
    layout = "%Y-%m-%dT%H:%M:%SZ"
    return (datetime.strptime(end, layout) - datetime.strptime(start, layout)).total_seconds()


@pytest.mark.timeout(900)
def test_a_revalidation_with_aicr_preinstalled_in_the_image_downloads_nothing(  # noqa: PLR0917 - fixtures
    helm: Helm,
    control_plane: ControlPlane,
    installed: Installed,
    release_mirror: FolderMirror,
    real_aicr_release: Path,
    tmp_path: Path,
) -> None:
    """The way not to download the release on every run: the image carries aicr,
    ``aicrBinary.path`` and ``aicrBinary.sha256`` name and pin it. The Job is the
    CronJob's template as the chart renders it with those values (the image of
    this module already holds the real aicr at PREINSTALLED_AICR)."""
    env, plane = installed, control_plane
    values = {**env.values, "aicrBinary": {"path": PREINSTALLED_AICR, "sha256": env.aicr_sha256}}
    [cronjob] = [d for d in helm.template(RELEASE, CHART, env.namespace, values=values) if d["kind"] == "CronJob"]
    name = "revalidate-preinstalled"
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": cronjob["spec"]["jobTemplate"]["spec"],
    }
    before, served = helm_state(helm, env), len(release_mirror.requests)
    plane.admin.create(f"/apis/batch/v1/namespaces/{env.namespace}/jobs", body)
    run = env.kubelet.run_job(RELEASE, env.namespace, job_name=name, timeout=600)

    assert run.exit_code == 0, run.describe()
    assert release_mirror.requests[served:] == [], "nothing downloaded"
    results = RunResults(plane, env.namespace)
    assert_validated_only(results)
    fetch = results.step("fetch")
    assert PREINSTALLED_AICR in fetch["message"], fetch
    assert verdict(results) == {n: status for n, _, status in rv.CHECKS}
    assert history(plane, env.namespace)[-1]["runBy"] == by(run)
    assert helm_state(helm, env) == before, "no helm release changed"
    figures = {
        "downloaded_bytes": sum(mirror_bytes(release_mirror, real_aicr_release.parent, served).values()),
        "pod_seconds": round(run.containers[-1].seconds, 1),
        "fetch_seconds": round(fetch["durationSeconds"], 1),
    }
    (tmp_path / "revalidate-preinstalled-figures.json").write_text(json.dumps(figures, indent=2, sort_keys=True))
    print("\nrevalidate, aicr preinstalled:", json.dumps(figures, sort_keys=True))
