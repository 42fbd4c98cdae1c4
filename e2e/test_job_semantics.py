"""The chart's Job under the real Job controller (kube-controller-manager).

Each scenario installs the chart with the pinned helm and lets the real
controller create, count and replace pods; the real node (kube-scheduler,
kubelet, containerd) runs them with the chart's pod spec, and deletes and evicts
them as a cluster does. What is asserted comes from the API server: the Job's
conditions and counters, the pods, the run's ConfigMaps and Helm releases. The helm-upgrade scenario records
what happens to a running pod when an upgrade replaces its Job (the baseline
e2e/README.md describes, "A Job replaced while it runs").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.kube import ObjectWatch
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry, docker_config
from e2e.scenarios import CHART, COMPONENT_CHARTS, RELEASE, push_component_charts, releases_in, write_org_pack
from e2e.test_scenarios import OrgPack, Scenario, merged, pack_run_values

pytestmark = pytest.mark.e2e


#: A component whose install keeps helm busy: a post-install hook Job whose pod
#: never starts (its image cannot be pulled: no registry outside this machine is
#: reachable), so helm waits for it, the way it waits for a slow operator rollout
#: in a cluster.
SLOW_CHART = ("acme-slow", "0.1.0")
SLOW_HOOK = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-post-install
  annotations:
    helm.sh/hook: post-install,post-upgrade
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: wait
          image: registry.example.com/never-pulled:1
"""


@pytest.fixture(scope="module")
def charts_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The component charts and acme-slow, pushed with ``helm push``."""
    workdir = tmp_path_factory.mktemp("component-charts")
    repository = push_component_charts(helm, registry, workdir)
    name, version = SLOW_CHART
    chart = workdir / "src" / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\n")
    (chart / "templates" / "hook.yaml").write_text(SLOW_HOOK)
    helm.run("package", str(chart), "--destination", str(workdir / "packages"))
    login = ["--plain-http", "--username", registry.username, "--password", registry.password]
    helm.run("push", str(workdir / "packages" / f"{name}-{version}.tgz"), repository, *login)
    return repository


@pytest.fixture
def pack(
    charts_repository: str, registry: Registry, registry_auth_file: Path, namespace: str, tmp_path: Path
) -> OrgPack:
    """The org pack with an overlay for h100 and one for h200 (a criterion to change)."""
    components = f"{namespace}-acme"
    root = write_org_pack(
        tmp_path / "pack", chart_repository=charts_repository, namespace=components, accelerators=("h100", "h200")
    )
    ref = registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0")
    pushed = oras.push_pack(root, ref, registry_config=registry_auth_file)
    return OrgPack(ref=pushed.ref, components_namespace=components)


@pytest.fixture
def slow_pack(
    charts_repository: str, registry: Registry, registry_auth_file: Path, namespace: str, tmp_path: Path
) -> OrgPack:
    """acme-agent, then acme-slow (whose install waits), for h100 and h200."""
    components = f"{namespace}-acme"
    root = write_org_pack(
        tmp_path / "pack",
        chart_repository=charts_repository,
        namespace=components,
        accelerators=("h100", "h200"),
        charts={"acme-agent": COMPONENT_CHARTS["acme-agent"], SLOW_CHART[0]: SLOW_CHART[1]},
    )
    ref = registry.ref(f"acme/{namespace}/aicr-slow-pack", "1.0.0")
    pushed = oras.push_pack(root, ref, registry_config=registry_auth_file)
    return OrgPack(ref=pushed.ref, components_namespace=components)


@pytest.fixture
def scenario(helm: Helm, control_plane: ControlPlane, registry: Registry, namespace: str) -> Scenario:
    return Scenario(helm, control_plane, registry, namespace)


class StatusReports:
    """Every version of the release's status ConfigMap report (``report.json``),
    from a watch: two runs of one release (an old Job's and a new Job's) write the
    same ConfigMap, so the old run's last report is overwritten by the new run's."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str = "aicr-run-status") -> None:
        self.reports: list[dict[str, Any]] = []
        self._watch = ObjectWatch(plane.admin, f"/api/v1/namespaces/{namespace}/configmaps", name, self._take)

    def _take(self, _kind: str, obj: dict[str, Any]) -> None:
        report = (obj.get("data") or {}).get("report.json")
        if report:
            self.reports.append(json.loads(report))

    def last(self, accelerator: str, timeout: float = 60.0) -> dict[str, Any]:
        """The last report of the run with ``accelerator`` in its criteria, once it
        has ended (its phase is no longer Running)."""
        deadline = time.monotonic() + timeout
        while True:
            mine = [r for r in self.reports if r["criteria"].get("accelerator") == accelerator]
            if mine and mine[-1]["phase"] != "Running":
                return mine[-1]
            assert time.monotonic() < deadline, f"no ended report for {accelerator}: {mine[-1:] or self.reports[-1:]}"
            time.sleep(0.1)

    def stop(self) -> None:
        self._watch.stop()


def job_of(scenario: Scenario, run: JobRun) -> dict[str, Any]:
    return scenario.plane.admin.get(f"/apis/batch/v1/namespaces/{scenario.namespace}/jobs/{run.job_name}")


def condition(job: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in job["status"].get("conditions") or [] if c["type"] == kind and c["status"] == "True"]
    assert found, f"Job has no {kind} condition: {job['status']}"
    return dict(found[0])


# -- a deterministic failure fails the Job at once --------------------------------------------


def test_a_deterministic_failure_fails_the_job_at_once_without_retries(
    scenario: Scenario, aicr_kubelet: Kubelet, pack: OrgPack
) -> None:
    # os=ubuntu is stated, but no overlay the acme pack applies carries it: aicr
    # refuses the criteria (invalid input, exit 2), which re-running cannot fix.
    scenario.pack_secret()
    scenario.install(merged(pack_run_values(pack), {"os": "ubuntu", "job": {"backoffLimit": 3}}))

    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Failed", "PodFailurePolicy", 1), (
        outcome.describe()
    )
    run = outcome.last
    assert run.exit_code == 2, run.describe()
    assert run.termination_message.startswith("Failed (exit 2): recipe failed: "), run.termination_message
    job = job_of(scenario, run)
    assert job["status"].get("failed") == 1
    failed = condition(job, "Failed")
    assert "failed with exit code 2 matching FailJob rule at index 0" in failed["message"], failed
    assert scenario.results.statuses()["recipe"] == "failed"


# -- a transient failure is retried up to backoffLimit ------------------------------------------


def test_a_transient_failure_is_retried_up_to_the_backoff_limit(
    scenario: Scenario, aicr_kubelet: Kubelet, pack: OrgPack
) -> None:
    # The registry refuses the credential (exit 23): a Secret fixed meanwhile would
    # let a retry pass, so the Job retries, and gives up after backoffLimit.
    registry = scenario.registry
    scenario.pack_secret(json.dumps(docker_config(registry.host, registry.username, "wrong-password")))
    scenario.install(merged(pack_run_values(pack), {"job": {"backoffLimit": 1}}))

    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Failed", "BackoffLimitExceeded", 2), (
        outcome.describe()
    )
    assert [run.exit_code for run in outcome.attempts] == [23, 23]
    assert len({run.pod_name for run in outcome.attempts}) == 2
    job = job_of(scenario, outcome.last)
    assert job["status"].get("failed") == 2
    assert condition(job, "Failed")["message"] == "Job has reached the specified backoff limit"


# -- an evicted pod does not count -----------------------------------------------------------------


def test_an_evicted_pod_is_replaced_without_counting_against_the_backoff_limit(
    scenario: Scenario, aicr_kubelet: Kubelet, pack: OrgPack
) -> None:
    scenario.pack_secret()
    # deploy.sh holds acme-config's install until the ConfigMap "gate" exists: the run
    # cannot end before the eviction reaches it (without the hold, its last second
    # could, and the pod exited 0).
    gate = "gate"
    hold = {
        "FAKE_AICR_DEPLOY_HOLD_AT": "acme-config",
        "FAKE_AICR_DEPLOY_HOLD_CONFIGMAP": f"{scenario.namespace}/{gate}",
    }
    scenario.install(
        merged(pack_run_values(pack, hold), {"job": {"backoffLimit": 0, "terminationGracePeriodSeconds": 30}})
    )

    def at_recipe(line: str) -> bool:
        return "step started step=recipe" in line

    evicted = aicr_kubelet.run_job(RELEASE, scenario.namespace, terminate_by="evict", terminate_when=at_recipe)
    scenario.plane.admin.create(
        f"/api/v1/namespaces/{scenario.namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate}},
    )
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, scenario.namespace)

    assert evicted.exit_code == 143, evicted.describe()
    assert evicted.deletion is not None
    assert evicted.deletion.disruption == "EvictionByEvictionAPI"
    assert evicted.termination_message.startswith("Interrupted (exit 143)"), evicted.termination_message
    # backoffLimit 0, yet the controller ran a fresh pod, and it completed the Job
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Complete", "CompletionsReached", 1), (
        outcome.describe()
    )
    assert outcome.last.pod_name != evicted.pod_name
    job = job_of(scenario, outcome.last)
    assert (job["status"].get("failed", 0), job["status"].get("succeeded")) == (0, 1)
    assert scenario.results.report()["phase"] == "Succeeded"


# -- helm upgrade while the Job runs -----------------------------------------------------------------


def _upgrade(helm: Helm, namespace: str, values: dict[str, Any], workdir: Path) -> float:
    """``helm upgrade`` (no --wait, as a GitOps controller without wait would);
    returns when it finished (time.monotonic())."""
    values_file = workdir / "upgrade-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm.run("upgrade", RELEASE, str(CHART), "--namespace", namespace, "-f", str(values_file))
    return time.monotonic()


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


@pytest.fixture
def status_reports(control_plane: ControlPlane, namespace: str) -> Iterator[StatusReports]:
    reports = StatusReports(control_plane, namespace)
    yield reports
    reports.stop()


def test_a_helm_upgrade_with_a_changed_criterion_while_the_job_runs_terminates_the_old_pod(
    *,
    scenario: Scenario,
    aicr_kubelet: Kubelet,
    slow_pack: OrgPack,
    executor: ThreadPoolExecutor,
    status_reports: StatusReports,
    tmp_path: Path,
) -> None:
    scenario.pack_secret()
    expect = {"components": ["acme-agent", SLOW_CHART[0]], "overlays": ["acme-h100-training"]}
    values = merged(
        pack_run_values(slow_pack), {"recipe": {"expect": expect}, "job": {"terminationGracePeriodSeconds": 20}}
    )
    values["aicrProvenance"] = {"mode": "off"}  # as Scenario.install sets it: the upgrade must keep it
    scenario.install(values)
    slow_install = threading.Event()

    def watch(line: str) -> bool:
        if f'Release "{SLOW_CHART[0]}" does not exist' in line:  # the pod's helm is installing it
            slow_install.set()
        return False

    old: Future[JobRun] = executor.submit(aicr_kubelet.run_job, RELEASE, scenario.namespace, terminate_when=watch)
    assert slow_install.wait(120), "the old pod never reached the slow install"
    old_job = aicr_kubelet.find_job(RELEASE, scenario.namespace)["metadata"]["name"]
    changed = merged(values, {"accelerator": "h200", "recipe": {"expect": {"overlays": ["acme-h200-training"]}}})
    upgraded_at = _upgrade(scenario.helm, scenario.namespace, changed, tmp_path)
    new_job = aicr_kubelet.find_job(RELEASE, scenario.namespace)["metadata"]["name"]
    new_pod_while_old_ran = False
    while not old.done():  # does the new Job's pod exist while the old pod still runs?
        pods = scenario.plane.admin.get(
            f"/api/v1/namespaces/{scenario.namespace}/pods", labelSelector=f"batch.kubernetes.io/job-name={new_job}"
        )["items"]
        new_pod_while_old_ran = new_pod_while_old_ran or (bool(pods) and not old.done())
        time.sleep(0.2)
    run = old.result(timeout=180)

    # The upgrade's new values give the Job a new name: Helm created the new Job and
    # deleted the old one (background propagation); the garbage collector deleted the
    # old pod with the pod's own grace period, and the kubelet sent SIGTERM.
    assert new_job != old_job
    assert run.job_name == old_job
    assert not scenario.plane.admin.exists(f"/apis/batch/v1/namespaces/{scenario.namespace}/jobs/{old_job}")
    assert run.deletion is not None, run.describe()
    assert (run.deletion.grace_seconds, run.deletion.disruption, run.deletion.sigkill) == (20, "", False)
    assert run.deletion.sigterm_at is not None
    assert run.deletion.exited_after_sigterm is not None
    assert run.deletion.sigterm_at - upgraded_at < 10, "SIGTERM came with the upgrade"
    # The runner gave the running helm its share of the grace (20 s - 15 s = 5 s),
    # then stopped it: helm was cut in the middle of installing acme-slow. Helm 4
    # records a cancelled install as failed (nothing is left pending-install). The
    # runner exited inside the grace period: no SIGKILL.
    assert 5 <= run.deletion.exited_after_sigterm < 20, run.deletion
    assert run.exit_code == 143, run.describe()
    assert run.termination_message.startswith(
        "Interrupted (exit 143): interrupted during deploy: interrupted: deploy did not finish within the 5s grace "
        "period and was stopped"
    ), run.termination_message
    assert f"Release {SLOW_CHART[0]} has been cancelled." in run.output
    # The install the old pod's helm was cut in is acme-slow's first revision. The new
    # Job's pod may already be upgrading it (a second revision, pending-upgrade while its
    # hook waits): the cut install is read from the history, not from the release's state.
    releases = releases_in(scenario.helm, slow_pack.components_namespace)
    assert releases["acme-agent"]["status"] == "deployed", releases
    history = scenario.helm.run("history", SLOW_CHART[0], "-n", slow_pack.components_namespace, "-o", "json")
    first = json.loads(history.stdout)[0]
    assert (first["revision"], first["status"]) == (1, "failed"), history.stdout
    assert first["description"] == f'Release "{SLOW_CHART[0]}" failed: context canceled', history.stdout
    # The old run's last status report (the new Job's run writes the same ConfigMap
    # from its start on: the h200 run's reports follow).
    report = status_reports.last("h100")
    assert report["phase"] == "Interrupted", report
    assert next(s for s in report["steps"] if s["state"] == "deploy")["status"] == "interrupted", report
    # The Job controller created the new Job's pod at once, while the old pod was
    # still in its grace period: the node runs both together (the new run waits
    # for the install Lease before it deploys).
    assert new_pod_while_old_ran
    print(
        f"\nhelm upgrade mid-run: deletion seen {run.deletion.sigterm_at - upgraded_at:+.2f}s after the upgrade "
        f"returned; the runner exited {run.deletion.exited_after_sigterm:.2f}s after it"
    )
