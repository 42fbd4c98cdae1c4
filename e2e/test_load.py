"""Load: ten releases of the chart installed at once, on one node and one API server.

Ten namespaces, each with its own org pack (its components in a namespace of
their own), installed with the pinned helm at the same time; the pods run on the
session's real node, the runner drives the fake aicr with a real deploy (deploy.sh's
helm pulls the component charts from the registry), validation and evidence on.
deploy.sh holds the second component's install until the test creates one gate
ConfigMap, and the test creates it only once all ten runs hold their install
Lease and wait there: ten runs are in the deploy step at the same time, by
construction rather than by luck. Then every Job must complete, and each run's
status, verdict, evidence and Events must be whole.

The runner's own API requests are counted from the API server's audit log (the
harness logs every ServiceAccount request outside kube-system) and held to the
budgets the runner documents:

* the install Lease: one read, the take, the announcement of the releases, a
  renewal every ``lease.durationSeconds / 3`` while held, the hand-back
  (docs/installing.md "Change safety");
* Events on its Job: one per step that ran, ``DeployProgress`` at most once a
  minute, the outcome; at most 60 a run (docs/runs.md, ``job_events``);
* status ConfigMap writes: one as each step starts, progress while deploy runs
  (at most one per deploy.sh component line, coalesced), the final report
  (docs/runs.md "Where results land"); one write per other result ConfigMap.

The figures (wall time, requests per run by client, verb and resource, the peak
memory of each pod and of all of them) are printed (``-s``) and written to
``load-figures.json`` in the test's tmp directory; e2e/README.md "Load" quotes
a measured run.
"""

from __future__ import annotations

import io
import json
import math
import os
import secrets
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.kube.events import MAX_EVENTS
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import (
    ACME_CRITERIA,
    CHART,
    COMPONENT_CHARTS,
    PACK_AUTH_FILE,
    RELEASE,
    RunResults,
    embedded_base_components,
    extra_env,
    push_component_charts,
    releases_in,
    wait_for_job_end,
    write_org_pack,
)

pytestmark = pytest.mark.e2e

#: Releases installed at once.
RELEASES = 10
PACK_SECRET = "pack-cred"
STATUS = "aicr-run-status"
#: The chart's ServiceAccount (``<release>-installer``): a run's requests are this user's.
SERVICE_ACCOUNT = f"{RELEASE}-installer"
#: deploy.sh holds this component's install until the gate ConfigMap exists.
HELD_AT = "acme-config"
GATE = "load-gate"
#: The chart's default lease.durationSeconds; the runner renews every third of it.
LEASE_SECONDS = 60
#: What the user agent of each client the pod runs starts with (the audit log's
#: ``userAgent``): the runner's Kubernetes client (OpenAPI-generated), deploy.sh's
#: helm, and the kubectl with which the fake's deploy.sh waits for the gate (the
#: test's, not a real run's: ``kubectl wait --for=create`` polls about once a second).
CLIENTS = {"OpenAPI-Generator": "runner", "Helm": "helm", "kubectl": "kubectl (the test's gate)"}
#: Every step of a run with a deploy, validation and evidence, without publish.
STEPS = {
    "fetch": "succeeded",
    "pack": "succeeded",
    "recipe": "succeeded",
    "capture-recipe": "succeeded",
    "check-recipe": "succeeded",
    "bundle": "succeeded",
    "verify": "succeeded",
    "upgrade-check": "skipped",
    "lease": "succeeded",
    "snapshot": "skipped",
    "deploy": "succeeded",
    "validate": "succeeded",
    "capture-verdict": "succeeded",
    "publish": "skipped",
    "capture-evidence": "succeeded",
}
#: The other result ConfigMaps: each written once a run.
RESULT_CONFIGMAPS = ("aicr-recipe", "aicr-validate-result", "aicr-evidence-bundle")
MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")
MIB = 1024 * 1024


# -- the node's pods' memory ----------------------------------------------------------------


@dataclass
class PodMemory:
    """The memory of the node's pods, from their cgroups (this machine's memory
    controller is cgroup v1: ``memory.max_usage_in_bytes`` is the kernel's
    high-water mark, page cache included; ``total_rss`` in ``memory.stat`` is
    anonymous memory only).

    The total: the high-water mark of the kubelet's ``kubepods`` cgroup, reset when
    the block starts, read when it ends (exact). Per pod: the kubelet removes a pod's
    cgroup soon after its containers exit, so a pod's high-water mark is read every
    ``period`` seconds and the last read kept (it only grows); a pod's RSS is the
    highest sampled.
    """

    cgroup_root: str
    period: float = 0.2
    peak: dict[str, int] = field(default_factory=dict)  # pod uid -> max_usage_in_bytes
    rss: dict[str, int] = field(default_factory=dict)  # pod uid -> highest total_rss sampled
    total_peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def kubepods(self) -> Path:
        return MEMORY_CGROUPS / self.cgroup_root.lstrip("/") / "kubepods"

    def pods(self) -> Iterator[tuple[str, Path]]:
        for directory in [*self.kubepods.glob("pod*"), *self.kubepods.glob("*/pod*")]:
            yield directory.name.removeprefix("pod"), directory

    def now(self, uids: Sequence[str]) -> tuple[int, int]:
        """(usage, rss) of these pods, summed, as they are now."""
        usage = rss = 0
        for uid, directory in self.pods():
            if uid in uids:
                usage += int((directory / "memory.usage_in_bytes").read_text())
                rss += _stat(directory)["total_rss"]
        return usage, rss

    def _sample(self) -> None:
        for uid, directory in self.pods():
            try:
                peak = int((directory / "memory.max_usage_in_bytes").read_text())
                rss = _stat(directory)["total_rss"]
            except (OSError, ValueError, KeyError):
                continue  # removed while read
            self.peak[uid] = max(self.peak.get(uid, 0), peak)
            self.rss[uid] = max(self.rss.get(uid, 0), rss)

    def __enter__(self) -> PodMemory:
        assert self.kubepods.is_dir(), (
            f"{self.kubepods} does not exist: the pods' memory is read from the cgroup v1 memory "
            "controller (this project's machines have hybrid cgroups); a cgroup v2 host would need memory.peak here"
        )
        (self.kubepods / "memory.max_usage_in_bytes").write_text("0")  # the high-water mark from now on
        self._thread = threading.Thread(target=self._run, name="pod-memory", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.total_peak = int((self.kubepods / "memory.max_usage_in_bytes").read_text())


def _stat(directory: Path) -> dict[str, int]:
    pairs = (line.split() for line in (directory / "memory.stat").read_text().splitlines())
    return {key: int(value) for key, value in pairs}


# -- one release ----------------------------------------------------------------------------


@dataclass
class Release:
    """One of the ten: its namespace, pack and values, and what its run left."""

    plane: ControlPlane
    namespace: str
    values_file: Path
    run: JobRun | None = None
    job: dict[str, Any] = field(default_factory=dict)
    installed_after: float = 0.0  # seconds from the start to the end of its helm install
    complete_after: float = 0.0  # seconds from the start until the watch saw the Job Complete
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def results(self) -> RunResults:
        return RunResults(self.plane, self.namespace)

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{SERVICE_ACCOUNT}"

    def lease(self) -> dict[str, Any]:
        return self.plane.admin.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{RELEASE}-install"
        )

    def events(self) -> list[dict[str, Any]]:
        """The runner's Events regarding its Job (by uid)."""
        items = self.plane.admin.get(f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events")["items"]
        uid = self.job["metadata"]["uid"]
        return [
            e
            for e in items
            if e.get("reportingController") == "aicr-runner" and (e.get("regarding") or {}).get("uid") == uid
        ]

    def by_client(self) -> dict[str, Counter[str]]:
        """The run's API requests: client -> Counter of "verb resource"."""
        counts: dict[str, Counter[str]] = {}
        for event in self.requests:
            counts.setdefault(client_of(event), Counter())[request_key(event)] += 1
        return counts

    def runner_requests(self, resource: str, *verbs: str, name: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.requests
            if client_of(e) == "runner"
            and (e.get("objectRef") or {}).get("resource") == resource
            and (not verbs or e["verb"] in verbs)
            and (name is None or (e.get("objectRef") or {}).get("name") == name)
        ]


def client_of(event: Mapping[str, Any]) -> str:
    agent = str(event.get("userAgent", ""))
    return next((client for prefix, client in CLIENTS.items() if agent.startswith(prefix)), agent or "unknown")


def request_key(event: Mapping[str, Any]) -> str:
    """ "verb resource[/subresource] [name]" (the name of ConfigMaps and Leases, the
    objects the runner writes); a non-resource request by its path."""
    ref = event.get("objectRef") or {}
    if not ref.get("resource"):
        return f"{event['verb']} {str(event.get('requestURI', '?')).split('?', 1)[0]}"
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    name = f" {ref['name']}" if ref["resource"] in ("configmaps", "leases") and ref.get("name") else ""
    return f"{event['verb']} {resource}{name}"


def _stamp(event: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")).timestamp()


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def component_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    return push_component_charts(helm, registry, tmp_path_factory.mktemp("component-charts"))


def release_values(pack_ref: str, gate: str) -> dict[str, Any]:
    """A real deploy of the org pack (deploy.sh's helm pulls the charts), validation
    that must pass, evidence captured; deploy.sh held at ``HELD_AT`` until ``gate``."""
    return {
        **ACME_CRITERIA,
        "dataPack": pack_ref,
        "dataPackSecret": PACK_SECRET,
        "dataPackPlainHTTP": True,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        "aicrProvenance": {"mode": "off"},
        "recipe": {"expect": {"components": list(COMPONENT_CHARTS), "overlays": ["acme-h100-training"]}},
        "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
        "validate": {"enabled": True, "failOnError": True, "emitEvidence": True},
        "job": {
            # The node has 2 CPUs: ten pods at the chart's 200m request fill its
            # allocatable exactly, and any other pod of the session with a request
            # would leave one of the ten Pending. Half of it, so all ten fit.
            "resources": {"requests": {"cpu": "100m"}},
            "extraEnv": extra_env(
                FAKE_AICR_DEPLOY_REAL="1",
                FAKE_AICR_DEPLOY_BACKOFF="0",
                FAKE_AICR_HELM_FLAGS=f"--plain-http --registry-config {PACK_AUTH_FILE}",
                FAKE_AICR_VALIDATE_RESULT="pass",
                FAKE_AICR_DEPLOY_HOLD_AT=HELD_AT,
                FAKE_AICR_DEPLOY_HOLD_CONFIGMAP=gate,
            ),
        },
    }


@pytest.fixture
def releases(
    control_plane: ControlPlane,
    registry: Registry,
    registry_auth_file: Path,
    component_repository: str,
    tmp_path: Path,
) -> tuple[list[Release], str]:
    """Ten namespaces, each with its pack Secret, its org pack pushed with oras and
    its values file; and the gate's namespace/name."""
    suffix = secrets.token_hex(3)
    gate_namespace = f"load-gate-{suffix}"
    control_plane.ensure_namespace(gate_namespace)
    gate = f"{gate_namespace}/{GATE}"

    def prepare(index: int) -> Release:
        namespace = f"load-{index:02d}-{suffix}"
        control_plane.ensure_namespace(namespace)
        control_plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
        pack = write_org_pack(
            tmp_path / namespace / "pack", chart_repository=component_repository, namespace=f"{namespace}-acme"
        )
        pushed = oras.push_pack(
            pack, registry.ref(f"acme/{namespace}/aicr-pack", "1.0.0"), registry_config=registry_auth_file
        )
        values_file = tmp_path / namespace / "values.yaml"
        values_file.write_text(yaml.safe_dump(release_values(pushed.ref, gate)))
        return Release(control_plane, namespace, values_file)

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(prepare, range(RELEASES))), gate


# -- waiting on the API server --------------------------------------------------------------


def held(status: Mapping[str, Any]) -> bool:
    """deploy.sh waits at the gate: the status ConfigMap shows the deploy step
    running with ``HELD_AT`` the current component."""
    report = (status.get("data") or {}).get("report.json")
    if not report:
        return False
    deploy = next(s for s in json.loads(report)["steps"] if s["state"] == "deploy")
    return deploy["status"] == "running" and (deploy.get("progress") or {}).get("current") == HELD_AT


def complete(job: Mapping[str, Any]) -> bool:
    """The Job controller has finished the Job (Complete, or Failed: asserted later)."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


def watch_until(
    plane: ControlPlane,
    collection: str,
    namespaces: set[str],
    seen: Callable[[Mapping[str, Any]], bool],
    *,
    what: str,
    started: float,
    timeout: float,
    followers: Mapping[str, Future[JobRun]],
    **query: str,
) -> dict[str, float]:
    """Watch ``collection`` (every namespace) until an object of each of ``namespaces``
    satisfies ``seen``; returns when each was first seen so (seconds after ``started``).
    A follower that ended before its namespace was seen fails the test with its pod."""
    found: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while set(found) != namespaces:
        for namespace, follower in followers.items():
            if namespace not in found and follower.done():
                run = follower.result()
                raise AssertionError(f"{namespace}: the run ended before {what}:\n{run.describe()}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never saw {what} in {sorted(namespaces - set(found))}")
        # A short server-side timeout: the followers are checked between two watches.
        stream = plane.admin.watch(collection, timeoutSeconds=str(max(1, min(10, int(left)))), **query)
        for event in stream:
            obj = event.get("object") or {}
            namespace = (obj.get("metadata") or {}).get("namespace", "")
            if event.get("type") in ("ADDED", "MODIFIED") and namespace in namespaces - set(found) and seen(obj):
                found[namespace] = time.monotonic() - started
                if set(found) == namespaces:
                    break
        stream.close()
    return found


def install_and_follow(helm: Helm, kubelet: Kubelet, release: Release, started: float) -> JobRun:
    helm.install(RELEASE, CHART, release.namespace, values_files=[release.values_file])
    release.installed_after = time.monotonic() - started
    return kubelet.run_job(RELEASE, release.namespace, timeout=900)


def pod_uids(plane: ControlPlane, releases: Sequence[Release]) -> list[str]:
    return [
        str(pod["metadata"]["uid"])
        for r in releases
        for pod in plane.admin.get(f"/api/v1/namespaces/{r.namespace}/pods")["items"]
    ]


# -- the test -------------------------------------------------------------------------------


def test_ten_releases_installed_at_once_all_complete_whole_and_within_their_api_budgets(
    releases: tuple[list[Release], str],
    helm: Helm,
    control_plane: ControlPlane,
    aicr_kubelet: Kubelet,
    tmp_path: Path,
) -> None:
    runs, gate = releases
    namespaces = {r.namespace for r in runs}
    since = control_plane.audit_offset()
    with PodMemory(aicr_kubelet.node.host.cgroup_root) as memory, ThreadPoolExecutor(RELEASES) as pool:
        started = time.monotonic()
        followers = {r.namespace: pool.submit(install_and_follow, helm, aicr_kubelet, r, started) for r in runs}
        at_gate = watch_until(
            control_plane, "/api/v1/configmaps", namespaces, held, what=f"deploy.sh held at {HELD_AT}",
            started=started, timeout=600, followers=followers, fieldSelector=f"metadata.name={STATUS}",
        )  # fmt: skip
        # Ten runs in deploy at once, each holding its own release's Lease.
        leases = {r.namespace: r.lease()["spec"] for r in runs}
        assert all(spec.get("holderIdentity") for spec in leases.values()), leases
        gate_memory = memory.now(pod_uids(control_plane, runs))
        gate_namespace, gate_name = gate.split("/")
        control_plane.admin.create(
            f"/api/v1/namespaces/{gate_namespace}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate_name}},
        )
        opened = time.monotonic() - started
        ended = watch_until(
            control_plane, "/apis/batch/v1/jobs", namespaces, complete, what="the Job finished",
            started=started, timeout=600, followers={}, labelSelector=f"app.kubernetes.io/instance={RELEASE}",
        )  # fmt: skip
        for r in runs:
            r.run = followers[r.namespace].result(timeout=120)
            r.complete_after = ended[r.namespace]
    for r in runs:
        assert r.run is not None
        assert r.run.exit_code == 0, r.run.describe()
        assert wait_for_job_end(aicr_kubelet, r.namespace) == ("Complete", "CompletionsReached")
        r.job = aicr_kubelet.find_job(RELEASE, r.namespace)

    audit = control_plane.audit_events_until_now(since)
    for r in runs:
        r.requests = [e for e in audit if e["user"]["username"] == r.user]
        assert_whole(r, helm)
        assert_within_budgets(r)
    figures = load_figures(runs, memory, at_gate=max(at_gate.values()), opened=opened, gate_memory=gate_memory)
    (tmp_path / "load-figures.json").write_text(json.dumps(figures, indent=2, sort_keys=True))
    print(report_text(figures))
    # The sampler saw every pod, and each stayed under the chart's 2 GiB memory limit.
    assert len(figures["memory"]["pods"]) == RELEASES, figures["memory"]
    assert all(0 < pod["peak_mib"] < 2048 for pod in figures["memory"]["pods"].values()), figures["memory"]


# -- what each run left ---------------------------------------------------------------------


def assert_whole(release: Release, helm: Helm) -> None:
    """Job complete, the status whole (phase, every step with its times and exit
    code, runBy), the verdict and the evidence captured, the Events recorded, the
    components deployed, the Lease handed back."""
    run, results = release.run, release.results
    assert run is not None
    where = release.namespace
    report = results.report()
    assert (report["phase"], report["exitCode"]) == ("Succeeded", 0), (where, report)
    assert results.data(STATUS)["phase"] == "Succeeded"
    assert results.statuses() == STEPS, (where, report)
    for step in report["steps"]:
        if step["status"] != "skipped":
            assert step["start"], (where, step)
            assert step["end"], (where, step)
            assert step["durationSeconds"] is not None, (where, step)
            assert step["exitCode"] == 0, (where, step)
    assert report["runBy"] == f"{release.job['metadata']['name']}/{run.pod_name}", (where, report)
    progress = results.step("deploy")["progress"]
    assert (progress["installed"], progress["failed"], progress["total"]) == (2, 0, 2), (where, progress)
    summary = results.data(STATUS)["summary.txt"]
    assert all(state in summary for state in STEPS), (where, summary)
    # the verdict
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    tests = ctrf["results"]["summary"]
    assert tests["tests"] == tests["passed"] > 0, (where, tests)
    assert {"operator-health", "acme-agent-ready"} <= {t["name"] for t in ctrf["results"]["tests"]}, where
    # the evidence
    with tarfile.open(fileobj=io.BytesIO(results.binary("aicr-evidence-bundle")["evidence.tgz"])) as tar:
        assert "evidence/summary-bundle/ctrf/deployment.json" in tar.getnames(), where
    assert yaml.safe_load(results.data("aicr-evidence-bundle")["pointer.yaml"])["recipe"] == "acme-h100-training"
    # the Events: one per step that ran, DeployProgress, the outcome
    reasons = [e["reason"] for e in release.events()]
    ran = [state for state, status in STEPS.items() if status != "skipped"]
    expected = {"".join(p.capitalize() for p in state.split("-")) + "Succeeded" for state in ran} | {"RunSucceeded"}
    assert expected <= set(reasons), (where, reasons)
    assert set(reasons) - expected <= {"DeployProgress"}, (where, reasons)
    assert release.job["metadata"]["annotations"]["aicr.nvidia.com/outcome"] == "Succeeded", where
    assert run.termination_message.startswith("Succeeded (exit 0): AICR Job complete"), run.termination_message
    # the components, and the Lease handed back
    deployed = releases_in(helm, f"{where}-acme")
    assert {name: r["status"] for name, r in deployed.items()} == dict.fromkeys(COMPONENT_CHARTS, "deployed"), where
    assert not release.lease()["spec"].get("holderIdentity"), (where, release.lease())


def assert_within_budgets(release: Release) -> None:
    """The runner's own requests (the audit log) within what it promises."""
    where = release.namespace
    assert release.requests, f"{where}: no request of {release.user} in the audit log"
    assert {e["responseStatus"]["code"] for e in release.requests if client_of(e) == "runner"} <= {200, 201, 404}, [
        (request_key(e), e["responseStatus"]) for e in release.requests if e["responseStatus"]["code"] >= 400
    ]
    # The Lease: read once, taken, the releases announced, renewed every third of its
    # duration while held, handed back.
    reads = release.runner_requests("leases", "get")
    writes = release.runner_requests("leases", "create", "update")
    held_seconds = _stamp(writes[-1]) - _stamp(writes[0])
    renewals = len(writes) - 3
    assert len(reads) == 1, (where, [request_key(e) for e in reads])
    assert 0 <= renewals <= math.floor(held_seconds / (LEASE_SECONDS / 3)), (where, len(writes), held_seconds)
    # Events: every one the runner created is on its Job; at most 60 and the outcome.
    created = release.runner_requests("events", "create")
    assert len(created) == len(release.events()) <= MAX_EVENTS + 1, (where, len(created), len(release.events()))
    # Status writes: one as each step starts (publish, off here, starts and then skips
    # itself), at most one per deploy.sh component line (a start and an end per
    # component), the final report.
    status_writes = release.runner_requests("configmaps", "patch", name=STATUS)
    assert len(status_writes) <= len(STEPS) + 2 * len(COMPONENT_CHARTS) + 1, (where, len(status_writes))
    for name in RESULT_CONFIGMAPS:
        assert len(release.runner_requests("configmaps", "patch", name=name)) == 1, (where, name)
    # Its Job: the uid read once, the outcome annotated once.
    assert len(release.runner_requests("jobs", "patch")) == 1, where


# -- the figures ----------------------------------------------------------------------------


def load_figures(
    releases: Sequence[Release], memory: PodMemory, *, at_gate: float, opened: float, gate_memory: tuple[int, int]
) -> dict[str, Any]:
    pods = {str(r.run.pod["metadata"]["uid"]): r.namespace for r in releases if r.run is not None}
    runs = {}
    for r in releases:
        assert r.run is not None
        uid = str(r.run.pod["metadata"]["uid"])
        runs[r.namespace] = {
            "installed_after_s": round(r.installed_after, 1),
            "complete_after_s": round(r.complete_after, 1),
            "pod_seconds": round(r.run.containers[-1].seconds, 1),
            "requests": {client: dict(sorted(c.items())) for client, c in sorted(r.by_client().items())},
            # What a run itself asks (the runner and deploy.sh's helm), without the test's gate.
            "requests_total": sum(1 for e in r.requests if client_of(e) in ("runner", "helm")),
            "runner_requests": sum(1 for e in r.requests if client_of(e) == "runner"),
            "lease_writes": len(r.runner_requests("leases", "create", "update")),
            "events": len(r.runner_requests("events", "create")),
            "status_writes": len(r.runner_requests("configmaps", "patch", name=STATUS)),
            "memory_peak_mib": round(memory.peak.get(uid, 0) / MIB, 1),
            "rss_peak_mib": round(memory.rss.get(uid, 0) / MIB, 1),
        }
    return {
        "releases": len(releases),
        "wall_s": round(max(r.complete_after for r in releases), 1),
        "all_installed_s": round(max(r.installed_after for r in releases), 1),
        "all_held_at_gate_s": round(at_gate, 1),
        "gate_opened_s": round(opened, 1),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "runs": runs,
        "memory": {
            "pods": {
                pods[uid]: {"peak_mib": round(peak / MIB, 1), "rss_peak_mib": round(memory.rss.get(uid, 0) / MIB, 1)}
                for uid, peak in memory.peak.items()
                if uid in pods
            },
            "all_pods_peak_mib": round(memory.total_peak / MIB, 1),
            "at_gate_usage_mib": round(gate_memory[0] / MIB, 1),
            "at_gate_rss_mib": round(gate_memory[1] / MIB, 1),
        },
    }


def report_text(figures: Mapping[str, Any]) -> str:
    runs = figures["runs"]
    totals = [run["requests_total"] for run in runs.values()]
    lines = [
        "",
        f"load: {figures['releases']} releases at once on {figures['cpus']} CPUs "
        f"(load average {figures['load_average_1m_at_end']} at the end)",
        f"  wall time {figures['wall_s']} s (all installed {figures['all_installed_s']} s, all held at the gate "
        f"{figures['all_held_at_gate_s']} s, gate opened {figures['gate_opened_s']} s)",
        f"  API requests per run (runner and helm): {min(totals)}-{max(totals)} (mean {sum(totals) / len(totals):.0f}),"
        f" of which the runner's {min(r['runner_requests'] for r in runs.values())}"
        f"-{max(r['runner_requests'] for r in runs.values())}",
    ]
    mix: dict[str, Counter[str]] = {}
    for run in runs.values():
        for client, counts in run["requests"].items():
            mix.setdefault(client, Counter()).update(counts)
    for client, counts in sorted(mix.items()):
        per_run = ", ".join(f"{key} {n / len(runs):g}" for key, n in sorted(counts.items()))
        lines.append(f"    {client} (per run): {per_run}")
    lines.append("  per run: pod s, requests (runner's), lease writes, Events, status writes, memory peak MiB (RSS)")
    for namespace, run in sorted(runs.items()):
        lines.append(
            f"    {namespace}: {run['pod_seconds']} s, {run['requests_total']} ({run['runner_requests']}), "
            f"{run['lease_writes']}, "
            f"{run['events']}, {run['status_writes']}, {run['memory_peak_mib']} ({run['rss_peak_mib']})"
        )
    mem = figures["memory"]
    lines.append(
        f"  memory: all pods' peak {mem['all_pods_peak_mib']} MiB; at the gate (ten pods) "
        f"{mem['at_gate_usage_mib']} MiB, RSS {mem['at_gate_rss_mib']} MiB"
    )
    return "\n".join(lines)
