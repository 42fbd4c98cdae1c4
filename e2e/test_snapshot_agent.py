"""aicr v0.11.1's real snapshot agent on the e2e node: the ``snapshot`` step with
``snapshot.enabled``, privileged (hostNetwork, the node's ``/run/systemd`` and
``/etc/os-release``) and restricted (``--privileged=false``).

The install is ``e2e/test_real_validators.py``'s (eks/h100/training/ubuntu, the
real ``deployment`` validator, the stand-in gpu-operator's pod Running) with
``snapshot.enabled`` and no ``--snapshot`` of the test's own: the runner's
``aicr snapshot`` deploys its agent Job in ``aicr-validation`` from the image
``e2e/agent_image.py`` builds (the real v0.11.1 binary, a stand-in
``nvidia-smi`` reporting 8 H100s) and loads under the published name. The agent
pod is run by the node's kubelet and writes ``cm://aicr-validation/aicr-runner-snapshot``
with the in-cluster ServiceAccount token; validate is given that snapshot.

Then a node label changes and a re-validation (``kubectl create job
--from=cronjob/...``) reports the change.

What the snapshot reads as the OS decides validate's readiness pre-flight: the
recipe requires ``OS.release.ID`` ubuntu and ``VERSION_ID`` 24.04. A privileged
agent reads the node's ``/etc/os-release`` (this machine's: Debian 12 where the
suite was written), so aicr refuses the readiness check (exit 8) and no check
runs; the test runs that case without ``validate.failOnError``. A restricted
agent reads its image's own, the published image's Ubuntu 24.04, so the
readiness passes and the checks run.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import test_real_validators as rv
from e2e.agent_image import AGENT_IMAGE, GPU, agent_image
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import NODE_NAME, Kubelet, RealNode, load_image
from e2e.scenarios import RELEASE, RunResults
from e2e.test_revalidate import CRONJOB, events_on, kubectl
from tests.support.real_aicr import FolderMirror

pytestmark = pytest.mark.e2e

# The module fixtures of the real-validator tests (an instance per module).
eks_recipe = rv.eks_recipe
stand_in_charts = rv.stand_in_charts
validator_on_node = rv.validator_on_node
controllers = rv.controllers
components_removed_after = rv.components_removed_after

AGENT_NAMESPACE = "aicr-validation"
AGENT = "aicr-runner-snapshot"
KEPT = "aicr-cluster-snapshot"
LABEL = "e2e.aicr-runner.example/pool"


@pytest.fixture(scope="module")
def agent_on_node(node: RealNode, real_aicr_release: Path) -> str:
    """The agent image, loaded into the node's containerd under the published name."""
    image = agent_image(real_aicr_release.parent)
    load_image(node.runtime, image, AGENT_IMAGE)
    return image


class Watched:
    """Every object of ``path`` created from now on, as the API server last
    showed it (a watch in a background thread: aicr deletes its agent Job and
    validator Jobs once done)."""

    def __init__(self, plane: ControlPlane, path: str) -> None:
        self._plane, self._path = plane, path
        self._since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._version = ""
        self.objects: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self._plane.admin.watch(self._path, resourceVersion=self._version, timeoutSeconds="5"):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        self._version = ""
                        break
                    self._version = obj["metadata"]["resourceVersion"]
                    if obj["metadata"]["creationTimestamp"] < self._since:
                        continue
                    with self._lock:
                        self.objects[obj["metadata"]["name"]] = obj
            except Exception as exc:  # noqa: BLE001 - an API blip: watch again, and say so if nothing is seen
                self.errors.append(repr(exc))
                self._stop.wait(0.5)

    def seen(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self.objects)

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def agent_jobs(control_plane: ControlPlane) -> Iterator[Watched]:
    jobs = Watched(control_plane, f"/apis/batch/v1/namespaces/{AGENT_NAMESPACE}/jobs")
    yield jobs
    jobs.stop()


@pytest.fixture
def agent_pods(control_plane: ControlPlane) -> Iterator[Watched]:
    pods = Watched(control_plane, f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods")
    yield pods
    pods.stop()


@pytest.fixture
def node_label(control_plane: ControlPlane) -> Iterator[None]:
    yield
    set_label(control_plane, None)


def set_label(plane: ControlPlane, value: str | None) -> None:
    plane.admin.merge_patch(f"/api/v1/nodes/{NODE_NAME}", {"metadata": {"labels": {LABEL: value}}})


def snapshot_in(plane: ControlPlane, namespace: str, name: str) -> str:
    """The snapshot document a ConfigMap holds (``snapshot.yaml``, or ``snapshot.yaml.gz``)."""
    found = plane.configmap(namespace, name)
    assert found is not None, f"no ConfigMap {namespace}/{name}"
    if "snapshot.yaml" in (found.get("data") or {}):
        return str(found["data"]["snapshot.yaml"])
    return gzip.decompress(base64.b64decode(found["binaryData"]["snapshot.yaml.gz"])).decode()


def readings(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(type, subtype) -> data of a snapshot document."""
    doc = yaml.safe_load(text)
    return {
        (m["type"], s["subtype"]): dict(s.get("data") or {})
        for m in doc["measurements"]
        for s in m.get("subtypes") or []
    }


def host_os_release() -> dict[str, str]:
    """This machine's ``/etc/os-release`` (the node runs on it)."""
    pairs = (line.partition("=") for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return {key: value.strip('"') for key, _, value in pairs}


def _seconds(start: str, end: str) -> float:
    layout = "%Y-%m-%dT%H:%M:%SZ"
    return (datetime.strptime(end, layout) - datetime.strptime(start, layout)).total_seconds()


def agent_run(jobs: Watched, pods: Watched) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent's Job and its one pod, as last seen."""
    job = jobs.seen().get(AGENT)
    assert job is not None, (sorted(jobs.seen()), jobs.errors[-3:])
    mine = [
        p
        for p in pods.seen().values()
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/controller-uid") == job["metadata"]["uid"]
    ]
    assert len(mine) == 1, [p["metadata"]["name"] for p in mine]
    return job, mine[0]


def assert_agent_pod(pod: dict[str, Any], privileged: bool) -> None:
    """The agent ran on the node from the image loaded under the published name,
    with the host's network and mounts only when privileged, and exited 0."""
    spec = pod["spec"]
    [container] = spec["containers"]
    assert (spec["nodeName"], container["image"], container["command"]) == (NODE_NAME, AGENT_IMAGE, ["aicr"])
    assert bool(spec.get("hostNetwork")) is privileged, spec
    assert bool(spec.get("hostPID")) is privileged, spec
    assert bool((container.get("securityContext") or {}).get("privileged")) is privileged, container
    host_paths = sorted(v["hostPath"]["path"] for v in spec.get("volumes") or [] if "hostPath" in v)
    assert host_paths == (["/etc/os-release", "/run/systemd"] if privileged else []), host_paths
    [status] = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 0, status


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("privileged", [True, False], ids=["privileged", "restricted"])
def test_the_real_agent_snapshots_the_node_for_validate_and_a_changed_label_is_reported(  # noqa: PLR0917 - fixtures
    privileged: bool,
    helm: Helm,
    control_plane: ControlPlane,
    namespace: str,
    agent_on_node: str,
    validator_on_node: str,
    controllers: None,
    redirect_kubelet: Kubelet,
    release_mirror: FolderMirror,
    stand_in_charts: FolderMirror,
    eks_recipe: dict[str, Any],
    components_removed_after: None,
    agent_jobs: Watched,
    agent_pods: Watched,
    node_label: None,
    tmp_path: Path,
) -> None:
    plane = control_plane
    host = host_os_release()
    # Whether the snapshot's OS meets the recipe's: the readiness pre-flight passes.
    ready = not privileged or (host["ID"], host["VERSION_ID"]) == ("ubuntu", "24.04")
    set_label(plane, "blue")
    extra = {
        # No --snapshot of the test's own: the runner's snapshot step gives validate one.
        "validateArgs": [],
        "snapshot": {"enabled": True, "privileged": privileged},
        "revalidate": {"schedule": "0 3 * * *"},
    }
    kubelet = redirect_kubelet
    rv.install(
        helm, plane, namespace, kubelet, release_mirror, stand_in_charts, "--best-effort",
        fail_on_error=ready, extra=extra,
    )  # fmt: skip
    run = kubelet.run_job(RELEASE, namespace, timeout=800)

    assert run.exit_code == 0, run.describe()
    results = RunResults(plane, namespace)
    snap = results.step("snapshot")
    assert snap["status"] == "succeeded", snap
    agent_text = snapshot_in(plane, AGENT_NAMESPACE, AGENT)
    assert snapshot_in(plane, namespace, KEPT) == agent_text, "the agent's snapshot kept in snapshot.configMap"
    found = readings(agent_text)
    version = plane.admin.get("/version")["gitVersion"]
    # The agent's in-cluster client reached this session's API server.
    assert found[("K8s", "server")]["version"] == version
    assert yaml.safe_load(agent_text)["metadata"]["source-node"] == NODE_NAME
    assert found[("K8s", "node")]["source-node"] == NODE_NAME
    smi = found[("GPU", "smi")]
    assert (smi["gpu-count"], smi["gpu.model"], smi["driver"], smi["cuda-version"]) == (
        GPU["count"], GPU["model"], GPU["driver"], GPU["cuda"],
    )  # fmt: skip
    assert found[("NodeTopology", "summary")]["node-count"] == 1
    assert found[("NodeTopology", "label")][LABEL] == f"blue|{NODE_NAME}"
    release = found[("OS", "release")]
    # Privileged: the node's /etc/os-release; restricted: the agent image's own.
    expected_os = (host["ID"], host["VERSION_ID"]) if privileged else ("ubuntu", "24.04")
    assert (release["ID"], release["VERSION_ID"]) == expected_os, release
    assert snap["message"].startswith(
        f"snapshot cm://{AGENT_NAMESPACE}/{AGENT}: Kubernetes {version}, {GPU['count']}x {GPU['model']} "
        f"(driver {GPU['driver']}), {release['PRETTY_NAME']}, 1 node; the first snapshot kept"
    ), snap
    install_job, pod = agent_run(agent_jobs, agent_pods)
    assert_agent_pod(pod, privileged)

    # validate read that snapshot (aicr's own log line) and started no agent of its own.
    assert f"loading snapshot uri=cm://{AGENT_NAMESPACE}/{AGENT}" in run.output
    others = {name: job for name, job in agent_jobs.seen().items() if name != AGENT}
    assert all(j["metadata"]["labels"].get("aicr.nvidia.com/job-type") == "validation" for j in others.values()), (
        sorted(others)
    )
    validate = results.step("validate")
    if not ready:
        assert (validate["status"], validate["exitCode"]) == ("failed", 8), validate
        refused = f"readiness check failed: OS.release.ID expected ubuntu, got {host['ID']}"
        assert validate["message"].startswith("the readiness pre-flight failed, so no validator ran: "), validate
        assert validate["message"].endswith(refused), validate
        assert not others, "no check ran"
        assert results.report()["phase"] == "SucceededWithFailures"
    else:
        assert (validate["status"], validate["message"]) == ("succeeded", rv.VERDICT), validate
        passed = sorted(re.findall(r"readiness constraint passed name=(\S+)", run.output))
        assert passed == sorted(c["name"] for c in eks_recipe["recipe"]["constraints"]), passed
        assert sorted(j["metadata"]["labels"]["aicr.nvidia.com/validator"] for j in others.values()) == sorted(
            name for name, _, _ in rv.CHECKS
        )
        assert results.report()["phase"] == "Succeeded"
    kept_facts = json.loads(results.data(KEPT)["facts.json"])

    # A node label changes; the next re-validation's snapshot reports it.
    set_label(plane, "green")
    kubectl(plane, "create", "job", "-n", namespace, f"--from=cronjob/{CRONJOB}", "revalidate-label")
    again = kubelet.run_job(RELEASE, namespace, job_name="revalidate-label", timeout=600)

    assert again.exit_code == 0, again.describe()
    results = RunResults(plane, namespace)
    report = results.report()
    since = kept_facts["time"]
    change = f"node label {LABEL}: blue on {NODE_NAME} -> green on {NODE_NAME}"
    assert report["clusterChanges"] == [change], report
    summary = results.data("aicr-run-status")["summary.txt"]
    assert f"cluster changed since {since}:\n- {change}" in summary, summary
    note = f"since {since}: {change}"
    assert ("Normal", "ClusterChanged", note) in events_on(plane, namespace, "Job", "revalidate-label")
    snap_again = results.step("snapshot")
    assert snap_again["status"] == "succeeded", snap_again
    assert f"cluster changed since {since}" in snap_again["message"], snap_again
    assert f"loading snapshot uri=cm://{AGENT_NAMESPACE}/{AGENT}" in again.output
    second_text = snapshot_in(plane, AGENT_NAMESPACE, AGENT)
    assert readings(second_text)[("NodeTopology", "label")][LABEL] == f"green|{NODE_NAME}"
    assert snapshot_in(plane, namespace, KEPT) == second_text
    revalidate_job, revalidate_pod = agent_run(agent_jobs, agent_pods)
    assert revalidate_job["metadata"]["uid"] != install_job["metadata"]["uid"], "a second agent Job"
    assert_agent_pod(revalidate_pod, privileged)

    figures = {
        "mode": "privileged" if privileged else "restricted",
        "api_server_version": version,
        "snapshot_bytes": len(agent_text.encode()),
        "snapshot_gzip_bytes": len(gzip.compress(agent_text.encode())),
        "agent_job_seconds": [
            _seconds(j["status"]["startTime"], j["status"]["completionTime"]) for j in (install_job, revalidate_job)
        ],
        "agent_container_seconds": [_container_seconds(p) for p in (pod, revalidate_pod)],
        "snapshot_step_seconds": [round(s["durationSeconds"], 1) for s in (snap, snap_again)],
    }
    (tmp_path / "snapshot-figures.json").write_text(json.dumps(figures, indent=2, sort_keys=True))
    print("\nsnapshot agent:", json.dumps(figures, sort_keys=True))


def _container_seconds(pod: dict[str, Any]) -> float:
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    return _seconds(terminated["startedAt"], terminated["finishedAt"])
