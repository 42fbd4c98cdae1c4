"""What only a real kubelet shows: the chart installed with helm, its Job's pod
(the chart's own pod spec) run by the e2e node's kubelet and containerd.

* the termination message as ``kubectl get pod`` and ``kubectl describe pod``
  show it;
* an eviction through the Eviction API, ignored by the chart's podFailurePolicy,
  and the Job controller's new pod running to completion;
* ``job.activeDeadlineSeconds`` ending a hung run (the Job Failed, DeadlineExceeded);
* the image pulled from the harness registry through ``imagePullSecrets``, and
  refused without them;
* Pod Security Standards ``restricted`` enforced on the namespace, and the pod
  admitted and run.

The runs use the fake aicr the e2e image carries (``aicrBinary.path``), the
embedded eks leaf, and its simulated deploy.sh (tests/fake_aicr knobs in
``job.extraEnv``).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import subprocess
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.kube import KubeError
from e2e.harness.node import JobRun, Kubelet, RealNode, derive_image
from e2e.harness.registry import Registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import CHART, RELEASE, RunResults, extra_env
from e2e.test_scenarios import merged
from e2e.tools import tool
from tests.support.podman import PODMAN

pytestmark = pytest.mark.e2e

#: The embedded eks leaf of the fake aicr: deploy.sh installs gpu-operator among others.
CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
AICR_VERSION = "v1.2.0"


def run_values(*, env: Mapping[str, str] | None = None, **override: Any) -> dict[str, Any]:
    """A run of the fake aicr in the e2e image (no download, provenance off),
    with ``env`` as job.extraEnv and ``override`` merged over the values."""
    values: dict[str, Any] = {
        **CRITERIA,
        "aicrBinary": {"path": FAKE_AICR_PATH},
        "aicrProvenance": {"mode": "off"},
    }
    if env:
        values["job"] = {"extraEnv": extra_env(**env)}
    return merged(values, override)


def kubectl(plane: ControlPlane, *args: str) -> str:
    """The pinned kubectl with the control plane's admin kubeconfig; its stdout."""
    proc = subprocess.run(
        [str(tool("kubectl")), f"--kubeconfig={plane.kubeconfig}", *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)} (exit {proc.returncode}): {proc.stderr}"
    return proc.stdout


def job_of(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")


def condition(job: Mapping[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in job["status"].get("conditions") or [] if c["type"] == kind and c["status"] == "True"]
    assert found, f"Job has no {kind} condition: {job['status']}"
    return dict(found[0])


def pod_events(plane: ControlPlane, namespace: str, pod: str) -> dict[str, list[str]]:
    """reason -> messages of the core Events about a pod (kubelet and scheduler)."""
    items = plane.admin.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.kind=Pod,involvedObject.name={pod}"
    )["items"]
    events: dict[str, list[str]] = {}
    for event in items:
        events.setdefault(event["reason"], []).append(event.get("message", ""))
    return events


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


# -- the termination message --------------------------------------------------------------------


def test_kubectl_shows_the_runners_termination_message(
    helm: Helm, aicr_kubelet: Kubelet, control_plane: ControlPlane, namespace: str
) -> None:
    # No recipe provides os talos: aicr refuses the criteria (exit 2), the runner
    # writes why to /dev/termination-log, the kubelet puts it in the Pod status.
    helm.install(RELEASE, CHART, namespace, values=run_values(os="talos"))
    run = aicr_kubelet.run_job(RELEASE, namespace)

    assert run.exit_code == 2, run.describe()
    message = run.termination_message
    assert message.startswith("Failed (exit 2): recipe failed: "), message
    assert "no recipe provides os 'talos'" in message
    assert message.endswith(f"[aicr {AICR_VERSION}]"), message
    jsonpath = "{.status.containerStatuses[0].state.terminated.message}"
    assert kubectl(control_plane, "get", "pod", run.pod_name, "-n", namespace, "-o", f"jsonpath={jsonpath}") == message

    described = kubectl(control_plane, "describe", "pod", run.pod_name, "-n", namespace)
    state = re.search(r"State:\s+Terminated\n\s+Reason:\s+Error\n\s+Message:\s+(.*)\n\s+Exit Code:\s+2\n", described)
    assert state is not None, described
    assert state.group(1) == message
    # The scheduler placed it, the kubelet ran it: their events, as describe lists them.
    events = described.split("Events:", 1)[1]
    assert re.search(rf"Normal\s+Scheduled\s+.*default-scheduler\s+Successfully assigned {namespace}/", events), events
    started = r"Normal\s+Started\s+.*kubelet\s+spec\.containers\{aicr-runner\}: Container started"
    assert re.search(started, events), events


# -- an eviction --------------------------------------------------------------------------------


def test_an_evicted_run_is_not_counted_and_the_job_controllers_next_pod_completes(
    helm: Helm, aicr_kubelet: Kubelet, control_plane: ControlPlane, namespace: str
) -> None:
    # deploy.sh holds gpu-operator's install until the ConfigMap "gate" exists: the
    # first pod is evicted there; the gate is opened for the next one.
    gate = "gate"
    values = run_values(
        env={"FAKE_AICR_DEPLOY_HOLD_AT": "gpu-operator", "FAKE_AICR_DEPLOY_HOLD_CONFIGMAP": f"{namespace}/{gate}"},
        job={"backoffLimit": 0, "terminationGracePeriodSeconds": 30},
    )
    helm.install(RELEASE, CHART, namespace, values=values)

    def held(line: str) -> bool:
        return "] gpu-operator  →" in line

    evicted = aicr_kubelet.run_job(RELEASE, namespace, terminate_by="evict", terminate_when=held)
    control_plane.admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gate}},
    )
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, namespace)

    # The Eviction API: the API server marked the pod DisruptionTarget and deleted
    # it with its grace period; the kubelet sent SIGTERM and the runner stopped
    # deploy.sh at once (no helm operation in flight).
    assert evicted.exit_code == 143, evicted.describe()
    assert evicted.deletion is not None
    assert (evicted.deletion.disruption, evicted.deletion.grace_seconds) == ("EvictionByEvictionAPI", 30)
    assert not evicted.deletion.sigkill
    assert evicted.deletion.exited_after_sigterm is not None
    assert evicted.deletion.exited_after_sigterm < 15, "stopped at once, not after the runner's 15 s share"
    assert evicted.termination_message.startswith("Interrupted (exit 143): interrupted during deploy"), (
        evicted.termination_message
    )
    disruption = [c for c in evicted.pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["status"], c["reason"]) for c in disruption] == [("True", "EvictionByEvictionAPI")]
    assert not control_plane.admin.exists(f"/api/v1/namespaces/{namespace}/pods/{evicted.pod_name}")
    # podFailurePolicy ignored it: backoffLimit 0, yet a new pod ran and completed the Job.
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == ("Complete", "CompletionsReached", 1), (
        outcome.describe()
    )
    assert outcome.last.pod_name != evicted.pod_name
    assert outcome.last.exit_code == 0
    job = job_of(control_plane, namespace, evicted.job_name)
    assert (job["status"].get("failed", 0), job["status"].get("succeeded")) == (0, 1)
    results = RunResults(control_plane, namespace)
    assert results.report()["phase"] == "Succeeded"
    assert results.step("deploy")["status"] == "succeeded"


# -- activeDeadlineSeconds ----------------------------------------------------------------------


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def test_the_active_deadline_ends_a_hung_run_and_fails_the_job(
    helm: Helm, aicr_kubelet: Kubelet, control_plane: ControlPlane, namespace: str, executor: ThreadPoolExecutor
) -> None:
    # deploy.sh hangs (an hour's sleep). The run is installed with the chart's 3 h
    # cap; once it hangs in deploy, `helm upgrade` lowers job.activeDeadlineSeconds
    # (a Job field that changes in place: same Job, same pod) to a few seconds past
    # the Job's age, and the Job controller ends the run when that time comes.
    helm.install(
        RELEASE, CHART, namespace, values=run_values(env={"FAKE_AICR_DEPLOY_SLEEP": "3600"}, job={"backoffLimit": 3})
    )
    hung = threading.Event()

    def watch(line: str) -> bool:
        if "simulating a slow install" in line:
            hung.set()
        return False

    following: Future[JobRun] = executor.submit(aicr_kubelet.run_job, RELEASE, namespace, terminate_when=watch)
    assert hung.wait(300), "the run never reached deploy.sh"
    job = aicr_kubelet.find_job(RELEASE, namespace)
    assert job["spec"]["activeDeadlineSeconds"] == 10800
    started = _time(job["status"]["startTime"])
    deadline = int((dt.datetime.now(dt.UTC) - started).total_seconds()) + 5
    lowered = ("--reuse-values", "--set", f"job.activeDeadlineSeconds={deadline}")
    helm.run("upgrade", RELEASE, str(CHART), "--namespace", namespace, *lowered)
    run = following.result(timeout=300)
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, namespace, job_name=job["metadata"]["name"])

    assert aicr_kubelet.find_job(RELEASE, namespace)["metadata"]["uid"] == job["metadata"]["uid"]
    assert (outcome.status, outcome.reason, outcome.attempts) == ("Failed", "DeadlineExceeded", ()), outcome.describe()
    final = job_of(control_plane, namespace, job["metadata"]["name"])
    assert final["spec"]["activeDeadlineSeconds"] == deadline
    failed = condition(final, "Failed")
    assert failed["message"] == "Job was active longer than specified deadline"
    # (whole seconds both: the Job's age at its failure is at least deadline - 1)
    assert (_time(failed["lastTransitionTime"]) - started).total_seconds() >= deadline - 1
    # The Job controller deleted the pod; the kubelet's SIGTERM stopped the runner,
    # which recorded the interrupted deploy. No retry (backoffLimit 3 left unused).
    assert run.deletion is not None, run.describe()
    assert run.exit_code == 143, run.describe()
    assert run.termination_message.startswith("Interrupted (exit 143): interrupted during deploy"), (
        run.termination_message
    )
    assert final["status"].get("failed") == 1
    results = RunResults(control_plane, namespace)
    assert results.report()["phase"] == "Interrupted"
    assert results.step("deploy")["status"] == "interrupted"


# -- imagePullSecrets ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry_image(e2e_image: str, registry: Registry, node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image derived from the e2e image, pushed to the harness registry with
    podman (its credentials, plain HTTP); the node's containerd pulls from it over
    plain HTTP. Returns ``repository@digest``.

    Derived, so its image ID is its own: the kubelet records the credentials an
    image was pulled with by image ID (ImagePulledRecord), and a pod without them
    that asks for the same ID under another name must pull again to prove it may
    use it. Pushing the e2e image itself would send every later pod of the session
    (the chart's default image, no pull secret) to a registry it cannot reach."""
    image = derive_image(e2e_image, {}, {"AICR_E2E_IMAGE_SOURCE": "harness-registry"})
    tag = image.rpartition(":")[2]
    reference = f"{registry.host}/e2e/aicr-runner:{tag}"
    digest_file = tmp_path_factory.mktemp("registry-image") / "digest"
    push = [*PODMAN, "push", "--tls-verify=false", "--creds", f"{registry.username}:{registry.password}"]
    pushed = subprocess.run(
        [*push, "--digestfile", str(digest_file), image, f"docker://{reference}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pushed.returncode == 0, f"podman push {reference} (exit {pushed.returncode}): {pushed.stderr[-3000:]}"
    node.runtime.plain_http_registry(registry.host)
    return f"{registry.host}/e2e/aicr-runner@{digest_file.read_text().strip()}"


def test_the_image_is_pulled_with_the_image_pull_secret_and_refused_without_it(
    *,
    helm: Helm,
    aicr_kubelet: Kubelet,
    control_plane: ControlPlane,
    registry: Registry,
    registry_image: str,
    namespace: str,
) -> None:
    repository, _, digest = registry_image.partition("@")
    image = {"image": {"repository": repository, "digest": digest}}
    # Without credentials the registry refuses the node's pull (nothing is cached:
    # this reference was never pulled).
    helm.install(RELEASE, CHART, namespace, values=run_values(**image))
    refused = aicr_kubelet.run_job(RELEASE, namespace)
    helm.uninstall(RELEASE, namespace)
    # With the chart's imagePullSecrets naming a dockerconfigjson Secret, it pulls.
    with_secret = f"{namespace}-pull"
    control_plane.ensure_namespace(with_secret)
    control_plane.create_dockerconfig_secret(with_secret, "regcred", registry.dockerconfigjson())
    helm.install(RELEASE, CHART, with_secret, values=run_values(imagePullSecrets=[{"name": "regcred"}], **image))
    pulled = aicr_kubelet.run_job(RELEASE, with_secret)

    assert refused.exit_code is None, refused.describe()
    assert refused.reason.startswith(("ErrImagePull: ", "ImagePullBackOff: ")), refused.reason
    failures = " ".join(pod_events(control_plane, namespace, refused.pod_name).get("Failed", []))
    assert "401 Unauthorized" in failures, failures
    assert pulled.exit_code == 0, pulled.describe()
    assert pulled.pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pulled.pod["status"]["containerStatuses"][0]["imageID"] == registry_image
    assert "Pulled" in pod_events(control_plane, with_secret, pulled.pod_name)
    assert RunResults(control_plane, with_secret).report()["phase"] == "Succeeded"


# -- Pod Security Standards ---------------------------------------------------------------------


def test_the_chart_runs_in_a_namespace_enforcing_the_restricted_pod_security_standard(
    helm: Helm, aicr_kubelet: Kubelet, control_plane: ControlPlane
) -> None:
    namespace = f"restricted-{secrets.token_hex(3)}"
    control_plane.ensure_namespace(namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})
    # The admission plugin enforces it: a pod with the defaults is refused.
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "plain", "image": aicr_kubelet.image}]},
    }
    with pytest.raises(KubeError) as refused:
        control_plane.admin.create(f"/api/v1/namespaces/{namespace}/pods", plain)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in str(refused.value)

    installed = helm.install(RELEASE, CHART, namespace, values=run_values())
    run = aicr_kubelet.run_job(RELEASE, namespace)

    assert "PodSecurity" not in installed.stderr, installed.stderr  # no warning for the Job's pod template
    assert run.exit_code == 0, run.describe()
    outcome = aicr_kubelet.run_job_to_completion(RELEASE, namespace, job_name=run.job_name)
    assert (outcome.status, outcome.reason) == ("Complete", "CompletionsReached"), outcome.describe()
    assert RunResults(control_plane, namespace).report()["phase"] == "Succeeded"
