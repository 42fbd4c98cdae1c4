"""Chart upgrades a fleet makes without reading notes, against the real API server
and Job controller, under Helm 4 and Helm 3 (issue 13).

Chart version X (this checkout's chart) is installed and its Job runs to
completion (the real Job controller creates the pod, the e2e node's kubelet runs
the runner with the fake aicr). Then, with the same helm:

1. ``helm upgrade`` to X+1 (a copy of the chart whose only change is the chart
   version) with the same values: rc 0, the same Job object (uid), still
   complete, no new pod; only the Job's own version label changed.
2. ``helm upgrade`` of X+1 with a changed toleration: rc 0, a new Job whose pod
   template has the toleration; the old Job is gone; the new Job runs. Never
   "field is immutable".

The control: the chart as it was before issue 13 (the chart version on the pod
template, a Job name hashing the runtime settings only) fails step 1 with "field
is immutable" against the same API server, so the scenario can tell a fix from a
no-op.

Timings are printed (``-s``) and recorded in docs/installing.md.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm, HelmError
from e2e.harness.node import Kubelet
from e2e.node_image import FAKE_AICR_PATH
from e2e.scenarios import CHART, RELEASE
from e2e.tools import tool

pytestmark = pytest.mark.e2e

#: The run: the fake aicr's embedded catalog and its simulated deploy.sh (nothing
#: here is about what gets installed).
VALUES: dict[str, Any] = {
    "accelerator": "h100",
    "aicrBinary": {"path": FAKE_AICR_PATH},
    "aicrProvenance": {"mode": "off"},
    "job": {"tolerations": [{"key": "example.com/dedicated", "operator": "Equal", "value": "infra"}]},
}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
IMMUTABLE = "field is immutable"


def chart_at(version: str, tmp_path: Path, *, version_on_pod: bool = False) -> Path:
    """A copy of the chart at another chart version; ``version_on_pod`` makes it the
    chart before issue 13: the chart version on the pod template, and a Job name
    that hashes the runtime settings instead of the template."""
    copy = tmp_path / f"nvidia-aicr-{version}{'-version-on-pod' if version_on_pod else ''}"
    shutil.copytree(CHART, copy)
    chart_yaml = copy / "Chart.yaml"
    current = yaml.safe_load(chart_yaml.read_text())["version"]
    chart_yaml.write_text(chart_yaml.read_text().replace(f"version: {current}\n", f"version: {version}\n", 1))
    assert yaml.safe_load(chart_yaml.read_text())["version"] == version
    if version_on_pod:
        helpers = copy / "templates" / "_helpers.tpl"
        label = "app.kubernetes.io/component: installer\n{{- with .Values.job.podLabels }}"
        text = helpers.read_text()
        assert text.count(label) == 1
        versioned = label.replace("\n", '\nhelm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}\n', 1)
        identity = '{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}'
        assert text.count(identity) == 1
        old_identity = '{{- $identity := include "nvidia-aicr.runtimeEnv" . -}}'
        helpers.write_text(text.replace(label, versioned).replace(identity, old_identity))
    return copy


def with_binary(helm: Helm, name: str) -> Helm:
    """The session's helm setup (kubeconfig, home) with the pinned helm ``name``."""
    other = Helm(helm.kubeconfig, helm.home)
    other.binary = tool(name)
    return other


@pytest.fixture(params=["helm", "helm3"], ids=["helm4", "helm3"])
def any_helm(request: pytest.FixtureRequest, helm: Helm) -> Helm:
    chosen = with_binary(helm, str(request.param))
    major = chosen.run("version", "--short").stdout
    assert major.startswith("v4." if request.param == "helm" else "v3."), major
    return chosen


def jobs(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    items = plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return {j["metadata"]["name"]: j for j in items}


def pods_of(plane: ControlPlane, namespace: str, job: dict[str, Any]) -> list[str]:
    uid = job["metadata"]["uid"]
    selector = f"batch.kubernetes.io/controller-uid={uid}"
    items = plane.admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    return [p["metadata"]["name"] for p in items]


def upgrade(helm: Helm, chart: Path, namespace: str, values: dict[str, Any]) -> tuple[float, str]:
    started = time.monotonic()
    proc = helm.run("upgrade", RELEASE, str(chart), "-n", namespace, *helm._values_args(values, (), None), check=False)
    elapsed = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert IMMUTABLE not in output, output
    assert proc.returncode == 0, output
    return elapsed, output


def wait_for(what: str, condition: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_chart_upgrade_keeps_the_job_and_a_changed_toleration_gives_a_new_one(
    any_helm: Helm, control_plane: ControlPlane, aicr_kubelet: Kubelet, namespace: str, tmp_path: Path
) -> None:
    helm, plane = any_helm, control_plane
    next_chart = chart_at("0.4.1", tmp_path)

    started = time.monotonic()
    helm.install(RELEASE, CHART, namespace, values=VALUES)
    installed = time.monotonic() - started
    [(name, before)] = jobs(plane, namespace).items()
    first = aicr_kubelet.run_job_to_completion(RELEASE, namespace, job_name=name)
    assert first.status == "Complete", first.describe()
    [first_pod] = pods_of(plane, namespace, before)
    before = jobs(plane, namespace)[name]

    # 1. X -> X+1, same values: the same Job, untouched but for its own version label.
    same_values, _ = upgrade(helm, next_chart, namespace, VALUES)
    after = jobs(plane, namespace)
    assert list(after) == [name]
    job = after[name]
    assert job["metadata"]["uid"] == before["metadata"]["uid"], "the same Job object"
    assert job["metadata"]["labels"]["helm.sh/chart"] == "nvidia-aicr-0.4.1"
    assert job["spec"]["template"] == before["spec"]["template"]
    assert job["status"].get("succeeded") == 1
    assert pods_of(plane, namespace, job) == [first_pod], "no new run"

    # 2. A changed toleration: a new Job (a template cannot change in place), and it runs.
    changed = {**VALUES, "job": {"tolerations": [*VALUES["job"]["tolerations"], TOLERATION]}}
    new_values, _ = upgrade(helm, next_chart, namespace, changed)
    new_name = wait_for("the new Job", lambda: next((n for n in jobs(plane, namespace) if n != name), None))
    assert new_name.rsplit("-", 1)[0] == name.rsplit("-", 1)[0]
    new_job = jobs(plane, namespace)[new_name]
    assert TOLERATION in new_job["spec"]["template"]["spec"]["tolerations"]
    wait_for("helm to remove the old Job", lambda: name not in jobs(plane, namespace))
    second = aicr_kubelet.run_job_to_completion(RELEASE, namespace, job_name=new_name)
    assert second.status == "Complete", second.describe()

    [release] = [r for r in helm.list_releases(namespace) if r["name"] == RELEASE]
    assert (str(release["revision"]), release["status"], release["chart"]) == ("3", "deployed", "nvidia-aicr-0.4.1")
    print(
        f"\n{helm.run('version', '--short').stdout.strip()}: install {installed:.1f}s, "
        f"upgrade to 0.4.1 with the same values {same_values:.1f}s (same Job, no new pod), "
        f"upgrade with a changed toleration {new_values:.1f}s (new Job)"
    )


def test_the_control_a_version_on_the_pod_template_fails_the_upgrade_as_immutable(
    any_helm: Helm, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    # Nothing runs here: the API server refuses the changed template whatever the Job's state.
    helm = any_helm
    helm.install(RELEASE, chart_at("0.4.0", tmp_path, version_on_pod=True), namespace, values=VALUES)
    [before] = jobs(control_plane, namespace)
    args = helm._values_args(VALUES, (), None)
    with pytest.raises(HelmError) as failed:
        helm.run("upgrade", RELEASE, str(chart_at("0.4.1", tmp_path, version_on_pod=True)), "-n", namespace, *args)
    assert IMMUTABLE in str(failed.value), failed.value
    assert list(jobs(control_plane, namespace)) == [before]
