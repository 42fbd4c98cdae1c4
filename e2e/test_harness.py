"""Self-tests of the end-to-end harness: each asserts behaviour of the real
component that a scenario relies on (and that a broken harness would lose)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import tools as tools_module
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.kube import KubeError
from e2e.harness.node import FAKE_AICR_PATH, JobRun, Kubelet, expand
from e2e.harness.registry import Registry
from e2e.harness.sandbox import rewrite_paths
from e2e.tools import REPO_ROOT, pinned_versions, tool

pytestmark = pytest.mark.e2e

CHARTS = Path(__file__).parent / "fixtures" / "charts"


# -- tools ------------------------------------------------------------------------------


def test_pinned_tools_report_their_pinned_versions() -> None:
    pins = pinned_versions()
    helm_version = subprocess.run([tool("helm"), "version", "--short"], capture_output=True, text=True, check=True)
    assert (
        helm_version.stdout.startswith(pins["HELM_VERSION"] + "+")
        or helm_version.stdout.strip() == pins["HELM_VERSION"]
    )
    oras_version = subprocess.run([tool("oras"), "version"], capture_output=True, text=True, check=True)
    assert f"Version:    {pins['ORAS_VERSION'].lstrip('v')}" in oras_version.stdout
    etcd_version = subprocess.run([tool("etcd"), "--version"], capture_output=True, text=True, check=True)
    assert f"etcd Version: {pins['ETCD_VERSION'].lstrip('v')}" in etcd_version.stdout
    apiserver = subprocess.run([tool("kube-apiserver"), "--version"], capture_output=True, text=True, check=True)
    assert apiserver.stdout.strip() == f"Kubernetes {pins['KUBERNETES_VERSION']}"
    kcm = subprocess.run([tool("kube-controller-manager"), "--version"], capture_output=True, text=True, check=True)
    assert kcm.stdout.strip() == f"Kubernetes {pins['KUBERNETES_VERSION']}"
    helm3 = subprocess.run([tool("helm3"), "version", "--short"], capture_output=True, text=True, check=True)
    assert helm3.stdout.startswith(pins["HELM3_VERSION"] + "+") or helm3.stdout.strip() == pins["HELM3_VERSION"]


def test_kubebuilder_assets_win_for_etcd_and_kube_apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("etcd", "kube-apiserver"):
        (tmp_path / name).symlink_to(tool(name))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    tools_module._tool.cache_clear()
    try:
        assert tool("kube-apiserver") == tmp_path / "kube-apiserver"
        assert tool("etcd") == tmp_path / "etcd"
        assert tool("helm") == tools_module.TOOLS_BIN / "helm"
    finally:
        tools_module._tool.cache_clear()


# -- API server ---------------------------------------------------------------------------


def test_api_server_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    version = control_plane.admin.get("/version")
    assert version["gitVersion"] == "v1.37.2"
    assert (version["major"], version["minor"]) == ("1", "37")


def test_rbac_denies_a_service_account_until_a_role_binding_grants_it(
    control_plane: ControlPlane, namespace: str
) -> None:
    admin = control_plane.admin
    admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "writer"}},
    )
    client = control_plane.client(control_plane.token(namespace, "writer"))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}, "data": {"k": "v"}}

    with pytest.raises(KubeError) as denied:
        client.create(f"/api/v1/namespaces/{namespace}/configmaps", configmap)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:writer" in str(denied.value)

    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "cm-writer"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}],
        },
    )
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "cm-writer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": namespace}],
        },
    )
    deadline = time.monotonic() + 10  # the RBAC authorizer sees the binding via its informer
    while True:
        try:
            created = client.create(f"/api/v1/namespaces/{namespace}/configmaps", configmap)
            break
        except KubeError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert created["data"] == {"k": "v"}
    # The binding covers configmaps only.
    with pytest.raises(KubeError) as still_denied:
        client.get(f"/api/v1/namespaces/{namespace}/secrets")
    assert still_denied.value.status == 403


def test_service_account_tokens_are_signed_by_the_issuer(control_plane: ControlPlane, namespace: str) -> None:
    token = control_plane.token(namespace, "default", audiences=["https://kubernetes.default.svc.cluster.local"])
    review = control_plane.admin.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        },
    )
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{namespace}:default"
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(KubeError) as rejected:
        control_plane.client(forged).get(f"/api/v1/namespaces/{namespace}/configmaps")
    assert rejected.value.status == 401


# -- registry + oras ----------------------------------------------------------------------


def test_registry_rejects_wrong_credentials_and_accepts_right_ones(registry: Registry) -> None:
    assert registry.get("/v2/")[0] == 401
    assert registry.get("/v2/", auth=(registry.username, registry.password + "x"))[0] == 401
    assert registry.get("/v2/", auth=("intruder", registry.password))[0] == 401
    assert registry.get("/v2/", auth=(registry.username, registry.password))[0] == 200


def _write_pack(root: Path) -> Path:
    (root / "overlays" / "nested").mkdir(parents=True)
    (root / "registry.yaml").write_text("apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\ncomponents: []\n")
    (root / "overlays" / "acme.yaml").write_text(
        "apiVersion: aicr.run/v1beta1\nkind: RecipeMetadata\nmetadata: {name: acme}\n"
        "spec: {criteria: {service: acme, accelerator: h100, intent: training}}\n"
    )
    (root / "overlays" / "nested" / "more.yaml").write_text("apiVersion: aicr.run/v1beta1\nkind: RecipeMetadata\n")
    return root


def test_oras_pushes_a_pack_like_users_do_and_pulls_it_back(
    registry: Registry, registry_auth_file: Path, tmp_path: Path
) -> None:
    pack = _write_pack(tmp_path / "pack")
    pushed = oras.push_pack(pack, registry.ref("acme/aicr-pack", "1.0.0"), registry_config=registry_auth_file)
    assert pushed.digest.startswith("sha256:")

    manifest = oras.fetch_manifest(pushed.pinned_ref, registry_config=registry_auth_file)
    layers = {layer["annotations"]["org.opencontainers.image.title"]: layer for layer in manifest["layers"]}
    assert set(layers) == {"registry.yaml", "overlays"}
    assert layers["overlays"]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    assert layers["overlays"]["annotations"]["io.deis.oras.content.unpack"] == "true"

    status, body = registry.get("/v2/_catalog", auth=(registry.username, registry.password))
    assert status == 200
    assert "acme/aicr-pack" in json.loads(body)["repositories"]

    out = tmp_path / "pulled"
    oras.pull(pushed.ref, out, registry_config=registry_auth_file)
    pulled = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
    source = {p.relative_to(pack).as_posix(): p.read_text() for p in pack.rglob("*") if p.is_file()}
    assert pulled == source

    with pytest.raises(oras.OrasError) as anonymous:
        oras.pull(pushed.ref, tmp_path / "anonymous")
    assert "401" in anonymous.value.output or "credential" in anonymous.value.output.lower()


# -- helm -----------------------------------------------------------------------------------


def test_helm_installs_a_local_chart_and_lists_it(helm: Helm, control_plane: ControlPlane, namespace: str) -> None:
    helm.install("greeter", CHARTS / "hello", namespace, values={"greeting": "hi there"})
    releases = {r["name"]: r for r in helm.list_releases(namespace)}
    assert releases["greeter"]["status"] == "deployed"
    assert releases["greeter"]["chart"] == "hello-0.1.0"
    cm = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/greeter-hello")
    assert cm["data"]["greeting"] == "hi there"
    assert cm["data"]["kubeVersion"] == "v1.37.2"  # .Capabilities from the live server
    helm.uninstall("greeter", namespace)
    assert helm.list_releases(namespace) == []
    assert not control_plane.admin.exists(f"/api/v1/namespaces/{namespace}/configmaps/greeter-hello")


# -- the stand-in kubelet -----------------------------------------------------------------


def _probe_facts(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("PROBE "):
            return dict(json.loads(line.removeprefix("PROBE ")))
    raise AssertionError(f"no PROBE line in output:\n{output}")


def test_kubelet_runs_a_job_pod_with_volumes_env_identity_and_in_cluster_access(
    helm: Helm, run_job: Callable[..., JobRun], control_plane: ControlPlane, namespace: str, kubelet: Kubelet
) -> None:
    helm.install("probe", CHARTS / "probe-job", namespace, values={"exitCode": 3, "secretValue": "pa55"})
    run = run_job("probe", namespace)
    assert run.exit_code == 3, run.describe()
    assert run.reason == "Error"
    assert run.termination_message == "probe finished mode=report exit=3"
    assert "probe: a line on stderr" in run.container("probe").stderr
    facts = _probe_facts(run.output)

    # identity and secret volume (mode 0440, group = fsGroup, only the listed item)
    assert (facts["uid"], facts["gid"]) == (65532, 65532)
    assert facts["auth_mode"] == "0o440"
    assert facts["auth_content"].startswith('{"auths"')
    assert facts["auth_dir"] == ["config.json"]
    if os.geteuid() == 0 and run.sandbox in ("bwrap", "podman"):
        assert facts["auth_gid"] == 65532
    # env: secretKeyRef, configMapKeyRef, fieldRef, $(VAR) expansion and $$ escape
    env = facts["env"]
    assert env["SECRET_PASSWORD"] == "pa55"
    assert env["GREETING"] == "hello"
    assert env["POD_NAMESPACE"] == namespace
    assert env["POD_NAME"] == run.pod_name
    assert env["COMBINED"] == f"hello@{namespace} $(ESCAPED) $(UNDEFINED)"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == str(control_plane.port)
    # in-cluster config: the SA's real token works, and RBAC limits it
    assert facts["sa_files"] == ["ca.crt", "namespace", "token"]
    assert facts["sa_namespace"] == namespace
    assert facts["api"] == {"create_configmap": 201, "create_secret": 403}
    written = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/probe-result")
    assert written["data"] == {"written-by": "probe"}
    managers = {f["manager"] for f in written["metadata"].get("managedFields", [])}
    assert managers, "the API server records who wrote the ConfigMap"
    # the pod status the kubelet reports
    pod = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods/{run.pod_name}")
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["message"] == "probe finished mode=report exit=3"
    assert pod["metadata"]["ownerReferences"][0]["name"] == run.job_name

    if run.sandbox == "podman":
        # the pod's command replaces the image's ENTRYPOINT, tini included: PID 1
        assert facts["pid"] == 1
        assert pod["status"]["containerStatuses"][0]["imageID"] == kubelet.image_id
    if run.sandbox == "bwrap":
        assert facts["pid"] == 2  # the child of the image's init (tini), as in the real image
    if run.sandbox in ("bwrap", "podman"):
        assert facts["hostname"] == run.pod_name
        assert facts["write_root"] == "EROFS"  # readOnlyRootFilesystem
        assert facts["write_tmp"] == "ok"  # the emptyDir
        assert facts["write_auth"] == "EROFS"  # secret volumes are read-only


def test_kubelet_reports_a_missing_secret_key_as_create_container_config_error(
    helm: Helm, run_job: Callable[..., JobRun], control_plane: ControlPlane, namespace: str
) -> None:
    missing = [{"name": "NOPE", "valueFrom": {"secretKeyRef": {"name": "probe-secret", "key": "absent"}}}]
    helm.install("probe", CHARTS / "probe-job", namespace, values={"extraEnv": missing})
    run = run_job("probe", namespace)
    assert run.exit_code is None
    assert run.reason.startswith("CreateContainerConfigError")
    assert "absent" in run.reason
    assert run.output == ""
    pod = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods/{run.pod_name}")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


def test_kubelet_falls_back_to_the_log_tail_for_the_termination_message(
    helm: Helm, run_job: Callable[..., JobRun], namespace: str
) -> None:
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={
            "mode": "exit",
            "exitCode": 7,
            "writeTerminationMessage": False,
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
    )
    run = run_job("probe", namespace)
    assert run.exit_code == 7, run.describe()
    assert run.termination_message.strip() == "probe: last words before exit 7"


def test_kubelet_delivers_sigterm_to_the_container_process(
    helm: Helm, run_job: Callable[..., JobRun], namespace: str
) -> None:
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={"mode": "wait-for-sigterm", "terminationGracePeriodSeconds": 10},
    )
    run = run_job("probe", namespace, terminate_when=lambda line: "waiting for SIGTERM" in line)
    assert run.exit_code == 143, run.describe()
    assert "probe: got signal 15" in run.output
    assert "no signal arrived" not in run.output
    # the pod was deleted through the API; the kubelet saw it and used its grace period
    assert run.deletion is not None
    assert (run.deletion.grace_seconds, run.deletion.sigkill, run.deletion.disruption) == (10, False, "")


@pytest.mark.parametrize(
    ("image_init", "exit_code"),
    [
        (True, 143),  # under tini the process is an ordinary child: SIGTERM's default action kills it
        (False, 137),  # as PID 1 without a handler SIGTERM is ignored; SIGKILL after the grace period
    ],
)
def test_kubelet_sigterm_without_a_handler_depends_on_the_image_init(
    helm: Helm, make_kubelet: Callable[..., Kubelet], namespace: str, image_init: bool, exit_code: int
) -> None:
    kubelet = make_kubelet(image_init=image_init, sandbox="bwrap")  # image_init is the fallback's knob
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={"mode": "wait-without-handler", "terminationGracePeriodSeconds": 1},
    )
    started = time.monotonic()
    run = kubelet.run_job("probe", namespace, terminate_when=lambda line: "waiting for SIGTERM" in line)
    assert run.exit_code == exit_code, run.describe()
    assert "no signal arrived" not in run.output
    assert time.monotonic() - started < 20


def test_kubelet_provides_image_files_and_keeps_the_image_runnable_under_volumes(
    helm: Helm, make_kubelet: Callable[..., Kubelet], namespace: str, tmp_path: Path
) -> None:
    # An emptyDir over the top directory of this checkout (like the chart's /work):
    # the "image" (checkout + Python) must still run, and the volume must be writable.
    top = "/" + REPO_ROOT.parts[1]
    tool = tmp_path / "probe-tool"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "image file ran as $(id -u)" && touch {top}/written && ls -a {top}\n'
        "exec python3 -c \"import yaml, sys; print('python ok', sys.prefix)\"\n"
    )
    tool.chmod(0o755)
    # The fallback's concern: the checkout standing in for the image must survive a
    # volume over it (in podman mode the image is separate from every volume).
    kubelet = make_kubelet(image_files={"/usr/local/bin/probe-tool": tool}, sandbox="bwrap")
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={"command": ["/usr/local/bin/probe-tool"]}
        # The probe chart already mounts an emptyDir at /tmp (a CI clone may live there).
        | (
            {}
            if top == "/tmp"
            else {
                "extraVolumes": [{"name": "shadow", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "shadow", "mountPath": top}],
            }
        ),
    )
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code == 0, run.describe()
    assert "image file ran as 65532" in run.output
    assert "python ok" in run.output
    if run.sandbox == "bwrap":
        listing = run.output.split("image file ran as 65532", 1)[1]
        assert "written" in listing  # the volume, not the host directory
        assert not Path(top, "written").exists()


@pytest.mark.parametrize(
    "args_expected",
    [
        ([], ["run"]),  # no command, no args: ENTRYPOINT + CMD
        (["plan", "--format=$(POD_NAMESPACE)"], ["plan", "--format={ns}"]),  # args replace CMD, expanded
    ],
)
def test_kubelet_runs_the_image_entrypoint_with_cmd_or_args(
    helm: Helm,
    make_kubelet: Callable[..., Kubelet],
    namespace: str,
    tmp_path: Path,
    args_expected: tuple[list[str], list[str]],
) -> None:
    args, expected = args_expected
    entrypoint = tmp_path / "entrypoint"
    entrypoint.write_text('#!/bin/sh\necho "argv: $*"\necho "cwd: $(pwd) home: $HOME"\n')
    entrypoint.chmod(0o755)
    kubelet = make_kubelet(commands={"aicr-runner": entrypoint}, image_files={str(entrypoint): entrypoint})
    if kubelet.sandbox == "podman":  # the image's own aicr-runner, replaced by the probe (tini stays PID 1)
        kubelet = make_kubelet(image_files={"/opt/venv/bin/aicr-runner": entrypoint})
    helm.install("probe", CHARTS / "probe-job", namespace, values={"imageEntrypoint": True, "args": args})
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code == 0, run.describe()
    assert f"argv: {' '.join(expected).format(ns=namespace)}" in run.output
    assert "cwd: /work home: /home/aicr" in run.output  # the image's WORKDIR and ENV


def test_aicr_kubelet_image_carries_the_fake_aicr(helm: Helm, aicr_kubelet: Kubelet, namespace: str) -> None:
    helm.install("probe", CHARTS / "probe-job", namespace, values={"command": [FAKE_AICR_PATH, "--version"]})
    run = aicr_kubelet.run_job("probe", namespace)
    assert run.exit_code == 0, run.describe()
    assert run.output.startswith("aicr version 1.2.0 ")


def test_dockerconfig_secret_round_trips(control_plane: ControlPlane, registry: Registry, namespace: str) -> None:
    control_plane.create_dockerconfig_secret(namespace, "pack-cred", registry.dockerconfigjson())
    secret = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/secrets/pack-cred")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    stored = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    auth = base64.b64decode(stored["auths"][registry.host]["auth"]).decode()
    assert auth == f"{registry.username}:{registry.password}"
    assert control_plane.configmap(namespace, "absent") is None
    assert control_plane.configmap(namespace, "kube-root-ca.crt") is not None


def test_rewrite_fallback_runs_the_pod_without_a_sandbox(
    helm: Helm, make_kubelet: Callable[..., Kubelet], namespace: str
) -> None:
    kubelet = make_kubelet(sandbox="rewrite")
    helm.install("probe", CHARTS / "probe-job", namespace, values={"exitCode": 4, "probeWriteRoot": False})
    run = kubelet.run_job("probe", namespace)
    assert run.sandbox == "rewrite"
    assert run.exit_code == 4, run.describe()
    assert run.termination_message == "probe finished mode=report exit=4"
    facts = _probe_facts(run.output)
    # mount paths in env values point at the host directories backing the volumes
    pod_dir = kubelet.workdir / "pods" / run.pod_name
    assert facts["auth_file"] == str(pod_dir / "volumes" / "auth" / "config.json")
    assert facts["auth_content"].startswith('{"auths"')
    assert facts["write_tmp"] == "ok"
    assert (pod_dir / "volumes" / "work" / "probe-write").read_text() == "x"
    # no in-cluster files, but the ServiceAccount's identity through KUBECONFIG
    assert facts["sa_files"] is None
    assert facts["api"] == {"create_configmap": 201, "create_secret": 403}


_FAIL_FAST = {
    "rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "probe", "operator": "In", "values": [2, 4]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    ]
}


def _job(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return control_plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")


@pytest.mark.parametrize(
    ("exit_code", "expected"),
    [
        (0, ("Complete", "CompletionsReached", 1)),
        (4, ("Failed", "PodFailurePolicy", 1)),  # deterministic failure: no retry
        (9, ("Failed", "BackoffLimitExceeded", 2)),  # counted: backoffLimit 1 allows 2 pods
    ],
)
def test_the_real_job_controller_follows_backoff_limit_and_pod_failure_policy(
    helm: Helm, kubelet: Kubelet, namespace: str, exit_code: int, expected: tuple[str, str, int]
) -> None:
    status, reason, pods = expected
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={"mode": "exit", "exitCode": exit_code, "backoffLimit": 1, "podFailurePolicy": _FAIL_FAST},
    )
    outcome = kubelet.run_job_to_completion("probe", namespace)
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == (status, reason, pods), outcome.describe()
    assert {a.exit_code for a in outcome.attempts} == {exit_code}
    assert len({a.pod_name for a in outcome.attempts}) == pods  # a fresh pod per attempt
    job = _job(kubelet.plane, namespace, "probe-probe")
    counted = job["status"].get("failed", 0), job["status"].get("succeeded", 0)
    assert counted == ((0, 1) if exit_code == 0 else (pods, 0))
    for run in outcome.attempts:  # the controller's pods, bound to the stand-in's Node
        owner = run.pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "probe-probe", job["metadata"]["uid"])
        assert run.pod["spec"]["nodeName"] == "e2e-node"


def test_an_evicted_pod_does_not_count_against_the_backoff_limit(
    helm: Helm, kubelet: Kubelet, control_plane: ControlPlane, namespace: str
) -> None:
    helm.install(
        "probe",
        CHARTS / "probe-job",
        namespace,
        values={
            "mode": "wait-for-sigterm",
            "terminationGracePeriodSeconds": 5,
            "backoffLimit": 0,
            "podFailurePolicy": _FAIL_FAST,
        },
    )

    def waiting(line: str) -> bool:
        return "waiting for SIGTERM" in line

    evicted = kubelet.run_job("probe", namespace, terminate_by="evict", terminate_when=waiting)
    assert evicted.exit_code == 143, evicted.describe()
    assert evicted.deletion is not None
    assert evicted.deletion.disruption == "EvictionByEvictionAPI"
    # backoffLimit 0, yet the Job controller replaces the evicted pod...
    deleted = kubelet.run_job("probe", namespace, terminate_by="delete", terminate_when=waiting)
    assert deleted.pod_name != evicted.pod_name
    assert deleted.deletion is not None
    assert deleted.deletion.disruption == ""
    # ...and the plain deletion is the failure that counts.
    outcome = kubelet.run_job_to_completion("probe", namespace, job_name="probe-probe")
    assert (outcome.status, outcome.reason, outcome.attempts) == ("Failed", "BackoffLimitExceeded", ())
    assert _job(control_plane, namespace, "probe-probe")["status"].get("failed") == 1


def test_the_controller_manager_runs_each_controller_as_its_own_service_account(control_plane: ControlPlane) -> None:
    accounts = {
        sa["metadata"]["name"]
        for sa in control_plane.admin.get("/api/v1/namespaces/kube-system/serviceaccounts")["items"]
    }
    assert {"job-controller", "generic-garbage-collector", "ttl-after-finished-controller"} <= accounts, accounts
    node = control_plane.admin.get("/api/v1/nodes/e2e-node")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]} == {"Ready": "True"}


# -- pure helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("$(A)-$(B)", "a-b"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("cost $5", "cost $5"),
        ("trailing $", "trailing $"),
        ("$$$(A)", "$a"),
        ("", ""),
    ],
)
def test_env_expansion_matches_kubernetes(value: str, expected: str) -> None:
    assert expand(value, {"A": "a"}, {"B": "b"}) == expected


def test_rewrite_paths_maps_mount_paths_to_their_host_directories() -> None:
    mapping = {"/tmp": "/host/work", "/data/pack": "/host/pack", "/data": "/host/data"}
    assert rewrite_paths("/data/pack/registry.yaml", mapping) == "/host/pack/registry.yaml"
    assert rewrite_paths("/data/other", mapping) == "/host/data/other"
    assert rewrite_paths("/tmpfoo", mapping) == "/tmpfoo"
    assert rewrite_paths("relative/tmp", mapping) == "relative/tmp"
