"""Change safety end to end (issue 9): an upgrade during a run, a runner killed
mid-helm, a Helm 3 install upgraded by Helm 4, a rotated pack credential.

The chart is installed into the real API server; the real Job controller and
garbage collector (kube-controller-manager) create and delete the Jobs' pods,
which the real node (kube-scheduler, kubelet, containerd) runs with the chart's
pod spec (SIGTERM when a pod is deleted); deploy.sh runs the real helm against
the API server, pulling charts from the real registry. A retry of a failed pod is
the Job controller's next pod, followed with a second ``run_job``.

Scenarios that need a slow helm run an image derived from the e2e image with a
test helm first on PATH; the test talks to it through the pod's own ``work``
emptyDir (the test is root on the node: ``Kubelet.pod_volume``).

Timings and the measured gap between the old run's last helm operation and the
new run's first are printed (``-s``) and recorded in docs/installing.md "Change safety".
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.helm.guard import STOP_NAME
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.node import JobRun, Kubelet
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import ACME_CRITERIA, CHART, PACK_AUTH_FILE, RELEASE, RunResults, embedded_base_components
from e2e.tools import tool
from tests.fake_aicr.packs import write_pack
from tests.support.podman import PODMAN

pytestmark = pytest.mark.e2e

PACK_SECRET = "pack-cred"
LEASE_SECONDS = 8
GUARD_LINE = re.compile(r"helm-guard: helm (?P<what>upgrade \S+)(?: -n \S+)? (?P<event>started|ended) at (?P<at>\S+Z)")
#: name -> version of this module's component charts: a ConfigMap with the values,
#: and a Deployment (which nothing here ever makes ready, so `helm --wait` on it blocks).
CHARTS = {"acme-agent": "1.0.0", "acme-config": "0.3.1"}
#: The test helm's gate: a directory in the pod's own emptyDir ``work`` (the
#: chart mounts it at /work), where the test, root on the node, leaves its word
#: (an empty file named ``open`` or ``hang``) through ``Kubelet.pod_volume``.
GATE_VOLUME = "work"
GATE_DIR = "test-helm-gate"
#: A test helm in front of the real one (first on PATH in the held image):
#: `helm upgrade` does its work, then holds, as a `--wait` on a real workload would,
#: until the test opens the pod's gate; HELD_HELM_TIMEOUT_SECONDS only guards
#: against a gate never opened (the operation then fails).
HELD_HELM = """#!/bin/sh
if [ "$1" = "upgrade" ]; then
  {helm} "$@" || exit $?
  polls=0
  until [ -e {gate}/open ]; do
    polls=$((polls + 1))
    if [ "$polls" -gt $(({timeout} * 10)) ]; then echo "test helm: gate {gate} not opened" >&2; exit 1; fi
    sleep 0.1
  done
  exit 0
fi
exec {helm} "$@"
"""
#: A test helm that, told to hang, waits on the Deployment (never ready here: no
#: Deployment controller runs): the upgrade hangs in pending-install. Told
#: ``open`` (the Job's retry pod: the same pod template), it is the real helm.
HANGING_HELM = """#!/bin/sh
if [ "$1" = "upgrade" ]; then
  polls=0
  until [ -e {gate}/hang ] || [ -e {gate}/open ]; do
    polls=$((polls + 1))
    if [ "$polls" -gt $(({timeout} * 10)) ]; then echo "test helm: no word in {gate}" >&2; exit 1; fi
    sleep 0.1
  done
  if [ -e {gate}/hang ]; then exec {helm} "$@" --wait --timeout 10m; fi
fi
exec {helm} "$@"
"""
HELD_HELM_TIMEOUT_SECONDS = 300
#: The image's real helm (the image's tools binary picks the tool by the name it
#: runs as: the test helm calls it by this path, named helm).
IMAGE_HELM = "/usr/local/bin/helm"
#: Where the derived image has the test helm, put first on the image's PATH.
TEST_HELM_DIR = "/usr/local/lib/test-helm"


# -- building blocks ----------------------------------------------------------------------------


def _write_chart(root: Path, name: str, version: str) -> Path:
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": name, "version": version, "appVersion": version})
    )
    (root / "values.yaml").write_text("mode: default\n")
    (root / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n"
        "data:\n  mode: {{ .Values.mode | quote }}\n"
    )
    (root / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  replicas: 1\n  selector:\n    matchLabels: {app: {{ .Release.Name }}}\n"
        "  template:\n    metadata:\n      labels: {app: {{ .Release.Name }}}\n"
        "    spec:\n      containers:\n        - {name: app, image: example.invalid/app:1}\n"
    )
    return root


@pytest.fixture(scope="module")
def chart_repository(helm: Helm, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("change-safety-charts")
    repository = f"oci://{registry.host}/change-safety-charts"
    for name, version in CHARTS.items():
        source = _write_chart(work / "src" / name, name, version)
        helm.run("package", str(source), "--destination", str(work / "pkg"))
        helm.run(
            "push",
            str(work / "pkg" / f"{name}-{version}.tgz"),
            repository,
            "--plain-http",
            "--username",
            registry.username,
            "--password",
            registry.password,
        )
    return repository


def push_pack(registry: Registry, auth_file: Path, root: Path, repository: str, namespace: str) -> str:
    """A pack with two leaves, training and inference, whose acme-agent values differ."""
    overlays: dict[str, dict[str, Any]] = {
        f"acme-h100-{intent}": {
            "criteria": {**ACME_CRITERIA, "intent": intent},
            "componentRefs": [
                {"name": "acme-agent", "type": "Helm", "valuesFile": f"components/acme-agent/{intent}.yaml"},
                {"name": "acme-config", "type": "Helm", "dependencyRefs": ["acme-agent"]},
            ],
        }
        for intent in ("training", "inference")
    }
    pack = write_pack(
        root,
        components=[
            {
                "name": name,
                "helm": {
                    "defaultRepository": repository,
                    "defaultChart": name,
                    "defaultVersion": version,
                    "defaultNamespace": namespace,
                },
            }
            for name, version in CHARTS.items()
        ],
        overlays=overlays,
        files={f"components/acme-agent/{i}.yaml": f"mode: {i}\n" for i in ("training", "inference")},
    )
    return oras.push_pack(pack, registry.ref(f"acme/{namespace}/pack", "1.0.0"), registry_config=auth_file).ref


def values_for(pack_ref: str, intent: str = "training", **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        **ACME_CRITERIA,
        "intent": intent,
        "dataPack": pack_ref,
        "dataPackSecret": PACK_SECRET,
        "dataPackPlainHTTP": True,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        "aicrProvenance": {"mode": "off"},
        "bundleArgs": [arg for name in embedded_base_components() for arg in ("--set", f"{name}:enabled=false")],
        "logFormat": "json",
        "lease": {"durationSeconds": LEASE_SECONDS, "waitSeconds": 300},
        "job": {
            "terminationGracePeriodSeconds": 60,
            "extraEnv": [
                {"name": "FAKE_AICR_DEPLOY_REAL", "value": "1"},
                {"name": "FAKE_AICR_DEPLOY_BACKOFF", "value": "0"},
                {"name": "FAKE_AICR_HELM_FLAGS", "value": f"--plain-http --registry-config {PACK_AUTH_FILE}"},
            ],
        },
    }
    values.update(extra)
    return values


def jobs(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    items = plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return {j["metadata"]["name"]: j for j in items}


def helm_with(binary: Path, helm: Helm) -> Helm:
    """The session's helm setup (kubeconfig, home) with another helm binary."""
    other = Helm(helm.kubeconfig, helm.home)
    other.binary = binary
    return other


def values_args(helm: Helm, values: Mapping[str, Any]) -> list[str]:
    return helm._values_args(values, (), None)


def runner_pid(pod_name: str) -> int | None:
    """The runner process of pod ``pod_name`` (the container's main process, a
    child of tini), found in this host's /proc: the node runs its containers here."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(b"aicr-runner") for part in cmdline[:2]) and (
            f"AICR_RUNNER_LEASE__POD_NAME={pod_name}".encode() in environ
        ):
            return int(entry.name)
    return None


def job_pod(plane: ControlPlane, namespace: str, job_name: str, *, other_than: str = "") -> dict[str, Any] | None:
    """The newest pod of Job ``job_name`` (by the Job controller's label), other than ``other_than``."""
    pods = plane.admin.get(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"batch.kubernetes.io/job-name={job_name}"
    )["items"]
    pods = [p for p in pods if p["metadata"]["name"] != other_than]
    pods.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    return dict(pods[-1]) if pods else None


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class HelmOp:
    what: str
    started: datetime
    ended: datetime | None


def helm_ops(output: str) -> list[HelmOp]:
    """Every helm operation deploy.sh ran, from the guard's lines in the pod log."""
    ops: list[HelmOp] = []
    for line in output.splitlines():
        match = GUARD_LINE.search(line)
        if not match:
            continue
        at = datetime.fromisoformat(match["at"].replace("Z", "+00:00"))
        if match["event"] == "started":
            ops.append(HelmOp(match["what"], at, None))
        else:
            open_op = next(op for op in reversed(ops) if op.what == match["what"] and op.ended is None)
            open_op.ended = at
    return ops


def step_interval(output: str, step: str) -> tuple[datetime, datetime]:
    """When ``step`` started and ended, from the runner's JSON log lines."""
    start = end = None
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("step") == step and event.get("event") in ("step started", "step ended"):
                at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))
                start, end = (at, end) if event["event"] == "step started" else (start, at)
    assert start is not None, f"no 'step started' for {step}"
    assert end is not None, f"no 'step ended' for {step}"
    return start, end


@dataclass
class Env:
    helm: Helm
    plane: ControlPlane
    registry: Registry
    namespace: str
    components: str
    pack_ref: str

    @property
    def results(self) -> RunResults:
        return RunResults(self.plane, self.namespace)

    def releases(self) -> dict[str, str]:
        return {r["name"]: r["status"] for r in self.helm.list_releases() if r["namespace"] == self.components}


@pytest.fixture
def env(
    *,
    helm: Helm,
    control_plane: ControlPlane,
    registry: Registry,
    registry_auth_file: Path,
    namespace: str,
    chart_repository: str,
    tmp_path: Path,
) -> Env:
    components = f"{namespace}-acme"
    ref = push_pack(registry, registry_auth_file, tmp_path / "pack", chart_repository, components)
    control_plane.create_dockerconfig_secret(namespace, PACK_SECRET, registry.dockerconfigjson())
    return Env(helm, control_plane, registry, namespace, components, ref)


def kubelet_with_helm(
    make_kubelet: Callable[..., Kubelet], image: str, tmp_path: Path, script: str, name: str
) -> Kubelet:
    """``image`` (the e2e image) plus ``script`` as the pods' helm, first on the
    image's PATH (the real helm stays at IMAGE_HELM). Install the chart with the
    returned kubelet's image_values()."""
    wrapper = tmp_path / f"test-helm-{name}" / "helm"
    wrapper.parent.mkdir()
    wrapper.write_text(script.format(helm=IMAGE_HELM, gate=f"/work/{GATE_DIR}", timeout=HELD_HELM_TIMEOUT_SECONDS))
    wrapper.chmod(0o755)
    return make_kubelet(
        image_files={TEST_HELM_DIR: wrapper.parent}, image_env={"PATH": f"{TEST_HELM_DIR}:{image_path(image)}"}
    )


def image_path(image: str) -> str:
    """The PATH ``image`` sets (its config's Env)."""
    proc = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{json .Config.Env}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    found = [str(entry).partition("=")[2] for entry in json.loads(proc.stdout) if str(entry).startswith("PATH=")]
    assert found, f"image {image} sets no PATH: {proc.stdout}"
    return found[0]


def tell_test_helm(kubelet: Kubelet, pod: Mapping[str, Any], word: str) -> None:
    """Leave ``word`` in the pod's gate (its emptyDir ``work``, once the kubelet
    has set it up)."""
    volume = kubelet.pod_volume(pod, GATE_VOLUME)
    wait_for(f"pod {pod['metadata']['name']}'s {GATE_VOLUME} volume", volume.is_dir, 120)
    gate = volume / GATE_DIR
    gate.mkdir(mode=0o755, exist_ok=True)
    (gate / word).touch()


def stop_requested(kubelet: Kubelet, pod: Mapping[str, Any]) -> bool:
    """The runner of ``pod`` has recorded a stop request in its helm guard (in its
    work emptyDir; from then on deploy.sh starts no helm operation, the one in
    flight finishes)."""
    return (kubelet.pod_volume(pod, GATE_VOLUME) / "helm-guard" / STOP_NAME).exists()


def seen_line(text: str) -> tuple[threading.Event, Callable[[str], bool]]:
    """An event set once a pod log line contains ``text``, and the ``terminate_when``
    predicate (never ending the pod) that sets it."""
    seen = threading.Event()

    def watch(line: str) -> bool:
        if text in line:
            seen.set()
        return False

    return seen, watch


def in_thread(function: Callable[[], JobRun]) -> tuple[threading.Thread, list[JobRun]]:
    out: list[JobRun] = []
    thread = threading.Thread(target=lambda: out.append(function()), daemon=True)
    thread.start()
    return thread, out


# -- 1. an upgrade with a changed criterion while deploy.sh is mid-install ------------------------


#: How the old Job goes: Helm deletes it on upgrade (background propagation: plain
#: helm, Sveltos, k0rdent, Flux's Helm 4), or, as Argo CD's prune does, it is
#: deleted with foreground propagation (Helm keeps it: helm.sh/resource-policy).
DELETIONS = {
    "helm-background": {},
    "argocd-prune-foreground": {"job": {"annotations": {"helm.sh/resource-policy": "keep"}}},
}


@pytest.mark.parametrize("deletion", list(DELETIONS))
def test_an_upgrade_mid_install_waits_for_the_old_run_and_the_new_values_win(
    env: Env, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path, deletion: str
) -> None:
    kubelet = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, HELD_HELM, "held")

    def values(intent: str) -> dict[str, Any]:
        base = values_for(env.pack_ref, intent, **kubelet.image_values())
        extra = DELETIONS[deletion]
        if extra:
            base["job"] = {**base["job"], **extra["job"]}
        return base

    env.helm.install(RELEASE, CHART, env.namespace, values=values("training"))
    [old_job] = jobs(env.plane, env.namespace)
    started = time.monotonic()
    old_helm, old_watch = seen_line("helm upgrade acme-agent")
    old_thread, old_out = in_thread(
        lambda: kubelet.run_job(RELEASE, env.namespace, job_name=old_job, terminate_when=old_watch)
    )

    # deploy.sh is mid-install: the first helm operation is in flight (held until
    # the old run has been asked to stop, below).
    wait_for("the old run's first helm operation", lambda: old_helm.is_set() or not old_thread.is_alive())
    assert old_helm.is_set(), old_out[0].describe()
    old_pod = job_pod(env.plane, env.namespace, old_job)
    assert old_pod is not None
    upgraded_at = time.monotonic()
    env.helm.run("upgrade", RELEASE, str(CHART), "-n", env.namespace, *values_args(env.helm, values("inference")))
    if deletion == "argocd-prune-foreground":
        assert old_job in jobs(env.plane, env.namespace), "helm kept the old Job (resource-policy: keep)"
        # Argo CD's prune: delete the old Job with foreground propagation.
        env.plane.admin.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{old_job}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
        )
    new_job = wait_for("the new Job", lambda: next((n for n in jobs(env.plane, env.namespace) if n != old_job), None))
    # The old Job is being deleted; the garbage collector deletes its pod and the
    # kubelet sends SIGTERM to the runner.
    new_waits, new_watch = seen_line("waiting for the install Lease")
    new_thread, new_out = in_thread(
        lambda: kubelet.run_job(RELEASE, env.namespace, job_name=new_job, terminate_when=new_watch)
    )
    try:
        # Only then does the held helm operation end: the old run stops before the
        # next one, whatever the load, and the new run waits for its Lease.
        wait_for("the old run to be asked to stop", lambda: stop_requested(kubelet, old_pod))
        wait_for("the new run to wait for the Lease", lambda: new_waits.is_set() or not new_thread.is_alive())
        assert new_waits.is_set(), new_out[0].describe()
    finally:
        tell_test_helm(kubelet, old_pod, "open")  # the held helm operation ends
        # The new pod runs the same image: its helm operations are not held.
        new_pod = job_pod(env.plane, env.namespace, new_job)
        if new_pod is not None and kubelet.pod_volume(new_pod, GATE_VOLUME).is_dir():
            tell_test_helm(kubelet, new_pod, "open")
    old_thread.join(timeout=300)
    new_thread.join(timeout=600)
    finished = time.monotonic()
    [old], [new] = old_out, new_out

    assert old.exit_code == 143, old.describe()
    assert "stopped between two helm operations (none was cut" in old.output
    assert new.exit_code == 0, new.describe()
    # No helm operation was cut: every one the old run started, it finished.
    old_ops, new_ops = helm_ops(old.output), helm_ops(new.output)
    assert old_ops, old.output
    assert all(op.ended is not None for op in old_ops), old_ops
    # deploy.sh never ran twice at once: the old run's deploy ended before the new one's began.
    old_deploy, new_deploy = step_interval(old.output, "deploy"), step_interval(new.output, "deploy")
    assert old_deploy[1] <= new_deploy[0], (old_deploy, new_deploy)
    gap = (new_ops[0].started - max(op.ended for op in old_ops if op.ended)).total_seconds()
    assert gap > 0
    # The new run waited for the Lease and said whom it waited for.
    waits = [json.loads(line) for line in new.output.splitlines() if '"event": "waiting for the install Lease"' in line]
    assert any(str(wait["holder"]).startswith(f"{old_job}/") for wait in waits), waits
    # Nothing is left pending, and the newest values won.
    assert env.releases() == {"acme-agent": "deployed", "acme-config": "deployed"}
    settings = env.plane.configmap(env.components, "acme-agent-settings")
    assert settings is not None
    assert settings["data"]["mode"] == "inference"
    lease = env.plane.admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{env.namespace}/leases/{RELEASE}-install")
    assert lease["spec"]["holderIdentity"] == "", "the last run handed the Lease back"
    wait_for("the old Job to be gone", lambda: old_job not in jobs(env.plane, env.namespace), 120)
    print(
        f"\nscenario 1 ({deletion}): {finished - started:.1f}s in all; upgrade at +{upgraded_at - started:.1f}s; "
        f"old run stopped after {len(old_ops)} helm operation(s); "
        f"gap between the old run's last helm operation and the new run's first: {gap:.2f}s; "
        "the new run waited for the Lease"
    )


# -- 2. a kill -9 of the runner mid-helm-install, then a new run ----------------------------------


def test_a_runner_killed_mid_helm_install_leaves_a_pending_release_the_next_run_recovers(
    env: Env, make_kubelet: Callable[..., Kubelet], e2e_image: str, tmp_path: Path
) -> None:
    hanging = kubelet_with_helm(make_kubelet, e2e_image, tmp_path, HANGING_HELM, "hanging")
    values = values_for(env.pack_ref, "training", **hanging.image_values())
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    [job] = jobs(env.plane, env.namespace)
    started = time.monotonic()
    first_pod = wait_for("the Job's pod", lambda: job_pod(env.plane, env.namespace, job))
    tell_test_helm(hanging, first_pod, "hang")
    killed: list[int] = []
    helm_started, note_helm_in_flight = seen_line("helm upgrade acme-agent")

    def kill_when_the_release_is_pending() -> None:
        helm_started.wait(timeout=240)
        wait_for("helm's pending-install record", lambda: env.releases().get("acme-agent") == "pending-install")
        pid = runner_pid(first_pod["metadata"]["name"])
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    threading.Thread(target=kill_when_the_release_is_pending, daemon=True).start()

    first = hanging.run_job(RELEASE, env.namespace, job_name=job, terminate_when=note_helm_in_flight)
    assert killed, first.describe()
    assert first.pod_name == first_pod["metadata"]["name"]
    # tini, the container's PID 1, exits 128 + 9 when its child dies of SIGKILL.
    assert (first.exit_code, first.reason) == (137, "Error"), first.describe()
    assert first.deletion is None, "the pod was not deleted: the runner was killed"
    assert env.releases().get("acme-agent") == "pending-install"

    # The Job controller's retry: a new pod of the same Job (the same image); its
    # test helm is the real one.
    retry_pod = wait_for(
        "the Job's retry pod", lambda: job_pod(env.plane, env.namespace, job, other_than=first.pod_name)
    )
    tell_test_helm(hanging, retry_pod, "open")
    second = hanging.run_job(RELEASE, env.namespace, job_name=job)
    finished = time.monotonic()
    assert second.pod_name == retry_pod["metadata"]["name"]
    assert second.exit_code == 0, second.describe()
    report = env.results.report()
    assert report["recoveries"] == [
        {
            "release": f"{env.components}/acme-agent",
            "status": "pending-install",
            "action": "uninstalled (a cut first install; deploy.sh installs it again)",
            "at": report["recoveries"][0]["at"],
        }
    ]
    assert "recovered releases:" in env.results.data("aicr-run-status")["summary.txt"]
    assert "recovered Helm release" in second.output
    # It waited for the dead holder's Lease to expire (no one renewed it) first.
    assert "install Lease expired" in second.output
    assert env.releases() == {"acme-agent": "deployed", "acme-config": "deployed"}
    print(f"\nscenario 2: {finished - started:.1f}s in all (kill -9, Lease expiry {LEASE_SECONDS}s, recovery, install)")


def test_a_pending_release_nothing_proves_is_ours_is_left_alone_with_exit_28(
    env: Env, aicr_kubelet: Kubelet, chart_repository: str
) -> None:
    # Someone else's helm, killed while it waited: acme-agent is left pending-install,
    # and no run of this release ever announced it in the install Lease.
    argv = [str(env.helm.binary), "install", "acme-agent", f"{chart_repository}/acme-agent", "--version", "1.0.0"]
    argv += ["-n", env.components, "--create-namespace", "--plain-http", "--wait", "--timeout", "10m"]
    argv += ["--username", env.registry.username, "--password", env.registry.password]
    foreign = subprocess.Popen(argv, env=env.helm.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for("the foreign release to be pending", lambda: env.releases().get("acme-agent") == "pending-install", 60)
    foreign.kill()
    foreign.wait()
    env.helm.install(RELEASE, CHART, env.namespace, values=values_for(env.pack_ref, "training"))
    run = aicr_kubelet.run_job(RELEASE, env.namespace)
    assert run.exit_code == 28, run.describe()
    assert "has no record of a run of this release operating on them" in run.output
    assert env.releases() == {"acme-agent": "pending-install"}, "never touched"


# -- 3. a Helm 3 install upgraded by Helm 4 with the same values ----------------------------------


def test_a_helm3_install_upgraded_by_helm4_with_the_same_values_creates_no_new_job(env: Env) -> None:
    helm3 = helm_with(tool("helm3"), env.helm)
    values = values_for(env.pack_ref, "training", job={"ttlSecondsAfterFinished": None})
    helm3.install(RELEASE, CHART, env.namespace, values=values)
    before = jobs(env.plane, env.namespace)
    assert "v3." in helm3.run("version", "--short").stdout
    env.helm.run("upgrade", RELEASE, str(CHART), "-n", env.namespace, *values_args(env.helm, values))
    assert "v4." in env.helm.run("version", "--short").stdout
    after = jobs(env.plane, env.namespace)
    assert list(after) == list(before), "the same Job name"
    [name] = after
    assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"], "the same Job object, not re-created"
    [release] = [r for r in env.helm.list_releases(env.namespace) if r["name"] == RELEASE]
    assert (str(release["revision"]), release["status"]) == ("2", "deployed")


# -- 4. a rotated pack credential ---------------------------------------------------------------------


def test_rotating_the_pack_credential_keeps_the_job_and_the_next_run_uses_the_new_one(
    env: Env, aicr_kubelet: Kubelet
) -> None:
    host = env.registry.host
    wrong = json.dumps(
        {"auths": {host: {"auth": base64.b64encode(f"{env.registry.username}:wrong".encode()).decode()}}}
    )
    values = values_for(env.pack_ref, "training", dataPackSecret="", dataPackAuth={"dockerconfigjson": wrong})
    env.helm.install(RELEASE, CHART, env.namespace, values=values)
    before = jobs(env.plane, env.namespace)
    [job] = before
    first = aicr_kubelet.run_job(RELEASE, env.namespace, job_name=job)
    assert first.exit_code == 23, first.describe()

    rotated = values_for(
        env.pack_ref, "training", dataPackSecret="", dataPackAuth={"dockerconfigjson": env.registry.dockerconfigjson()}
    )
    env.helm.run("upgrade", RELEASE, str(CHART), "-n", env.namespace, *values_args(env.helm, rotated))
    after = jobs(env.plane, env.namespace)
    assert list(after) == [job], "no new Job"
    assert after[job]["metadata"]["uid"] == before[job]["metadata"]["uid"]
    secret = env.plane.admin.get(f"/api/v1/namespaces/{env.namespace}/secrets/{RELEASE}-pack-auth")
    assert base64.b64decode(secret["data"][".dockerconfigjson"]).decode() == env.registry.dockerconfigjson()

    # The Job controller's retry of the failed pod: a new pod of the same Job.
    second = aicr_kubelet.run_job(RELEASE, env.namespace, job_name=job)
    assert second.exit_code == 0, second.describe()
    assert env.results.step("pack")["status"] == "succeeded"
    assert env.releases() == {"acme-agent": "deployed", "acme-config": "deployed"}
