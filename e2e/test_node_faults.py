"""Faults a real node makes, while deploy.sh runs (issue 26, item 5):

* the kubelet restarts;
* containerd restarts (long enough for the kubelet to report the node NotReady);
* the pod's container is killed mid-helm, and the Job controller's next pod
  recovers the release it left pending through the Lease: every process of the
  container SIGKILLed at once from the node (a power loss, a node-level kill),
  and a real OOM kill by the kernel (the container's memory limit exceeded).

Each fault happens at a known point: deploy.sh's real helm has installed
``acme-agent`` and is held by a test helm (first on the pods' PATH, in an image
derived from the e2e image) printing a numbered tick line every 0.2 s until the
test opens its gate in the pod's ``work`` emptyDir; or, for the kills, its
``helm upgrade --install`` waits on a Deployment nothing makes ready, and the
container is killed once Helm has recorded the release ``pending-install``.
The ticks make a lost or doubled log line visible: the pod log must hold every
one, once, in order.

Each test says what was lost and how the run ended: the Job's final condition
and counters as the Job controller recorded them, the status ConfigMap's phase
and steps, the component releases, the runner's Events on the Job and the
kubelet's and node controller's Events. Timings are printed (``-s``) and recorded
in e2e/README.md.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from e2e import test_change_safety as change_safety
from e2e.harness.apiserver import ControlPlane
from e2e.harness.node import JobRun, Kubelet, RealNode
from e2e.scenarios import CHART, RELEASE
from e2e.test_change_safety import (
    HANGING_HELM,
    LEASE_SECONDS,
    Env,
    in_thread,
    job_pod,
    jobs,
    kubelet_with_helm,
    runner_pid,
    tell_test_helm,
    values_for,
    wait_for,
)
from tests.support.podman import IMAGE_PYTHON

pytestmark = pytest.mark.e2e

#: The change-safety scenarios' fixtures: their component charts, pushed once per
#: module, and per test a pack installing them into a namespace of its own.
chart_repository = change_safety.chart_repository
env = change_safety.env

#: A test helm in front of the real one: ``helm upgrade`` does its work, then
#: holds, printing a numbered tick every 0.2 s, until the test opens the pod's
#: gate (HELD_HELM_TIMEOUT_SECONDS of change safety guards a gate never opened).
TICKING_HELM = """#!/bin/sh
if [ "$1" = "upgrade" ]; then
  {helm} "$@" || exit $?
  # The release: the first word after upgrade that is no flag (the runner's helm guard
  # puts deploy.helmApply's --server-side=... right after the subcommand).
  release=""
  for word in "$@"; do
    case "$word" in upgrade|-*) ;; *) release="$word"; break ;; esac
  done
  tick=0
  until [ -e {gate}/open ]; do
    tick=$((tick + 1))
    if [ "$tick" -gt $(({timeout} * 5)) ]; then echo "test helm: gate {gate} not opened" >&2; exit 1; fi
    echo "test helm: $release held, tick $tick"
    sleep 0.2
  done
  echo "test helm: $release released after tick $tick"
  exit 0
fi
exec {helm} "$@"
"""
TICK = re.compile(r"test helm: acme-agent held, tick (\d+)")
#: Every step of a run of values_for's settings, in order, and how it ends when nothing
#: failed (the pack's recipe has no expectations: check-recipe warns; validation is off).
SUCCEEDED_STEPS = {
    "fetch": "succeeded",
    "pack": "succeeded",
    "recipe": "succeeded",
    "capture-recipe": "succeeded",
    "check-recipe": "warned",
    "bundle": "succeeded",
    "verify": "succeeded",
    "upgrade-check": "skipped",
    "lease": "succeeded",
    "snapshot": "skipped",
    "deploy": "succeeded",
    "validate": "skipped",
    "capture-verdict": "skipped",
    "publish": "skipped",
    "capture-evidence": "skipped",
}
BOTH_DEPLOYED = {"acme-agent": "deployed", "acme-config": "deployed"}


class Ticks:
    """The held helm's ticks as the pod log shows them (a ``terminate_when``
    predicate that never ends the pod)."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.arrived: list[float] = []  # when each was read from the log (time.monotonic())
        self._lock = threading.Lock()

    def __call__(self, line: str) -> bool:
        match = TICK.search(line)
        if match:
            with self._lock:
                self.seen.append(int(match[1]))
                self.arrived.append(time.monotonic())
        return False

    def longest_silence(self) -> tuple[float, int]:
        """The longest time between two ticks reaching the log, and how many
        arrived at the end of it (within a second)."""
        gaps = [(later - earlier, i + 1) for i, (earlier, later) in enumerate(itertools.pairwise(self.arrived))]
        gap, first = max(gaps)
        burst = sum(1 for at in self.arrived[first:] if at - self.arrived[first] < 1.0)
        return gap, burst

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def after(self, count: int, more: int) -> Callable[[], bool]:
        return lambda: self.count() >= count + more


def container_id(pod: Mapping[str, Any]) -> str:
    """The running container's containerd ID (``containerd://<id>`` in the Pod status)."""
    [status] = pod["status"]["containerStatuses"]
    assert "running" in status["state"], status
    return str(status["containerID"]).removeprefix("containerd://")


def runner_events(plane: ControlPlane, namespace: str, job: str) -> list[tuple[str, str]]:
    """(type, reason) of the events.k8s.io Events the runner recorded on the Job, oldest first."""
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    mine = [e for e in items if e.get("reportingController") == "aicr-runner" and e["regarding"]["name"] == job]
    mine.sort(key=lambda e: e["eventTime"])
    return [(e["type"], e["reason"]) for e in mine]


def core_events(plane: ControlPlane, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The core Events about one object (the kubelet's, the node controller's)."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(plane.admin.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector)["items"])


def since(events: list[dict[str, Any]], moment: dt.datetime) -> list[tuple[str, str, str]]:
    """(reason, source component, message) of the Events last seen at or after ``moment``."""
    floor = moment.replace(microsecond=0)
    found = []
    for event in events:
        stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
        if stamp and dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) >= floor:
            component = (event.get("source") or {}).get("component") or event.get("reportingComponent", "")
            found.append((event["reason"], component, event.get("message", "")))
    return found


def node_ready(plane: ControlPlane, node: RealNode) -> dict[str, Any]:
    current = plane.admin.get(f"/api/v1/nodes/{node.name}")
    return dict(next(c for c in current["status"]["conditions"] if c["type"] == "Ready"))


def start_held_run(
    env: Env, kubelet: Kubelet, ticks: Ticks
) -> tuple[str, dict[str, Any], threading.Thread, list[JobRun]]:
    """Install the chart; follow its pod until deploy.sh's first helm operation is
    held (ticking). Returns the Job's name, its pod, the following thread and its result."""
    env.helm.install(RELEASE, CHART, env.namespace, values=values_for(env.pack_ref, **kubelet.image_values()))
    [job] = jobs(env.plane, env.namespace)
    thread, out = in_thread(lambda: kubelet.run_job(RELEASE, env.namespace, job_name=job, terminate_when=ticks))
    wait_for("deploy.sh's first helm operation, held", lambda: ticks.count() > 0 or not thread.is_alive(), 300)
    assert ticks.count() > 0, out[0].describe() if out else "the run ended"
    pod = job_pod(env.plane, env.namespace, job)
    assert pod is not None
    return job, pod, thread, out


def assert_one_pod_ran_and_completed(env: Env, kubelet: Kubelet, job: str, run: JobRun, pod: Mapping[str, Any]) -> None:
    """The run's one pod completed the Job: same pod, same container, no restart;
    the Job controller made no other pod and counted no failure."""
    assert run.exit_code == 0, run.describe()
    assert run.pod_name == pod["metadata"]["name"]
    [status] = run.pod["status"]["containerStatuses"]
    assert (status["containerID"], status["restartCount"]) == (pod["status"]["containerStatuses"][0]["containerID"], 0)
    final = kubelet.find_job(RELEASE, env.namespace)
    assert kubelet.wait_for_job_end(final) == ("Complete", "CompletionsReached")
    assert kubelet.next_pod(final) is None, "the Job ran another pod"
    counters = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert (counters.get("succeeded"), counters.get("failed", 0)) == (1, 0), counters


def assert_succeeded_with_both_releases(env: Env, job: str, pod_name: str) -> None:
    report = env.results.report()
    assert (report["phase"], report["exitCode"]) == ("Succeeded", 0), report
    assert report["runBy"] == f"{job}/{pod_name}"
    assert list(env.results.statuses().items()) == list(SUCCEEDED_STEPS.items())
    progress = env.results.step("deploy")["progress"]
    assert [(row["name"], row["status"], row["attempts"]) for row in progress["components"]] == [
        ("acme-agent", "installed", 1),
        ("acme-config", "installed", 1),
    ], progress
    assert env.releases() == BOTH_DEPLOYED, "both deployed, none pending"


def assert_every_tick_once_in_order(ticks: Ticks, run: JobRun) -> None:
    """No line of the held helm's output was lost or doubled in the pod log."""
    logged = [int(n) for n in TICK.findall(run.output)]
    assert logged == list(range(1, len(logged) + 1)), logged
    assert ticks.seen == logged
    released = re.search(r"test helm: acme-agent released after tick (\d+)", run.output)
    assert released is not None, run.output[-3000:]
    assert int(released[1]) == len(logged)


# -- the kubelet restarts -----------------------------------------------------------------------


def test_a_kubelet_restart_mid_deploy_loses_nothing_and_the_pod_runs_on(
    env: Env, node: RealNode, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path
) -> None:
    kubelet = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, TICKING_HELM, "ticking")
    ticks = Ticks()
    started = time.monotonic()
    job, pod, thread, out = start_held_run(env, kubelet, ticks)
    stopped_at = dt.datetime.now(dt.UTC)
    down_ticks: list[int] = []

    def until_the_container_ticks_on_without_a_kubelet() -> None:
        down_ticks.append(ticks.count())
        wait_for("ticks without a kubelet", ticks.after(down_ticks[0], 5))
        down_ticks.append(ticks.count())

    outage = node.restart_kubelet(until_the_container_ticks_on_without_a_kubelet)
    tell_test_helm(kubelet, pod, "open")
    thread.join(timeout=600)
    [run] = out
    finished = time.monotonic()

    assert_one_pod_ran_and_completed(env, kubelet, job, run, pod)
    assert_every_tick_once_in_order(ticks, run)
    assert_succeeded_with_both_releases(env, job, run.pod_name)
    # The runner's Events: every step it ran and the outcome, no warning.
    events = runner_events(env.plane, env.namespace, job)
    assert ("Normal", "DeploySucceeded") in events, events
    assert events[-1] == ("Normal", "RunSucceeded"), events
    assert not [e for e in events if e[0] != "Normal"], events
    # The new kubelet announced itself on the Node; it neither killed nor started
    # the container again.
    node_events = since(core_events(env.plane, "default", "Node", node.name), stopped_at)
    assert ("Starting", "kubelet", "Starting kubelet.") in node_events, node_events
    pod_reasons = [e["reason"] for e in core_events(env.plane, env.namespace, "Pod", run.pod_name)]
    assert pod_reasons.count("Started") == 1, pod_reasons
    assert "Killing" not in pod_reasons, pod_reasons
    print(
        f"\nkubelet restart: {down_ticks[1] - down_ticks[0]} ticks reached the log with no kubelet running; "
        f"the node Ready again {outage:.1f}s after the stop; the run {finished - started:.1f}s in all; nothing lost; "
        f"Node events since the stop: {[reason for reason, _, _ in node_events]}"
    )


# -- containerd restarts ------------------------------------------------------------------------


def test_a_containerd_restart_mid_deploy_loses_nothing_and_the_pod_runs_on(
    env: Env, node: RealNode, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path
) -> None:
    kubelet = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, TICKING_HELM, "ticking")
    ticks = Ticks()
    started = time.monotonic()
    job, pod, thread, out = start_held_run(env, kubelet, ticks)
    stopped_at = dt.datetime.now(dt.UTC)
    stopped = time.monotonic()
    not_ready: list[dict[str, Any]] = []

    def until_the_kubelet_reports_the_runtime_down() -> None:
        wait_for("the node NotReady", lambda: node_ready(env.plane, node)["status"] != "True", 180)
        not_ready.append(node_ready(env.plane, node))

    node.runtime.restart(until_the_kubelet_reports_the_runtime_down)
    restarted_at = dt.datetime.now(dt.UTC)
    down = time.monotonic() - stopped
    node.wait_ready_since(restarted_at)
    outage = time.monotonic() - stopped
    tell_test_helm(kubelet, pod, "open")
    thread.join(timeout=600)
    [run] = out
    finished = time.monotonic()

    # The kubelet reported the runtime down; the pod was neither evicted nor
    # restarted, and the Job controller saw one pod complete.
    [ready] = not_ready
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady"), ready
    assert "container runtime is down" in ready["message"], ready
    assert run.deletion is None, run.describe()
    assert_one_pod_ran_and_completed(env, kubelet, job, run, pod)
    assert_every_tick_once_in_order(ticks, run)
    assert_succeeded_with_both_releases(env, job, run.pod_name)
    events = runner_events(env.plane, env.namespace, job)
    assert ("Normal", "DeploySucceeded") in events, events
    assert events[-1] == ("Normal", "RunSucceeded"), events
    assert not [e for e in events if e[0] != "Normal"], events
    node_reasons = [reason for reason, _, _ in since(core_events(env.plane, "default", "Node", node.name), stopped_at)]
    assert "NodeNotReady" in node_reasons, node_reasons
    assert "NodeReady" in node_reasons, node_reasons
    pod_reasons = [e["reason"] for e in core_events(env.plane, env.namespace, "Pod", run.pod_name)]
    assert pod_reasons.count("Started") == 1, pod_reasons
    assert "Killing" not in pod_reasons, pod_reasons
    silence, burst = ticks.longest_silence()
    print(
        f"\ncontainerd restart: down {down:.1f}s (until the kubelet reported the node NotReady: "
        f"{ready['message']!r}), the node Ready again {outage:.1f}s after the stop; "
        f"the run {finished - started:.1f}s in all; nothing lost; no tick reached the log for {silence:.1f}s, "
        f"then {burst} at once"
    )


# -- the container is killed mid-helm ---------------------------------------------------------

#: HANGING_HELM (change safety) that, once the test leaves ``oom`` in the gate while
#: the hanging ``helm upgrade --install`` waits, runs the container out of memory.
#: On cgroup v2 the kubelet makes the OOM killer take the whole container
#: (memory.oom.group); this machine's memory controller is cgroup v1, where it
#: takes one process, the highest score. The test helm raises the container's
#: PID 1 (tini) to the top score, so the kill ends the container as a group kill
#: does: PID 1 gone, the kernel kills the rest of its PID namespace.
OOM_HELM = """#!/bin/sh
if [ "$1" = "upgrade" ]; then
  polls=0
  until [ -e {gate}/hang ] || [ -e {gate}/open ]; do
    polls=$((polls + 1))
    if [ "$polls" -gt $(({timeout} * 10)) ]; then echo "test helm: no word in {gate}" >&2; exit 1; fi
    sleep 0.1
  done
  if [ -e {gate}/hang ]; then
    {helm} "$@" --wait --timeout 10m &
    until [ -e {gate}/oom ]; do sleep 0.1; done
    echo 1000 > /proc/1/oom_score_adj
    echo "test helm: allocating until the container is out of memory"
    exec PYTHON -c "chunks = []
while True: chunks.append(bytes(1 << 24).replace(bytes(1), b'x'))"
  fi
fi
exec {helm} "$@"
""".replace("PYTHON", IMAGE_PYTHON)
#: Requests equal to limits: a Guaranteed pod, for whose processes the kubelet
#: asks the lowest OOM score (-997; containerd's restrict_oom_score_adj raises it
#: to containerd's own), far below the 1000 the test helm gives PID 1.
GUARANTEED = {"cpu": "1", "memory": "768Mi"}


def kill_mid_helm(
    env: Env, kubelet: Kubelet, values: dict[str, Any], kill: Callable[[dict[str, Any]], None]
) -> tuple[str, JobRun, dict[str, Any], JobRun, dict[str, float]]:
    """Install; once the first pod's helm has left acme-agent ``pending-install``,
    ``kill(pod)``; then let the Job controller's next pod run (its test helm is
    the real one). Returns the Job, the killed run, the status it left, the next
    run, and timings."""
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    first_pod = wait_for("the Job's pod", lambda: job_pod(env.plane, env.namespace, job))
    tell_test_helm(kubelet, first_pod, "hang")
    thread, out = in_thread(lambda: kubelet.run_job(RELEASE, env.namespace, job_name=job))
    wait_for(
        "helm's pending-install record",
        lambda: env.releases().get("acme-agent") == "pending-install" or not thread.is_alive(),
        300,
    )
    assert env.releases() == {"acme-agent": "pending-install"}, out[0].describe() if out else "no run"
    killed = time.monotonic()
    kill(env.plane.admin.get(f"/api/v1/namespaces/{env.namespace}/pods/{first_pod['metadata']['name']}"))
    thread.join(timeout=180)
    [first] = out
    # The first run's last word, read before the Job controller's next pod (10 s
    # back-off at least) writes the same ConfigMap.
    left = env.results.report()
    retry_pod = wait_for(
        "the Job's next pod", lambda: job_pod(env.plane, env.namespace, job, other_than=first.pod_name)
    )
    retried = time.monotonic()
    tell_test_helm(kubelet, retry_pod, "open")
    second = kubelet.run_job(RELEASE, env.namespace, job_name=job)
    assert second.pod_name == retry_pod["metadata"]["name"]
    final = kubelet.find_job(RELEASE, env.namespace)
    assert kubelet.wait_for_job_end(final) == ("Complete", "CompletionsReached")
    done = time.monotonic()
    assert kubelet.next_pod(final) is None, "the Job ran a third pod"
    return job, first, left, second, {"next pod": retried - killed, "Job Complete": done - killed}


def assert_recovered_by_the_next_pod(
    env: Env, job: str, first: JobRun, left: Mapping[str, Any], second: JobRun
) -> None:
    """What a container killed mid-helm lost, and how the Job controller's next pod recovered."""
    assert first.deletion is None, first.describe()  # no SIGTERM: it died
    assert not first.termination_message.startswith(("Failed", "Interrupted", "Succeeded")), first.termination_message
    # What was lost: the run's own end. Its status still says it runs deploy, and
    # acme-agent's install was cut (pending-install) until the next pod.
    assert (left["phase"], left["runBy"]) == ("Running", f"{job}/{first.pod_name}"), left
    assert {s["state"]: s["status"] for s in left["steps"]}["deploy"] == "running"
    # The Job controller counted the failure (137 is no FailJob exit code, no
    # DisruptionTarget) and made the next pod within backoffLimit 1; it completed.
    counters = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert (counters.get("failed"), counters.get("succeeded")) == (1, 1), counters
    # The next pod waited out the dead holder's Lease, uninstalled the cut install
    # and installed both components.
    assert second.exit_code == 0, second.describe()
    assert "install Lease expired" in second.output
    assert "recovered Helm release" in second.output
    assert_succeeded_with_both_releases(env, job, second.pod_name)
    assert [(r["release"], r["status"]) for r in env.results.report()["recoveries"]] == [
        (f"{env.components}/acme-agent", "pending-install")
    ]
    # Events: the killed run recorded no outcome; the next one its steps and success.
    events = runner_events(env.plane, env.namespace, job)
    assert [reason for _, reason in events if reason.startswith("Run")] == ["RunSucceeded"], events
    assert ("Normal", "DeploySucceeded") in events, events
    first_reasons = [e["reason"] for e in core_events(env.plane, env.namespace, "Pod", first.pod_name)]
    assert "Killing" not in first_reasons, first_reasons  # the kubelet did not stop it


def test_a_container_killed_mid_helm_is_retried_and_the_next_pod_recovers_the_pending_release(
    env: Env, node: RealNode, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path
) -> None:
    # Every process of the container SIGKILLed at once, from the node (a power
    # loss, a node-level kill): `ctr tasks kill --all`.
    hanging = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, HANGING_HELM, "hanging")

    def kill(pod: dict[str, Any]) -> None:
        node.runtime.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", container_id(pod))

    values = values_for(env.pack_ref, **hanging.image_values())
    job, first, left, second, took = kill_mid_helm(env, hanging, values, kill)

    assert (first.exit_code, first.reason) == (137, "Error"), first.describe()
    assert_recovered_by_the_next_pod(env, job, first, left, second)
    print(
        f"\ncontainer killed mid-helm: the Job's next pod {took['next pod']:.1f}s after the kill, "
        f"the Job Complete {took['Job Complete']:.1f}s after it (Lease {LEASE_SECONDS}s, recovery, both installs)"
    )


def test_a_container_oom_killed_mid_helm_is_retried_and_the_next_pod_recovers_the_pending_release(
    env: Env, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path
) -> None:
    oom = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, OOM_HELM, "oom")
    values = values_for(env.pack_ref, **oom.image_values())
    values["job"] = {**values["job"], "resources": {"requests": GUARANTEED, "limits": GUARANTEED}}
    scores: list[int] = []

    def run_out_of_memory(pod: dict[str, Any]) -> None:
        # What the kernel weighs: the container's processes (the runner here) far
        # below the 1000 the test helm gives PID 1, or it might pick the test helm.
        pid = runner_pid(pod["metadata"]["name"])
        assert pid is not None
        scores.append(int(Path(f"/proc/{pid}/oom_score_adj").read_text()))
        tell_test_helm(oom, pod, "oom")

    job, first, left, second, took = kill_mid_helm(env, oom, values, run_out_of_memory)

    # The kernel's OOM killer ended it; the kubelet says so.
    assert first.pod["status"]["qosClass"] == "Guaranteed"
    assert scores[0] <= 0, f"the runner's oom_score_adj is {scores[0]}: the OOM killer could pick the test helm"
    assert (first.exit_code, first.reason) == (137, "OOMKilled"), first.describe()
    assert "allocating until the container is out of memory" in first.output
    assert_recovered_by_the_next_pod(env, job, first, left, second)
    print(
        f"\ncontainer OOM-killed mid-helm: the Job's next pod {took['next pod']:.1f}s after the test helm "
        f"began to allocate, the Job Complete {took['Job Complete']:.1f}s after it; "
        f"the runner's oom_score_adj {scores[0]}"
    )
