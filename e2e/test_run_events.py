"""A run you can follow and trust, against the real API server.

The chart is installed with the pinned helm; the Job's pod is run by the real
kubelet on the e2e node; the runner drives the fake aicr with a pack of 13 or 50
components whose installs deploy.sh simulates. Asserted on the API server:

* the Events the runner records on its Job (``events.k8s.io/v1``, regarding the
  Job by uid), bounded over a run of 50 components;
* the status ConfigMap's per-component progress while deploy.sh is still running:
  deploy.sh holds one component's install until the test, having seen the
  progress, creates the gate ConfigMap it waits for (no sleep anywhere);
* NOTES.txt's wait command, run exactly as rendered with the pinned kubectl:
  0 on success, 3 for components failed under --best-effort, 1 within seconds of
  a failed Job;
* a best-effort run with a failed component: the Warning Event, the phase
  ``SucceededWithFailures``, the termination message and the Job's annotation.

The counts of Events and status ConfigMap writes of each run are printed
(``-s`` shows them); docs/runs.md "Where results land" quotes them.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import Kubelet
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import ACME_CRITERIA, CHART, RELEASE, embedded_base_components, extra_env, write_org_pack
from e2e.tools import tool

pytestmark = pytest.mark.e2e

PACK_SECRET = "pack-cred"
STATUS = "aicr-run-status"
#: Where the simulated installs say their charts come from (nothing is pulled).
CHARTS = "oci://registry.example/charts"


def components(count: int) -> dict[str, str]:
    """acme-agent first (the others depend on it), then acme-c01...: ``count`` in all."""
    return {"acme-agent": "1.0.0"} | {f"acme-c{i:02d}": "1.0.0" for i in range(1, count)}


@dataclass
class Run:
    """One chart install in a fresh namespace, and what watching it saw."""

    helm: Helm
    plane: ControlPlane
    namespace: str
    job: str = ""
    status_writes: list[str] = field(default_factory=list)

    def install(self, values: Mapping[str, Any]) -> str:
        """Install the chart; returns NOTES.txt as rendered."""
        proc = self.helm.install(RELEASE, CHART, self.namespace, values=values)
        jobs = self.plane.admin.get(f"/apis/batch/v1/namespaces/{self.namespace}/jobs")["items"]
        [job] = jobs
        self.job = job["metadata"]["name"]
        return proc.stdout.split("NOTES:", 1)[1]

    def job_object(self) -> dict[str, Any]:
        return self.plane.admin.get(f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{self.job}")

    def events(self) -> list[dict[str, Any]]:
        """The events.k8s.io Events the runner recorded regarding this Job (the Job
        controller records its own too)."""
        items = self.plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events")["items"]
        return [
            e
            for e in items
            if (e.get("regarding") or {}).get("name") == self.job and e.get("reportingController") == "aicr-runner"
        ]

    def status(self) -> dict[str, str]:
        cm = self.plane.configmap(self.namespace, STATUS)
        return dict((cm or {}).get("data") or {})

    def progress(self) -> dict[str, Any] | None:
        data = self.status()
        if "report.json" not in data:
            return None
        deploy = next(s for s in json.loads(data["report.json"])["steps"] if s["state"] == "deploy")
        progress: dict[str, Any] | None = deploy.get("progress")
        return progress

    def kubectl_env(self) -> dict[str, str]:
        """The pinned kubectl first on PATH, the admin kubeconfig."""
        path = f"{tool('kubectl').parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "KUBECONFIG": str(self.plane.kubeconfig)}


@pytest.fixture
def run(helm: Helm, control_plane: ControlPlane, registry: Registry, namespace: str) -> Run:
    control_plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    return Run(helm, control_plane, namespace)


@pytest.fixture
def pack_of(registry: Registry, registry_auth_file: Path, tmp_path: Path, run: Run) -> Callable[[int], str]:
    """``pack_of(count)``: an org pack of ``count`` components, pushed with oras; its ref."""

    def push(count: int) -> str:
        pack = write_org_pack(
            tmp_path / "pack", chart_repository=CHARTS, namespace=f"{run.namespace}-acme", charts=components(count)
        )
        ref = registry.ref(f"acme/{run.namespace}/aicr-pack", "1.0.0")
        return oras.push_pack(pack, ref, registry_config=registry_auth_file).ref

    return push


def values(
    pack: str, env: Mapping[str, str], *, job: Mapping[str, Any] | None = None, **override: Any
) -> dict[str, Any]:
    """The org pack, simulated installs (the chart's default deploy flags), validation off."""
    return {
        **ACME_CRITERIA,
        "dataPack": pack,
        "dataPackSecret": PACK_SECRET,
        "dataPackPlainHTTP": True,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        "aicrProvenance": {"mode": "off"},
        "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
        "job": {"extraEnv": extra_env(FAKE_AICR_DEPLOY_BACKOFF="0", **env), **(job or {})},
        **override,
    }


def documented(notes: str, first_line: str) -> str:
    """A command block of NOTES.txt: the line starting with ``first_line`` (indented
    two spaces) and, for the wait loop, every line up to its closing ``done)``."""
    lines = notes.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {first_line}"))
    if not lines[start].strip().startswith("(while"):
        return lines[start].strip()
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "done)")
    return "\n".join(line[2:] for line in lines[start : end + 1])


@pytest.fixture
def watch_status(run: Run) -> Iterator[Callable[[], None]]:
    """Records the status ConfigMap's writes (the resourceVersion of each ADDED or
    MODIFIED watch event) with the pinned kubectl. Call the yielded function once
    the run is over: it returns when the watch has delivered the final write."""
    argv = [str(tool("kubectl")), "get", "configmap", "-n", run.namespace, "--field-selector",
            f"metadata.name={STATUS}", "--watch", "--output-watch-events", "-o",
            "jsonpath={.type} {.object.metadata.resourceVersion}{\"\\n\"}"]  # fmt: skip
    proc = subprocess.Popen(argv, env=run.kubectl_env(), stdout=subprocess.PIPE, text=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, _, version = line.strip().partition(" ")
            if kind in ("ADDED", "MODIFIED"):
                run.status_writes.append(version)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def final_write_seen() -> None:
        final = run.plane.configmap(run.namespace, STATUS)
        assert final is not None
        version = final["metadata"]["resourceVersion"]
        wait_until("the final status write in the watch", lambda: version in run.status_writes, timeout=60)

    try:
        yield final_write_seen
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        reader.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def wait_until(what: str, seen: Callable[[], Any], timeout: float = 300) -> Any:
    """Polls ``seen`` (an API read) until it returns something truthy: the run is held
    or ending, so this waits for an event, not for a guessed duration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := seen():
            return result
        time.sleep(0.2)
    raise AssertionError(f"never saw {what}")


def start_wait(run: Run, notes: str) -> subprocess.Popen[str]:
    """NOTES.txt's wait command, exactly as rendered, with the pinned kubectl."""
    command = documented(notes, "(while :; do")
    return subprocess.Popen(["sh", "-c", command], env=run.kubectl_env(), stdout=subprocess.PIPE, text=True)


def start_follow(run: Run, notes: str) -> subprocess.Popen[str]:
    """NOTES.txt's "Follow the run" command (``kubectl wait`` for the container,
    then ``kubectl logs -f``), exactly as rendered, with the pinned kubectl: the
    API server streams the log from the node's kubelet."""
    command = documented(notes, "kubectl wait -n")
    return subprocess.Popen(["sh", "-c", command], env=run.kubectl_env(), stdout=subprocess.PIPE, text=True)


# -- 50 components: progress mid-deploy, bounded Events, the wait returns 0 ------------------


def test_a_50_component_run_shows_progress_mid_deploy_and_bounded_events_on_its_job(
    run: Run,
    pack_of: Callable[[int], str],
    aicr_kubelet: Kubelet,
    watch_status: Callable[[], None],
) -> None:
    pack = pack_of(50)
    gate = "release-deploy"
    notes = run.install(
        values(
            pack,
            {"FAKE_AICR_DEPLOY_HOLD_AT": "acme-c30", "FAKE_AICR_DEPLOY_HOLD_CONFIGMAP": f"{run.namespace}/{gate}"},
        )
    )
    waiting = start_wait(run, notes)  # before the pod exists, as a user would right after helm install

    with aicr_kubelet.serving(run.namespace) as runs:
        progress = wait_until(
            "acme-c30 as the current component",
            lambda: (p := run.progress()) and p["current"] == "acme-c30" and p,
        )
        # Held: deploy.sh is still running, 30 components ended before acme-c30.
        assert (progress["done"], progress["installed"], progress["failed"], progress["total"]) == (30, 30, 0, 50)
        assert [row["status"] for row in progress["components"]] == ["installed"] * 30 + ["running"]
        assert run.status()["phase"] == "Running"
        summary = run.status()["summary.txt"]
        assert "deploy progress: 30/50 done (30 installed, 0 failed), current: acme-c30" in summary
        assert waiting.poll() is None, "the wait command is still waiting"
        run.plane.admin.create(
            f"/api/v1/namespaces/{run.namespace}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate}},
        )
        out, _ = waiting.communicate(timeout=300)
        assert waiting.returncode == 0, out
        assert "Job complete: Succeeded" in out
    [pod] = runs
    assert pod.exit_code == 0, pod.describe()
    watch_status()

    job = run.job_object()
    events = run.events()
    reasons = [e["reason"] for e in events]
    print(f"\n50 components: {len(events)} Events on the Job, {len(run.status_writes)} status ConfigMap writes")
    assert {e["regarding"]["uid"] for e in events} == {job["metadata"]["uid"]}
    assert {e["reportingInstance"] for e in events} == {pod.pod_name}
    assert {e["type"] for e in events} == {"Normal"}
    assert {"FetchSucceeded", "RecipeSucceeded", "DeploySucceeded", "DeployProgress", "RunSucceeded"} <= set(reasons)
    assert len(events) <= 60, reasons
    deploy = next(e for e in events if e["reason"] == "DeploySucceeded")
    assert deploy["note"] == "AICR install complete: 50/50 installed"
    assert job["metadata"]["annotations"]["aicr.nvidia.com/outcome"] == "Succeeded"
    # One write per step start, one per component end at most, one at the end.
    assert len(run.status_writes) <= 13 + 50 + 2, run.status_writes


# -- 13 components, one failed under --best-effort ------------------------------------------


def test_a_best_effort_run_with_a_failed_component_is_unmissable(
    run: Run,
    pack_of: Callable[[int], str],
    aicr_kubelet: Kubelet,
    watch_status: Callable[[], None],
) -> None:
    pack = pack_of(13)
    notes = run.install(values(pack, {"FAKE_AICR_DEPLOY_FAIL": "acme-c05"}))
    waiting = start_wait(run, notes)
    following = start_follow(run, notes)

    pod = aicr_kubelet.run_job(RELEASE, run.namespace)

    out, _ = waiting.communicate(timeout=120)
    followed, _ = following.communicate(timeout=120)
    watch_status()
    # The follow command waited for the container, then streamed its whole log to its end.
    assert following.returncode == 0, followed
    assert followed.endswith(pod.output), followed[-3000:]
    # kubectl wait says so once per --for condition (created, containerID set).
    assert followed.removesuffix(pod.output).splitlines() == [f"pod/{pod.pod_name} condition met"] * 2, followed[:500]
    assert pod.exit_code == 0, pod.describe()  # anchor semantics: the Job completes
    assert waiting.returncode == 3, out
    assert "Job complete: SucceededWithFailures" in out
    assert pod.termination_message.startswith(
        "SucceededWithFailures (exit 0): AICR Job complete, but components failed: acme-c05"
    )
    status = run.status()
    assert status["phase"] == "SucceededWithFailures"
    assert json.loads(status["report.json"])["failedComponents"] == ["acme-c05"]
    assert "failed components: acme-c05" in status["summary.txt"]
    annotations = run.job_object()["metadata"]["annotations"]
    assert annotations["aicr.nvidia.com/outcome"] == "SucceededWithFailures"
    assert annotations["aicr.nvidia.com/failed-components"] == "acme-c05"
    events = run.events()
    print(f"\n13 components: {len(events)} Events on the Job, {len(run.status_writes)} status ConfigMap writes")
    [warning] = [e for e in events if e["type"] == "Warning"]
    assert warning["reason"] == "RunSucceededWithFailures"
    assert warning["note"] == pod.termination_message
    deploy = next(e for e in events if e["reason"] == "DeployWarned")
    assert deploy["note"].endswith("12/13 installed, 1 failed (acme-c05)")
    # `kubectl events --for job/<job>` (NOTES.txt) lists them.
    listed = subprocess.run(
        [str(tool("kubectl")), "events", "-n", run.namespace, "--for", f"job/{run.job}"],
        env=run.kubectl_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "RunSucceededWithFailures" in listed
    assert "DeployWarned" in listed


# -- a failed Job: the wait returns 1 within seconds --------------------------------------------


def test_the_documented_wait_returns_non_zero_within_seconds_of_a_failed_job(
    run: Run, pack_of: Callable[[int], str], aicr_kubelet: Kubelet
) -> None:
    """deploy.failOnComponentFailure turns the failed component into a failed Job
    (exit 1; backoffLimit 0: the first failure is the Job's)."""
    pack = pack_of(13)
    notes = run.install(
        values(
            pack,
            {"FAKE_AICR_DEPLOY_FAIL": "acme-c05"},
            deploy={"failOnComponentFailure": True},
            job={"backoffLimit": 0},
        )
    )
    waiting = start_wait(run, notes)

    pod = aicr_kubelet.run_job(RELEASE, run.namespace)
    ended = time.monotonic()

    assert pod.exit_code == 1, pod.describe()
    out, _ = waiting.communicate(timeout=120)
    returned_after = time.monotonic() - ended
    print(f"\nthe wait returned {returned_after:.1f}s after the pod ended")
    assert waiting.returncode == 1, out
    assert "Job failed" in out
    assert returned_after < 30, "the loop checks for Failed every 10 s"
    assert run.status()["phase"] == "Failed"
    [warning] = [e for e in run.events() if e["reason"] == "RunFailed"]
    assert warning["type"] == "Warning"
    assert warning["note"].startswith("Failed (exit 1): Components FAILED (acme-c05)")
    # The one-line "why" of NOTES.txt shows the termination message.
    why = documented(notes, "kubectl get pod -n")
    shown = subprocess.run(["sh", "-c", why], env=run.kubectl_env(), capture_output=True, text=True, check=True)
    assert f"{pod.pod_name}: Failed (exit 1): Components FAILED (acme-c05)" in shown.stdout


# -- the chart's namespaced Role alone is enough for the Events -----------------------------------


def test_the_charts_namespaced_role_alone_lets_the_runner_record_events_and_annotate_only_its_job(
    helm: Helm, control_plane: ControlPlane, namespace: str
) -> None:
    """The ServiceAccount with only the chart's namespaced Role bound (not the
    cluster-admin binding): the runner's own JobEvents, through the Python client it
    uses, records Events on its Job and annotates it; another Job it may not touch."""
    from aicr_runner import logs
    from aicr_runner.kube.api import ClientKubeApi
    from aicr_runner.kube.events import OUTCOME_ANNOTATION, JobEvents
    from aicr_runner.run.machine import Machine
    from aicr_runner.run.report import RunPhase, StepRecord, StepStatus

    docs = helm.template(RELEASE, CHART, namespace, values={"accelerator": "h100"})
    [account] = [d for d in docs if d["kind"] == "ServiceAccount"]
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{RELEASE}-installer"]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == f"{RELEASE}-installer"]
    [job] = [d for d in docs if d["kind"] == "Job"]
    admin = control_plane.admin
    admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding)
    for name in (job["metadata"]["name"], "someone-elses-job"):
        suspended = {**job, "metadata": {**job["metadata"], "name": name}, "spec": {**job["spec"], "suspend": True}}
        admin.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", suspended)
    token = control_plane.token(namespace, account["metadata"]["name"])
    api = ClientKubeApi(control_plane.kubernetes_client(token))
    report = Machine.new_report(runner_version="t", aicr_version="v", criteria={})
    report.phase = RunPhase.SUCCEEDED

    ours = JobEvents(api, namespace=namespace, job=job["metadata"]["name"], pod="p")
    ours.step_ended(StepRecord("fetch", StepStatus.SUCCEEDED, message="aicr v1.2.0"))
    ours.run_ended(report, "Succeeded (exit 0): AICR Job complete")
    assert ours.recorded == [("Normal", "FetchSucceeded"), ("Normal", "RunSucceeded")]
    metadata = admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job['metadata']['name']}")["metadata"]
    assert metadata["annotations"][OUTCOME_ANNOTATION] == "Succeeded"

    theirs = JobEvents(api, namespace=namespace, job="someone-elses-job", pod="p")
    # The runner's log to a buffer of this test's own: an earlier test in the session
    # may have left the log configured to a stream capsys does not see.
    log = io.StringIO()
    logs.configure(stream=log)
    try:
        theirs.run_ended(report, "Succeeded (exit 0)")  # never raises
    finally:
        logs.configure()
    assert theirs.recorded == []
    assert "may not read Jobs" in log.getvalue()
