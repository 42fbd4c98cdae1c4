"""Faults a real node makes (issue 26 item 5): the work volume over its size
limit, and the pack registry gone mid-pull.

The chart is installed into the real API server; the real Job controller creates
the pods, which the real node (kube-scheduler, kubelet, containerd) runs with the
chart's pod spec; deploy.sh runs the real helm against the API server, pulling
the pack's charts from the real registry. Each test says what the fault cost
(nothing, or exactly what) and how the run ended, and asserts what Kubernetes
decided (the kubelet's eviction, the Job controller's podFailurePolicy and
backoffLimit).

* ``/work`` over ``job.workSizeLimit``: the kubelet's eviction manager (local
  storage capacity isolation, separate from the node's disk thresholds, which
  the harness sets out of reach) evicts the pod, with a 1 s grace. Unlike a
  node-pressure eviction or the Eviction API, the kubelet (1.37) sets no
  DisruptionTarget condition for a local storage limit, so podFailurePolicy's
  Ignore rule does not apply: the Job controller counts the pod against
  backoffLimit. With 1 (the chart's default) the next pod completes the run;
  with 0 the Job fails.
* the registry gone between the pack's manifest and its first blob: a TCP proxy
  on the node's bridge address, in front of the harness registry, cuts at the
  first blob request (the request it sees, not a guessed time) and refuses
  connections until it is restored. Back within the pull's retry budget (3
  attempts per request, 1 s then 2 s apart): the pull resumes and the run
  succeeds. Not back: exit 22 naming the registry, a pod counted against
  backoffLimit, and the Job controller's next pod pulls once it is back.
* the registry gone in the middle of a blob's body (the proxy cuts in the
  answer): a body cut short is not retried within the pod; exit 22 at once, and
  the Job controller's next pod pulls.

Timings are printed (``-s``) and recorded in docs/troubleshooting.md "Faults on the node".
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import test_change_safety
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry, docker_config
from e2e.scenarios import CHART, RELEASE, RunResults, extra_env
from e2e.test_change_safety import Env, in_thread, job_pod, jobs, values_for, wait_for

pytestmark = pytest.mark.e2e

# Change safety's fixtures: its pack of two real charts, served by the registry.
chart_repository = test_change_safety.chart_repository
env = test_change_safety.env

#: The work volume's limit, and what the test writes into it (as a run filling it would).
WORK_LIMIT = "8Mi"
FILL_BYTES = 16 * 1024 * 1024
#: The kubelet's eviction manager runs every 10 s on volume usage it measures
#: every minute (volumeStatsAggPeriod): a generous bound on seeing the eviction.
EVICTION_TIMEOUT = 300.0
PROXY_SECRET = "proxy-cred"
REQUEST_LINE = re.compile(rb"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]\r\n")
RETRY_LINE = re.compile(r"pack registry retry.*?attempt=(\d+)")


# -- building blocks ----------------------------------------------------------------------------


def run_values(pack_ref: str, **job: Any) -> dict[str, Any]:
    """``values_for`` (change safety's pack, real helm) with console logs and ``job`` merged."""
    values = values_for(pack_ref, "training", logFormat="console")
    values["job"] = {**values["job"], **job}
    return values


def hold_env(namespace: str, gate: str) -> list[dict[str, str]]:
    """deploy.sh holds acme-config's install (after acme-agent's) until the ConfigMap ``gate`` exists."""
    return extra_env(FAKE_AICR_DEPLOY_HOLD_AT="acme-config", FAKE_AICR_DEPLOY_HOLD_CONFIGMAP=f"{namespace}/{gate}")


def pod_events(plane: ControlPlane, namespace: str, pod: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the core Events about a pod (kubelet, scheduler)."""
    items = plane.admin.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.kind=Pod,involvedObject.name={pod}"
    )["items"]
    return [(e["type"], e["reason"], e.get("message", "")) for e in items]


def job_controller_events(plane: ControlPlane, namespace: str, job: str) -> list[str]:
    """The reasons of the core Events about the Job (the Job controller's)."""
    items = plane.admin.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.kind=Job,involvedObject.name={job}"
    )["items"]
    return sorted(e["reason"] for e in items)


def runner_events(plane: ControlPlane, namespace: str, job: str, pod: str) -> list[str]:
    """The reasons of the Events pod ``pod``'s runner recorded on its Job, oldest first."""
    items = plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    mine = [
        e
        for e in items
        if (e.get("regarding") or {}).get("name") == job
        and e.get("reportingController") == "aicr-runner"
        and e.get("reportingInstance") == pod
    ]
    mine.sort(key=lambda e: e["eventTime"])
    return [e["reason"] for e in mine]


def releases(helm: Helm, namespace: str) -> dict[str, tuple[str, int]]:
    return {r["name"]: (r["status"], int(r["revision"])) for r in helm.list_releases() if r["namespace"] == namespace}


def assert_succeeded(results: RunResults, pod: str) -> None:
    """The status ConfigMap: the run of ``pod`` succeeded, every step that runs here succeeded."""
    report = results.report()
    assert report["phase"] == "Succeeded", report
    assert report["runBy"].endswith(f"/{pod}"), report["runBy"]
    assert results.data("aicr-run-status")["phase"] == "Succeeded"
    statuses = results.statuses()
    for step in ("pack", "recipe", "bundle", "verify", "deploy"):
        assert statuses[step] == "succeeded", statuses
    progress = results.step("deploy")["progress"]
    assert (progress["installed"], progress["failed"], progress["total"]) == (2, 0, 2), progress


class CuttableProxy:
    """A TCP proxy on ``host`` in front of ``upstream`` that records the HTTP
    request lines it forwards (plain HTTP) and, once armed with ``cut_on``, cuts
    at the first request whose target contains it: that request is never
    forwarded and its connection is closed, the listener closes (new connections
    are refused, as from a registry that went away), and any later request on a
    connection still open is closed unanswered. Answers already on their way are
    let through. With ``cut_in_body`` the request is forwarded instead, and the
    cut comes in the middle of its answer's body (half of what arrived is passed
    on). ``restore`` listens again on the same port.

    With ``come_back_after`` set to N, the cut keeps the listener open instead:
    the next N tries (a new connection, reset as it opens; or a request on a
    connection still open, closed unanswered) are refused, and the proxy forwards
    again from the one after them. The
    registry's return then follows the client's own attempts, never a test's
    reaction time."""

    def __init__(self, host: str, upstream: str) -> None:
        upstream_host, _, port = upstream.rpartition(":")
        self._upstream = (upstream_host, int(port))
        self._listen_host = host
        self._lock = threading.Lock()
        self.requests: list[str] = []
        self.cut_on: str | None = None
        self.cut_in_body = False
        self.cut_at: float | None = None
        self.restored_at: float | None = None
        self.come_back_after: int | None = None
        self.reset_connections = 0
        self._down = False
        self._listener = self._listen(0)
        self.host = f"{host}:{self._listener.getsockname()[1]}"
        self._serve(self._listener)

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._listen_host, port))
        listener.listen(64)
        return listener

    def _serve(self, listener: socket.socket) -> None:
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                ready, _, _ = select.select([listener], [], [], 0.2)
                if not ready:
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):  # closed by the cut or close()
                return
            if self._reset_while_down(client):
                continue
            server = socket.create_connection(self._upstream, timeout=10)
            server.settimeout(None)
            link = _Link()
            threading.Thread(target=self._pump, args=(client, server, link, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, link, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, link: _Link, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client and not self._forward(chunk, link):
                    break
                cut_now = False
                if not from_client and link.cut_in_body:
                    chunk, cut_now = link.part_of_body(chunk)
                sink.sendall(chunk)
                if cut_now:
                    self._go_down()
                    break
        except OSError:
            pass  # the other side closed: close both
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _forward(self, chunk: bytes, link: _Link) -> bool:
        """Whether a client's ``chunk`` goes on; records its request lines and cuts when armed."""
        targets = [m.group(2).decode() for m in REQUEST_LINE.finditer(chunk)]
        with self._lock:
            if self._down and targets:
                self._count_refusal_locked()
                return False
            if self.cut_on is not None and any(self.cut_on in t for t in targets):
                self.cut_on = None
                self.requests.extend(f"cut: {t}" for t in targets)
                if self.cut_in_body:
                    link.cut_in_body = True
                    return True
                self._go_down_locked()
                return False
            self.requests.extend(targets)
        return True

    def _go_down(self) -> None:
        with self._lock:
            self._go_down_locked()

    def _go_down_locked(self) -> None:
        self._down, self.cut_at = True, time.monotonic()
        if self.come_back_after is None:
            self._listener.close()

    def _count_refusal_locked(self) -> None:
        """One more connection or request refused while down; the last one counted brings the proxy back."""
        self.reset_connections += 1
        if self.come_back_after is not None and self.reset_connections >= self.come_back_after:
            self._down, self.restored_at = False, time.monotonic()

    def _reset_while_down(self, client: socket.socket) -> bool:
        """Whether ``client`` came while the proxy is down and counting (then it is reset);
        the last of ``come_back_after`` connections brings the proxy back."""
        with self._lock:
            if not self._down or self.come_back_after is None:
                return False
            self._count_refusal_locked()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        return True

    def restore(self) -> None:
        with self._lock:
            if not self._down:
                return
            self._listener = self._listen(int(self.host.rpartition(":")[2]))
            self._down, self.restored_at = False, time.monotonic()
        self._serve(self._listener)

    def close(self) -> None:
        with self._lock:
            self._down = True
            self._listener.close()


class _Link:
    """One client connection through the proxy: whether its answer is to be cut mid-body."""

    def __init__(self) -> None:
        self.cut_in_body = False
        self._headers_passed = False

    def part_of_body(self, chunk: bytes) -> tuple[bytes, bool]:
        """What of the answer's ``chunk`` to pass on, and whether to cut after it:
        the headers whole, then half of the first body bytes."""
        if self._headers_passed:
            return chunk[: len(chunk) // 2], True
        head, end, body = chunk.partition(b"\r\n\r\n")
        if not end:
            return chunk, False
        self._headers_passed = True
        return head + end + body[: len(body) // 2], bool(body)


@pytest.fixture
def proxy(registry: Registry, pod_host: str) -> Iterator[CuttableProxy]:
    cuttable = CuttableProxy(pod_host, registry.host)
    try:
        yield cuttable
    finally:
        cuttable.close()


def through_proxy(env: Env, proxy: CuttableProxy) -> str:
    """The pack's reference through the proxy, and a pack Secret for both hosts
    (the pack through the proxy; deploy.sh's charts straight from the registry)."""
    auths = {
        host: docker_config(host, env.registry.username, env.registry.password)["auths"][host]  # type: ignore[index]
        for host in (env.registry.host, proxy.host)
    }
    env.plane.create_dockerconfig_secret(env.namespace, PROXY_SECRET, json.dumps({"auths": auths}))
    return env.pack_ref.replace(env.registry.host, proxy.host, 1)


def retries(output: str) -> list[int]:
    """The attempt numbers of the pull's retry lines in a run's log."""
    return [int(m.group(1)) for m in RETRY_LINE.finditer(output)]


# -- 1. the work volume over its size limit ------------------------------------------------------


def fill_work_once_held(env: Env, kubelet: Kubelet, job: str) -> tuple[JobRun, float]:
    """Follow the Job's first pod; once deploy.sh holds acme-config (acme-agent
    installed, no helm operation in flight), write more than the limit into its
    ``/work`` volume, as a run filling it would. Returns the pod's run (ended by
    the kubelet) and the seconds from the fill to its end."""
    held = threading.Event()

    def watch(line: str) -> bool:
        if "] acme-config  →" in line:
            held.set()
        return False

    thread, out = in_thread(lambda: kubelet.run_job(RELEASE, env.namespace, job_name=job, terminate_when=watch))
    wait_for("deploy.sh to hold acme-config", lambda: held.is_set() or not thread.is_alive(), 300)
    assert held.is_set(), out[0].describe() if out else "no run"
    assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 1)}
    pod = job_pod(env.plane, env.namespace, job)
    assert pod is not None
    work = kubelet.pod_volume(pod, "work")
    assert work.is_dir(), work
    (work / "fill").write_bytes(b"\0" * FILL_BYTES)
    filled_at = time.monotonic()
    thread.join(EVICTION_TIMEOUT)
    assert not thread.is_alive(), f"no eviction within {EVICTION_TIMEOUT:.0f}s of filling /work"
    [run] = out
    assert run.pod_name == pod["metadata"]["name"]
    return run, time.monotonic() - filled_at


def assert_evicted_by_the_kubelet(env: Env, run: JobRun) -> None:
    """Failed/Evicted with the kubelet's message and Event; the kubelet (1.37) sets
    no DisruptionTarget condition for a local storage limit, unlike a node-pressure
    eviction or the Eviction API: podFailurePolicy's Ignore rule does not apply."""
    status = run.pod["status"]
    limit_message = f'Usage of EmptyDir volume "work" exceeds the limit "{WORK_LIMIT}". '
    assert (status["phase"], status.get("reason"), status.get("message")) == ("Failed", "Evicted", limit_message), (
        status
    )
    assert [c for c in status["conditions"] if c["type"] == "DisruptionTarget"] == [], status["conditions"]
    assert run.deletion is None, "the kubelet evicted it in place; nothing deleted it through the API"
    # The kubelet's kill: SIGTERM with a 1 s grace (2 s, the runtime's floor), then SIGKILL.
    assert run.exit_code in (137, 143), run.describe()
    assert ("Warning", "Evicted", limit_message) in pod_events(env.plane, env.namespace, run.pod_name)


#: backoffLimit -> how the Job ends after the eviction.
EVICTION_OUTCOMES = {1: ("Complete", "CompletionsReached"), 0: ("Failed", "BackoffLimitExceeded")}


@pytest.mark.parametrize("backoff_limit", list(EVICTION_OUTCOMES))
def test_a_work_volume_over_its_size_limit_is_evicted_and_counted_against_the_backoff_limit(
    env: Env, aicr_kubelet: Kubelet, backoff_limit: int
) -> None:
    gate = "gate"
    values = run_values(env.pack_ref, backoffLimit=backoff_limit, workSizeLimit=WORK_LIMIT)
    values["job"]["extraEnv"] = [*values["job"]["extraEnv"], *hold_env(env.namespace, gate)]
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    evicted, eviction_seconds = fill_work_once_held(env, aicr_kubelet, job)
    evicted_at = time.monotonic()
    evicted_report = env.results.report()
    env.plane.admin.create(
        f"/api/v1/namespaces/{env.namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate}},
    )
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, env.namespace, job_name=job)
    ended_at = time.monotonic()

    assert_evicted_by_the_kubelet(env, evicted)
    # So the Job controller counts it as a failed pod.
    assert (outcome.status, outcome.reason) == EVICTION_OUTCOMES[backoff_limit], outcome.describe()
    job_status = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert job_status.get("failed") == 1, job_status
    controller_events = job_controller_events(env.plane, env.namespace, job)
    # What the evicted pod's runner recorded in its 1-2 s: the status shows deploy running or interrupted.
    assert evicted_report["runBy"].endswith(f"/{evicted.pod_name}"), evicted_report["runBy"]
    assert evicted_report["phase"] in ("Running", "Interrupted"), evicted_report
    if backoff_limit == 0:
        # Lost: the run. acme-agent stays deployed, acme-config never installed; nothing pending.
        assert outcome.attempts == (), outcome.describe()
        assert controller_events.count("SuccessfulCreate") == 1, controller_events
        assert "BackoffLimitExceeded" in controller_events, controller_events
        assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 1)}
        assert env.results.report()["runBy"].endswith(f"/{evicted.pod_name}")
    else:
        # Lost: the first pod's run from acme-config on, and the Job's one retry. The
        # next pod (once the Lease was handed back, or had expired) upgraded acme-agent
        # (revision 2) and installed acme-config; nothing is pending.
        assert len(outcome.attempts) == 1, outcome.describe()
        final = outcome.last
        assert final.pod_name != evicted.pod_name
        assert final.exit_code == 0, final.describe()
        assert job_status.get("succeeded") == 1, job_status
        assert controller_events.count("SuccessfulCreate") == 2, controller_events
        assert "Completed" in controller_events, controller_events
        assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 2), "acme-config": ("deployed", 1)}
        assert_succeeded(env.results, final.pod_name)
        assert not env.results.report().get("recoveries"), "no release was left pending"
        events = runner_events(env.plane, env.namespace, job, final.pod_name)
        assert "PackSucceeded" in events, events
        assert "DeploySucceeded" in events, events
        assert events[-1] == "RunSucceeded", events
    print(
        f"\n/work over {WORK_LIMIT}, backoffLimit {backoff_limit}: evicted {eviction_seconds:.1f}s after the fill "
        f"(exit {evicted.exit_code}, status phase {evicted_report['phase']}, its runner's Events "
        f"{runner_events(env.plane, env.namespace, job, evicted.pod_name)}); the Job {outcome.status} "
        f"{ended_at - evicted_at:.1f}s after the eviction"
    )


# -- 2. the registry gone mid-pull, back within the retry budget ----------------------------------


def test_the_registry_gone_mid_pack_pull_and_back_within_the_retry_budget_lets_the_pull_resume(
    env: Env, aicr_kubelet: Kubelet, proxy: CuttableProxy
) -> None:
    ref = through_proxy(env, proxy)
    values = run_values(ref, backoffLimit=0)
    values["dataPackSecret"] = PROXY_SECRET
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    # The first blob request is cut; the next two tries of any blob (the pull fetches
    # blobs on a few connections at once) are refused; the registry is back for the one after.
    proxy.come_back_after = 2
    proxy.cut_on = "/blobs/"

    run = aicr_kubelet.run_job(RELEASE, env.namespace, job_name=job)
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, env.namespace, job_name=job)

    assert proxy.cut_at is not None, proxy.requests
    assert proxy.restored_at is not None, proxy.requests
    # The cut came between the manifest (answered) and the first blob (never forwarded).
    cut = [r for r in proxy.requests if r.startswith("cut: ")]
    assert len(cut) == 1, proxy.requests
    assert "/blobs/sha256:" in cut[0], proxy.requests
    before = proxy.requests[: proxy.requests.index(cut[0])]
    assert any("/manifests/1.0.0" in r for r in before), proxy.requests
    blob = cut[0].removeprefix("cut: ")
    assert blob in proxy.requests[proxy.requests.index(cut[0]) :], "the cut blob was asked for again once back"
    attempts = retries(run.output)
    # Retried within the budget (3 attempts a request): no request needed its last one.
    assert 1 in attempts, run.output
    assert set(attempts) <= {1, 2}, run.output
    assert proxy.reset_connections == 2, proxy.requests
    # What was lost: nothing. The pull resumed within the pod; the run succeeded.
    assert run.exit_code == 0, run.describe()
    assert (outcome.status, outcome.reason, outcome.attempts) == ("Complete", "CompletionsReached", ()), (
        outcome.describe()
    )
    job_status = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert (job_status.get("failed", 0), job_status.get("succeeded")) == (0, 1), job_status
    assert job_controller_events(env.plane, env.namespace, job).count("SuccessfulCreate") == 1
    assert_succeeded(env.results, run.pod_name)
    assert env.results.step("pack")["message"].startswith(f"pulled {ref} (sha256:"), env.results.step("pack")
    assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 1), "acme-config": ("deployed", 1)}
    events = runner_events(env.plane, env.namespace, job, run.pod_name)
    assert "PackSucceeded" in events, events
    assert events[-1] == "RunSucceeded", events
    pack_seconds = env.results.step("pack").get("durationSeconds")
    print(
        f"\nregistry gone mid-pull: back after {proxy.restored_at - proxy.cut_at:.2f}s, "
        f"{len(attempts)} retry line(s) {attempts}, pack step {pack_seconds}s, run exit {run.exit_code}"
    )


# -- 3. the registry gone past the retry budget ---------------------------------------------------


def test_a_registry_gone_past_the_retry_budget_fails_the_pod_with_exit_22_and_the_jobs_next_pod_pulls(
    env: Env, aicr_kubelet: Kubelet, proxy: CuttableProxy
) -> None:
    ref = through_proxy(env, proxy)
    values = run_values(ref, backoffLimit=1)
    values["dataPackSecret"] = PROXY_SECRET
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    proxy.cut_on = "/blobs/"

    failed = aicr_kubelet.run_job(RELEASE, env.namespace, job_name=job)
    failed_at = time.monotonic()
    assert proxy.cut_at is not None
    # The first pod's status, before the next pod rewrites it.
    first_report = env.results.report()
    proxy.restore()  # the registry is back before the Job controller's next pod
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, env.namespace, job_name=job)
    completed_at = time.monotonic()

    # Three attempts of the cut blob (1 s, then 2 s apart), then exit 22 naming the registry.
    assert failed.exit_code == 22, failed.describe()
    # (blobs fetched in parallel: each cut request retries on its own)
    assert sorted(set(retries(failed.output))) == [1, 2], failed.output
    message = failed.termination_message
    assert f"registry {proxy.host} is unreachable after 3 attempt(s)" in message, message
    assert "Connection refused" in message, message
    assert first_report["phase"] == "Failed", first_report
    assert first_report["runBy"].endswith(f"/{failed.pod_name}"), first_report["runBy"]
    first_steps = {s["state"]: s["status"] for s in first_report["steps"]}
    assert first_steps["pack"] == "failed", first_steps
    assert first_steps["deploy"] in ("skipped", "pending"), first_steps
    first_events = runner_events(env.plane, env.namespace, job, failed.pod_name)
    assert "PackFailed" in first_events, first_events
    assert first_events[-1] == "RunFailed", first_events
    # Exit 22 is transient: counted against backoffLimit (1), the next pod pulls and completes.
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Complete", "CompletionsReached", 1), (
        outcome.describe()
    )
    final = outcome.last
    assert final.exit_code == 0, final.describe()
    assert retries(final.output) == [], final.output
    job_status = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert (job_status.get("failed"), job_status.get("succeeded")) == (1, 1), job_status
    assert job_controller_events(env.plane, env.namespace, job).count("SuccessfulCreate") == 2
    # What was lost: the first pod (nothing was deployed by it: the pull comes first)
    # and one of backoffLimit's retries.
    assert_succeeded(env.results, final.pod_name)
    assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 1), "acme-config": ("deployed", 1)}
    events = runner_events(env.plane, env.namespace, job, final.pod_name)
    assert "PackSucceeded" in events, events
    assert events[-1] == "RunSucceeded", events
    print(
        f"\nregistry gone past the budget: pod 1 exit 22 after {failed.container('aicr-runner').seconds:.1f}s; "
        f"the Job complete {completed_at - failed_at:.1f}s after (restored at once; the controller's back-off)"
    )


# -- 4. the registry gone in the middle of a blob's body ------------------------------------------


def test_a_registry_gone_in_the_middle_of_a_blob_fails_the_pod_at_once_and_the_jobs_next_pod_pulls(
    env: Env, aicr_kubelet: Kubelet, proxy: CuttableProxy
) -> None:
    ref = through_proxy(env, proxy)
    values = run_values(ref, backoffLimit=1)
    values["dataPackSecret"] = PROXY_SECRET
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    proxy.cut_on, proxy.cut_in_body = "/blobs/", True

    failed = aicr_kubelet.run_job(RELEASE, env.namespace, job_name=job)
    asked_while_down = list(proxy.requests)
    first_report = env.results.report()
    proxy.restore()
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, env.namespace, job_name=job)

    assert proxy.cut_at is not None, proxy.requests
    [cut] = [r for r in asked_while_down if r.startswith("cut: ")]
    blob = cut.removeprefix("cut: ")
    # A body cut short is not retried within the pod (only a request that got no
    # answer is): the blob was never asked for again, and the pod failed at once.
    assert blob not in asked_while_down, asked_while_down
    assert failed.exit_code == 22, failed.describe()
    message = failed.termination_message
    assert f"download from registry {proxy.host} broke off" in message, message
    assert failed.container("aicr-runner").seconds < 30, failed.describe()
    assert first_report["phase"] == "Failed", first_report
    assert {s["state"]: s["status"] for s in first_report["steps"]}["pack"] == "failed", first_report
    # Lost: the first pod and one retry of backoffLimit; the next pod pulls it whole.
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Complete", "CompletionsReached", 1), (
        outcome.describe()
    )
    final = outcome.last
    assert final.exit_code == 0, final.describe()
    job_status = env.plane.admin.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{job}")["status"]
    assert (job_status.get("failed"), job_status.get("succeeded")) == (1, 1), job_status
    assert_succeeded(env.results, final.pod_name)
    assert releases(env.helm, env.components) == {"acme-agent": ("deployed", 1), "acme-config": ("deployed", 1)}
    events = runner_events(env.plane, env.namespace, job, failed.pod_name)
    assert "PackFailed" in events, events
    assert events[-1] == "RunFailed", events
    print(
        f"\nregistry gone mid-blob: pod 1 exit 22 after {failed.container('aicr-runner').seconds:.1f}s "
        f"({len(retries(failed.output))} retry line(s) of other requests)"
    )
