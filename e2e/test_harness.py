"""Self-tests of the end-to-end harness: each asserts behaviour of a real
component that the scenarios rely on (and that a broken harness would lose):
the pinned tools, the control plane, the registry and oras, helm, and the real
node (containerd, kubelet, kube-scheduler) with its host changes undone."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Network, ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest

from e2e import tools as tools_module
from e2e.harness import oras
from e2e.harness.apiserver import ControlPlane, start_control_plane
from e2e.harness.helm import Helm
from e2e.harness.kube import KubeError
from e2e.harness.node import NODE_NAME, HostNetwork, Kubelet, RealNode, claim_host_network, start_node
from e2e.harness.node.containerd import shims_of
from e2e.harness.node.host import KUBELET_SYSCTLS, SERVICE_BLOCK, STATE_DIR, HostSetupError
from e2e.harness.node.node import PAUSE_IMAGE
from e2e.harness.pki import CertAuthority
from e2e.harness.procs import wait_for
from e2e.harness.registry import Registry, start_registry
from e2e.node_image import FAKE_AICR_PATH
from e2e.tools import pinned_versions, tool

pytestmark = pytest.mark.e2e

CHARTS = Path(__file__).parent / "fixtures" / "charts"


def _version(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True).stdout


# -- tools ------------------------------------------------------------------------------


def test_pinned_tools_report_their_pinned_versions() -> None:
    pins = pinned_versions()
    kubernetes = pins["KUBERNETES_VERSION"]
    helm_version = _version(tool("helm"), "version", "--short")
    assert helm_version.startswith(pins["HELM_VERSION"] + "+") or helm_version.strip() == pins["HELM_VERSION"]
    helm3 = _version(tool("helm3"), "version", "--short")
    assert helm3.startswith(pins["HELM3_VERSION"] + "+") or helm3.strip() == pins["HELM3_VERSION"]
    assert f"Version:    {pins['ORAS_VERSION'].lstrip('v')}" in _version(tool("oras"), "version")
    assert f"etcd Version: {pins['ETCD_VERSION'].lstrip('v')}" in _version(tool("etcd"), "--version")
    # The control plane and the node: one Kubernetes module and version.
    for name in ("kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler"):
        assert _version(tool(name), "--version").strip() == f"Kubernetes {kubernetes}", name
    assert f"Client Version: {kubernetes}" in _version(tool("kubectl"), "version", "--client")
    # The floor's API server: its own pin, under a name carrying its minor.
    floor = pins["KUBE_APISERVER_FLOOR_VERSION"]
    assert tools_module.floor_apiserver_name() == "kube-apiserver-" + ".".join(floor[1:].split(".")[:2])
    assert _version(tool(tools_module.floor_apiserver_name()), "--version").strip() == f"Kubernetes {floor}"


def test_kubebuilder_assets_win_for_etcd_and_kube_apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("etcd", "kube-apiserver"):
        (tmp_path / name).symlink_to(tool(name))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    tools_module._tool.cache_clear()
    try:
        assert tool("kube-apiserver") == tmp_path / "kube-apiserver"
        assert tool("etcd") == tmp_path / "etcd"
        assert tool("helm") == tools_module.TOOLS_BIN / "helm"
        floor = tools_module.floor_apiserver_name()
        assert tool(floor) == tools_module.TOOLS_BIN / floor, "the assets never stand in for the floor's API server"
    finally:
        tools_module._tool.cache_clear()


# -- API server ---------------------------------------------------------------------------


def test_api_server_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    pinned = pinned_versions()["KUBERNETES_VERSION"]
    version = control_plane.admin.get("/version")
    assert version["gitVersion"] == pinned
    assert pinned.startswith(f"v{version['major']}.{version['minor']}.")


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


def test_the_audit_log_records_each_service_account_request_once_and_not_the_admins(
    control_plane: ControlPlane, namespace: str
) -> None:
    since = control_plane.audit_offset()
    user = f"system:serviceaccount:{namespace}:default"
    client = control_plane.client(control_plane.token(namespace, "default"))
    with pytest.raises(KubeError):
        client.get(f"/api/v1/namespaces/{namespace}/configmaps/audited")
    control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt")

    events = control_plane.audit_events_until_now(since)

    [refused] = [e for e in events if e["user"]["username"] == user]
    assert refused["verb"] == "get"
    assert refused["objectRef"] == {
        "resource": "configmaps",
        "namespace": namespace,
        "name": "audited",
        "apiVersion": "v1",
    }
    assert refused["responseStatus"]["code"] == 403
    assert refused["stage"] == "ResponseComplete"
    assert refused["level"] == "Metadata"
    # Neither the tests' admin nor the controllers (kube-system ServiceAccounts) are logged.
    users = {e["user"]["username"] for e in events}
    assert not {u for u in users if u == "e2e-admin" or u.startswith("system:serviceaccount:kube-system:")}, users


def test_the_controller_manager_runs_each_controller_as_its_own_service_account(control_plane: ControlPlane) -> None:
    accounts = {
        sa["metadata"]["name"]
        for sa in control_plane.admin.get("/api/v1/namespaces/kube-system/serviceaccounts")["items"]
    }
    expected = {"job-controller", "generic-garbage-collector", "ttl-after-finished-controller", "node-controller"}
    assert expected <= accounts, accounts


def test_dockerconfig_secret_round_trips(control_plane: ControlPlane, registry: Registry, namespace: str) -> None:
    control_plane.create_dockerconfig_secret(namespace, "pack-cred", registry.dockerconfigjson())
    secret = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/secrets/pack-cred")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    stored = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    auth = base64.b64decode(stored["auths"][registry.host]["auth"]).decode()
    assert auth == f"{registry.username}:{registry.password}"
    assert control_plane.configmap(namespace, "absent") is None
    assert control_plane.configmap(namespace, "kube-root-ca.crt") is not None


# -- registry + oras ----------------------------------------------------------------------


def test_registry_rejects_wrong_credentials_and_accepts_right_ones(registry: Registry, pod_host: str) -> None:
    assert registry.host.startswith(f"{pod_host}:")  # where the pods reach it
    assert not registry.anonymous
    assert registry.get("/v2/")[0] == 401
    assert registry.get("/v2/", auth=(registry.username, registry.password + "x"))[0] == 401
    assert registry.get("/v2/", auth=("intruder", registry.password))[0] == 401
    assert registry.get("/v2/", auth=(registry.username, registry.password))[0] == 200


def test_an_anonymous_registry_answers_without_a_login_and_has_none_to_write(tmp_path: Path) -> None:
    anonymous = start_registry(tmp_path / "anonymous", anonymous=True)
    try:
        assert anonymous.anonymous
        assert anonymous.get("/v2/")[0] == 200
        for write in (anonymous.docker_config, anonymous.dockerconfigjson):
            with pytest.raises(ValueError, match="is anonymous: it has no login to write"):
                write()
        with pytest.raises(ValueError, match="is anonymous"):
            anonymous.write_docker_config(tmp_path / "config.json")
        assert not (tmp_path / "config.json").exists()
    finally:
        anonymous.process.stop()


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
    assert cm["data"]["kubeVersion"] == pinned_versions()["KUBERNETES_VERSION"]  # .Capabilities from the live server
    helm.uninstall("greeter", namespace)
    assert helm.list_releases(namespace) == []
    assert not control_plane.admin.exists(f"/api/v1/namespaces/{namespace}/configmaps/greeter-hello")


# -- the node -------------------------------------------------------------------------------


def test_the_node_is_ready_untainted_and_runs_the_pinned_kubelet(
    node: RealNode, host_network: HostNetwork, control_plane: ControlPlane
) -> None:
    state = control_plane.admin.get(f"/api/v1/nodes/{NODE_NAME}")
    conditions = {c["type"]: c["status"] for c in state["status"]["conditions"]}
    assert conditions == {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}
    assert not state["spec"].get("taints"), state["spec"]
    assert not state["spec"].get("unschedulable")
    assert {"type": "InternalIP", "address": host_network.gateway} in state["status"]["addresses"]
    info = state["status"]["nodeInfo"]
    assert info["kubeletVersion"] == pinned_versions()["KUBERNETES_VERSION"]
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert all(node.process(name).alive() for name in ("kubelet", "kube-scheduler"))
    assert node.runtime.process.alive()
    assert 0 < node.startup_seconds < 120


# -- pods on the node -----------------------------------------------------------------------


def _probe_facts(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("PROBE "):
            return dict(json.loads(line.removeprefix("PROBE ")))
    raise AssertionError(f"no PROBE line in output:\n{output}")


def _probe(helm: Helm, kubelet: Kubelet, namespace: str, **values: Any) -> None:
    """Install the probe chart with ``values``, its pods running ``kubelet``'s image."""
    helm.install("probe", CHARTS / "probe-job", namespace, values={**kubelet.image_values(), **values})


def _kubectl(plane: ControlPlane, *args: str) -> str:
    proc = subprocess.run(
        [str(tool("kubectl")), f"--kubeconfig={plane.kubeconfig}", *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)} (exit {proc.returncode}): {proc.stderr}"
    return proc.stdout


def test_a_job_pod_runs_with_its_volumes_env_identity_and_reaches_the_api_server_and_the_registry(
    *,
    helm: Helm,
    kubelet: Kubelet,
    control_plane: ControlPlane,
    registry: Registry,
    host_network: HostNetwork,
    namespace: str,
) -> None:
    reach = [
        {"name": "REGISTRY_URL", "value": registry.url},
        {"name": "REGISTRY_CREDENTIALS", "value": f"{registry.username}:{registry.password}"},
    ]
    _probe(helm, kubelet, namespace, exitCode=3, secretValue="pa55", extraEnv=reach)
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code == 3, run.describe()
    assert run.reason == "Error"
    assert run.termination_message == "probe finished mode=report exit=3"
    assert "probe: a line on stderr" in run.container("probe").stderr
    assert "probe: a line on stderr" not in run.container("probe").stdout
    facts = _probe_facts(run.output)

    # identity, and the secret volume (mode 0440, group = fsGroup, only the listed item)
    assert (facts["uid"], facts["gid"]) == (65532, 65532)
    assert 65532 in facts["groups"]
    assert (facts["auth_mode"], facts["auth_gid"]) == ("0o440", 65532)
    assert facts["auth_content"].startswith('{"auths"')
    assert facts["auth_dir"] == ["config.json"]
    # the container: the pod's command replaces the image's ENTRYPOINT (tini), so
    # the probe is PID 1; the hostname is the pod's; only the volumes are writable
    assert facts["pid"] == 1
    assert facts["hostname"] == run.pod_name
    assert (facts["write_root"], facts["write_tmp"], facts["write_auth"]) == ("EROFS", "ok", "EROFS")
    # env: secretKeyRef, configMapKeyRef, fieldRef, $(VAR) expansion and the $$ escape
    env = facts["env"]
    assert (env["SECRET_PASSWORD"], env["GREETING"]) == ("pa55", "hello")
    assert (env["POD_NAMESPACE"], env["POD_NAME"]) == (namespace, run.pod_name)
    assert env["COMBINED"] == f"hello@{namespace} $(ESCAPED) $(UNDEFINED)"
    # in-cluster config: the `kubernetes` Service, DNATed by the host to the API
    # server; the ServiceAccount's token works and RBAC limits it
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (host_network.service_ip, "443")
    assert facts["sa_files"] == ["ca.crt", "namespace", "token"]
    assert facts["sa_namespace"] == namespace
    assert facts["api"] == {"create_configmap": 201, "create_secret": 403}
    written = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/probe-result")
    assert written["data"] == {"written-by": "probe"}
    # the registry on pod_host, which demands its credentials from pods too
    assert facts["registry"] == {"anonymous": 401, "authenticated": 200}

    # the pod status the kubelet reported, and the pod on the node's network
    pod = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods/{run.pod_name}")
    assert pod["status"]["phase"] == "Failed"
    assert ip_address(pod["status"]["podIP"]) in ip_network(host_network.subnet)
    assert pod["status"]["hostIP"] == host_network.gateway
    assert pod["spec"]["nodeName"] == NODE_NAME
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["message"]) == (3, "probe finished mode=report exit=3")
    assert pod["metadata"]["ownerReferences"][0]["name"] == run.job_name
    # the API server reaches the kubelet for the logs (kubectl logs)
    # (both streams; their order across streams is the order containerd read them in)
    logs = _kubectl(control_plane, "logs", "-n", namespace, run.pod_name).splitlines()
    assert sorted(line.split(" ", 1)[0] for line in logs) == ["PROBE", "probe:"], logs


# -- the Service range: redirected for pods and this host, fenced for everything else ---------


def test_the_node_proved_its_service_range_from_this_host_before_any_pod_ran(
    node: RealNode, host_network: HostNetwork
) -> None:
    """start_node checks from this host's own network namespace (a hostNetwork
    pod's) before the kubelet starts: the `kubernetes` Service address is this
    session's API server (TLS verified with its CA for that address), other
    addresses of the range are refused, and nothing to the range went out."""
    assert ip_address(host_network.service_ip) in ip_network(host_network.service_cidr)
    assert IPv4Network(host_network.service_cidr).subnet_of(IPv4Network(SERVICE_BLOCK))
    check = node.isolation
    assert check is not None
    assert check.api_version == pinned_versions()["KUBERNETES_VERSION"]
    assert set(check.refused.values()) == {"EHOSTUNREACH"}, check
    assert check.after["redirected"] > check.before["redirected"]
    assert check.after["service-range"] - check.before["service-range"] >= len(check.refused)
    assert (check.before["escaped"], check.after["escaped"]) == (0, 0)
    # The `kubernetes` Service the kubelet injects is the redirected address.
    service = node.plane.admin.get("/api/v1/namespaces/default/services/kubernetes")
    assert service["spec"]["clusterIP"] == host_network.service_ip


def _fenced(host_network: HostNetwork) -> list[str]:
    """Two addresses of the range that are not the redirect (safe to send to: the
    slot's rules refuse them before they could leave)."""
    return [f"{host_network.service_ip}:80", f"{ip_address(host_network.service_ip) + 2}:443"]


@pytest.mark.parametrize("host_net", [True, False], ids=["hostNetwork", "pod-network"])
def test_a_pod_reaches_the_api_server_through_the_service_address_and_nothing_else_leaves(
    *, helm: Helm, kubelet: Kubelet, host_network: HostNetwork, namespace: str, host_net: bool
) -> None:
    """A hostNetwork pod (in this host's network namespace, as aicr's privileged
    snapshot agent) and a pod on the bridge both reach the test API server at the
    `kubernetes` Service address; their packets to the range's other addresses are
    refused (a hostNetwork pod's by the range's rule on this host's output, a
    bridge pod's by the bridge's: it forwards nothing off the bridge), and the
    last rule on the way out never saw a packet to the range."""
    before = host_network.counters()
    connect = {"name": "PROBE_CONNECT", "value": ",".join(_fenced(host_network))}
    _probe(helm, kubelet, namespace, hostNetwork=host_net, extraEnv=[connect])
    run = kubelet.run_job("probe", namespace)
    after = host_network.counters()
    assert run.exit_code == 0, run.describe()
    facts = _probe_facts(run.output)
    assert (facts["env"]["KUBERNETES_SERVICE_HOST"], facts["env"]["KUBERNETES_SERVICE_PORT"]) == (
        host_network.service_ip,
        "443",
    )
    assert facts["api"] == {"create_configmap": 201, "create_secret": 403}  # the in-cluster config works
    assert facts["connect"] == dict.fromkeys(_fenced(host_network), "EHOSTUNREACH"), facts["connect"]
    pod_ip = ip_address(run.pod["status"]["podIP"])
    # hostNetwork: the node's IP (the bridge's address); else an address of its own on the bridge
    assert (pod_ip == ip_address(host_network.gateway)) is host_net
    assert pod_ip in ip_network(host_network.subnet)
    refused_by, untouched = ("service-range", "bridge-egress") if host_net else ("bridge-egress", "service-range")
    assert after[refused_by] - before[refused_by] >= 2, (before, after)
    assert after[untouched] == before[untouched], (before, after)
    assert after["redirected"] > before["redirected"]
    assert after["escaped"] == 0


def test_the_start_up_check_fails_closed_on_a_foreign_tls_server_and_on_a_missing_refusal(
    control_plane: ControlPlane, host_network: HostNetwork, tmp_path: Path
) -> None:
    """On a spare slot (no node, no pod), its rules in place: a redirect that
    reaches a TLS server this cluster's CA did not sign (what 10.96.0.1:443 once
    reached from this host), or one whose certificate does not name the Service
    address, fails the check; so does a range whose refusal is taken away, and
    the last rule on the way out drops what would have left, and counts it. A
    node whose API server has another slot's range is refused before it starts."""
    foreign_ca = tmp_path / "foreign-ca.crt"
    foreign_ca.write_bytes(CertAuthority().cert_pem)
    spare = claim_host_network()
    try:
        assert spare.slot != host_network.slot
        # Compared with what was there: a killed earlier session can leave the slot's
        # cgroup folders behind (the next claimant's teardown removes them).
        cgroups_before = _cgroup_roots(spare)
        with pytest.raises(HostSetupError, match=f"is not slot {spare.slot}'s {spare.service_cidr}"):
            start_node(control_plane, spare, tmp_path / "node")  # a plane in another slot's range
        assert _cgroup_roots(spare) == cgroups_before, "refused before any host change"
        spare.route_service(control_plane.port)  # the session's API server: not spare's Service address
        foreign = spare.probe_isolation(foreign_ca)
        assert "CERTIFICATE_VERIFY_FAILED" in foreign.api_error, foreign
        assert foreign.problems() == [f"the kubernetes Service from this host: {foreign.api_error}"]
        with pytest.raises(HostSetupError, match="CERTIFICATE_VERIFY_FAILED"):
            spare.check_isolation(foreign_ca)
        misnamed = spare.probe_isolation(control_plane.ca_file)
        assert "IP address mismatch" in misnamed.api_error, misnamed
        # This host's output to the range no longer refused: only the last rule stands.
        _run("iptables", "-t", "filter", "-D", "OUTPUT", "-d", spare.service_cidr, "-j", spare.chain)
        leaking = spare.probe_isolation(foreign_ca)
        assert set(leaking.refused.values()) == {"timeout"}, leaking
        assert leaking.gained("escaped") >= 2, leaking
        assert any("got as far as the way out (dropped there)" in p for p in leaking.problems()), leaking.problems()
    finally:
        spare.teardown()
    assert not any(spare.chain in rule for rules in HostState.read().iptables.values() for rule in rules)


def test_a_missing_secret_key_is_create_container_config_error(
    helm: Helm, kubelet: Kubelet, control_plane: ControlPlane, namespace: str
) -> None:
    missing = [{"name": "NOPE", "valueFrom": {"secretKeyRef": {"name": "probe-secret", "key": "absent"}}}]
    _probe(helm, kubelet, namespace, extraEnv=missing)
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code is None
    assert run.reason.startswith("CreateContainerConfigError"), run.reason
    assert "absent" in run.reason
    assert run.output == ""
    pod = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods/{run.pod_name}")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


def test_the_termination_message_falls_back_to_the_log_tail(helm: Helm, kubelet: Kubelet, namespace: str) -> None:
    _probe(
        helm,
        kubelet,
        namespace,
        mode="exit",
        exitCode=7,
        writeTerminationMessage=False,
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code == 7, run.describe()
    assert run.termination_message.strip() == "probe: last words before exit 7"


def test_a_deleted_pod_gets_sigterm_and_its_grace_period(helm: Helm, kubelet: Kubelet, namespace: str) -> None:
    _probe(helm, kubelet, namespace, mode="wait-for-sigterm", terminationGracePeriodSeconds=10)
    run = kubelet.run_job("probe", namespace, terminate_when=lambda line: "waiting for SIGTERM" in line)
    assert run.exit_code == 143, run.describe()
    assert "probe: got signal 15 as pid 1" in run.output
    assert "no signal arrived" not in run.output
    # the pod was deleted through the API; the kubelet saw it and used its grace period
    assert run.deletion is not None
    assert (run.deletion.grace_seconds, run.deletion.sigkill, run.deletion.disruption) == (10, False, "")
    assert run.deletion.exited_after_sigterm is not None
    assert run.deletion.exited_after_sigterm < 10


def test_pid_1_without_a_sigterm_handler_is_killed_when_the_grace_period_ends(
    helm: Helm, kubelet: Kubelet, namespace: str
) -> None:
    # The probe replaces the image's ENTRYPOINT (tini): it is PID 1, and the kernel
    # drops a signal PID 1 has no handler for. SIGKILL comes after the grace period.
    _probe(helm, kubelet, namespace, mode="wait-without-handler", terminationGracePeriodSeconds=2)
    run = kubelet.run_job("probe", namespace, terminate_when=lambda line: "waiting for SIGTERM" in line)
    assert run.exit_code == 137, run.describe()
    assert "no signal arrived" not in run.output
    assert run.deletion is not None
    assert run.deletion.sigkill, run.deletion
    assert run.deletion.exited_after_sigterm is not None
    assert run.deletion.exited_after_sigterm >= 1


def test_a_derived_image_carries_its_files_and_the_pods_empty_dir_is_on_the_node(
    helm: Helm, make_kubelet: Callable[..., Kubelet], control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    # The kubelet tears a pod's emptyDir down once the pod has ended, so the node
    # side is read while the pod waits for the node's reply in the same volume.
    script = tmp_path / "probe-tool"
    script.write_text(
        "#!/bin/sh\n"
        'echo "image file ran as $(id -u), PROBE_FLAVOUR=$PROBE_FLAVOUR"\n'
        "echo from-the-pod > /tmp/written\n"
        "echo 'written; waiting for the node'\n"
        "i=0; while [ ! -f /tmp/reply ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done\n"
        'echo "reply: $(cat /tmp/reply 2>/dev/null || echo none)"\n'
        "exec python3 -c \"import yaml, kubernetes; print('python ok')\"\n"
    )
    script.chmod(0o755)
    kubelet = make_kubelet(image_files={"/usr/local/bin/probe-tool": script}, image_env={"PROBE_FLAVOUR": "derived"})
    _probe(helm, kubelet, namespace, command=["/usr/local/bin/probe-tool"])
    seen_on_node: list[str] = []

    def answer_from_the_node(line: str) -> bool:
        if "waiting for the node" in line:
            [pod] = control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            # /tmp is the probe chart's emptyDir "work": on the node, under the kubelet's root
            volume = kubelet.pod_volume(pod, "work")
            seen_on_node.append((volume / "written").read_text())
            (volume / "reply").write_text("from-the-node\n")
        return False

    run = kubelet.run_job("probe", namespace, terminate_when=answer_from_the_node)
    assert run.exit_code == 0, run.describe()
    assert "image file ran as 65532, PROBE_FLAVOUR=derived" in run.output
    assert "python ok" in run.output
    assert run.pod["status"]["containerStatuses"][0]["image"].endswith(kubelet.image.rpartition("/")[2])
    assert seen_on_node == ["from-the-pod\n"]
    assert "reply: from-the-node" in run.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "run"),  # no command, no args: ENTRYPOINT + CMD
        (["plan", "--format=$(POD_NAMESPACE)"], "plan --format={ns}"),  # args replace CMD, expanded
    ],
)
def test_the_image_entrypoint_runs_with_its_cmd_or_the_pods_args(
    *,
    helm: Helm,
    make_kubelet: Callable[..., Kubelet],
    namespace: str,
    tmp_path: Path,
    args: list[str],
    expected: str,
) -> None:
    entrypoint = tmp_path / "entrypoint"
    entrypoint.write_text('#!/bin/sh\necho "argv: $*"\necho "cwd: $(pwd) home: $HOME ppid: $PPID"\n')
    entrypoint.chmod(0o755)
    # The image's own aicr-runner, replaced by the probe: tini stays PID 1.
    kubelet = make_kubelet(image_files={"/opt/venv/bin/aicr-runner": entrypoint})
    _probe(helm, kubelet, namespace, imageEntrypoint=True, args=args)
    run = kubelet.run_job("probe", namespace)
    assert run.exit_code == 0, run.describe()
    assert f"argv: {expected.format(ns=namespace)}" in run.output
    assert "cwd: /work home: /home/aicr ppid: 1" in run.output  # the image's WORKDIR and ENV, under tini


def test_the_e2e_image_carries_the_fake_aicr(helm: Helm, aicr_kubelet: Kubelet, namespace: str) -> None:
    _probe(helm, aicr_kubelet, namespace, command=[FAKE_AICR_PATH, "--version"])
    run = aicr_kubelet.run_job("probe", namespace)
    assert run.exit_code == 0, run.describe()
    assert run.output.startswith("aicr version 1.2.0 ")


# -- the Job controller with the node ---------------------------------------------------------

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
def test_the_job_controller_follows_backoff_limit_and_pod_failure_policy(
    helm: Helm, kubelet: Kubelet, namespace: str, exit_code: int, expected: tuple[str, str, int]
) -> None:
    status, reason, pods = expected
    _probe(helm, kubelet, namespace, mode="exit", exitCode=exit_code, backoffLimit=1, podFailurePolicy=_FAIL_FAST)
    outcome = kubelet.run_job_to_completion("probe", namespace)
    assert (outcome.status, outcome.reason, len(outcome.attempts)) == (status, reason, pods), outcome.describe()
    assert {a.exit_code for a in outcome.attempts} == {exit_code}
    assert len({a.pod_name for a in outcome.attempts}) == pods  # a fresh pod per attempt
    job = _job(kubelet.plane, namespace, "probe-probe")
    counted = job["status"].get("failed", 0), job["status"].get("succeeded", 0)
    assert counted == ((0, 1) if exit_code == 0 else (pods, 0))
    for run in outcome.attempts:  # the controller's pods, bound by kube-scheduler to the node
        owner = run.pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "probe-probe", job["metadata"]["uid"])
        assert run.pod["spec"]["nodeName"] == NODE_NAME


def test_an_evicted_pod_does_not_count_against_the_backoff_limit(
    helm: Helm, kubelet: Kubelet, control_plane: ControlPlane, namespace: str
) -> None:
    _probe(
        helm,
        kubelet,
        namespace,
        mode="wait-for-sigterm",
        terminationGracePeriodSeconds=5,
        backoffLimit=0,
        podFailurePolicy=_FAIL_FAST,
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


# -- the host: a second node on another slot, and its teardown ---------------------------------

#: What the kubelet sets at start-up (pkg/kubelet/cm: setupKernelTunables).
KUBELET_SYSCTL_VALUES = {
    "vm.overcommit_memory": "1",
    "vm.panic_on_oom": "0",
    "kernel.panic": "10",
    "kernel.panic_on_oops": "1",
    "kernel.keys.root_maxkeys": "1000000",
    "kernel.keys.root_maxbytes": "25000000",
}
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")


def _sysctl(name: str) -> str:
    return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()


def _others(text: str, mine: set[int]) -> bool:
    """Does ``text`` name another session's slot, or podman's own network?"""
    slots = {int(s) for s in re.findall(r"(?:AICR-E2E-|aicre2e)(\d+)", text)}
    return bool(slots - mine) or any(marker in text for marker in ("CNI-", "cni-podman", "NETAVARK", "netavark"))


@dataclass(frozen=True)
class HostState:
    """What the e2e nodes change on the host (host.py), read from the host itself."""

    iptables: dict[str, list[str]]  # table -> `iptables -t <table> -S`
    sysctls: dict[str, str]
    links: dict[str, str]  # interface -> its bridge ("" if none)
    bridge_addresses: dict[str, list[str]]  # e2e bridge -> its IPv4 addresses

    @classmethod
    def read(cls) -> HostState:
        iptables = {table: _run("iptables", "-t", table, "-S").splitlines() for table in IPTABLES_TABLES}
        links: dict[str, str] = {}
        for line in _run("ip", "-o", "link", "show").splitlines():
            name = line.split(":", 2)[1].strip().split("@", 1)[0]
            master = re.search(r" master (\S+)", line)
            links[name] = master.group(1) if master else ""
        addresses = {
            name: re.findall(r"inet (\S+)", _run("ip", "-o", "-4", "addr", "show", "dev", name))
            for name in links
            if name.startswith("aicre2e")
        }
        sysctls = {name: _sysctl(name) for name in (*KUBELET_SYSCTLS, "net.ipv4.ip_forward")}
        return cls(iptables, sysctls, links, addresses)

    def comparable(self, mine: set[int]) -> dict[str, Any]:
        """Everything but other sessions' slots, podman's network and pod
        interfaces (veths, which come and go with the pods of the session's node)."""
        return {
            "iptables": {t: [r for r in rules if not _others(r, mine)] for t, rules in self.iptables.items()},
            "sysctls": self.sysctls,
            "links": {
                n: m for n, m in self.links.items() if not _others(f"{n} {m}", mine) and not n.startswith("veth")
            },
            "bridges": {n: a for n, a in self.bridge_addresses.items() if not _others(n, mine)},
        }


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _cgroup_roots(host: HostNetwork) -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"*/{host.cgroup_root.lstrip('/')}"))


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]


def _run_pause_pod(plane: ControlPlane) -> dict[str, Any]:
    """A pod of the sandbox image on the second node, once it runs."""
    plane.admin.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pause"},
            "spec": {
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
            },
        },
    )

    def running() -> dict[str, Any] | None:
        pod = plane.admin.get("/api/v1/namespaces/default/pods/pause")
        return pod if pod["status"].get("phase") == "Running" and pod["status"].get("podIP") else None

    return wait_for(running, timeout=120, what="the pause pod Running on the second node", interval=0.1)


def test_a_second_node_on_another_slot_is_undone_by_teardown(
    node: RealNode, host_network: HostNetwork, tmp_path: Path
) -> None:
    """A second node (its own control plane, slot, bridge and pod subnet) runs a
    pod beside the session's; once it is stopped and its slot torn down, the host
    is as before: bridge, iptables chains and their jumps, cgroup root, mounts
    and processes gone. The session's node still runs, so the kubelet's sysctls
    and KUBE-* chains stay (the last node of the machine restores those) and the
    recorded originals are kept for it."""
    before = HostState.read()
    recorded = (STATE_DIR / "sysctls.json").read_text()
    second = claim_host_network()
    try:
        plane = start_control_plane(tmp_path / "plane", service_cidr=second.service_cidr)
        try:
            assert second.slot != host_network.slot
            assert (second.bridge, second.subnet, second.chain) != (
                host_network.bridge,
                host_network.subnet,
                host_network.chain,
            )
            other = start_node(plane, second, tmp_path / "node")
            try:
                pod = _run_pause_pod(plane)
                during = HostState.read()
                veths = [n for n, master in during.links.items() if master == second.bridge]
                mounted = _mounts_under(other.workdir)
                processes = [*other.processes, other.runtime.process]
            finally:
                other.stop()
            assert not _cgroup_roots(second), "RealNode.stop removes the kubelet's cgroups"
        finally:
            plane.stop()
    finally:
        second.teardown()
    after = HostState.read()

    # While it ran: its own bridge and subnet, its pod on them, its DNAT rule.
    assert ip_address(pod["status"]["podIP"]) in ip_network(second.subnet)
    assert ip_address(pod["status"]["podIP"]) not in ip_network(host_network.subnet)
    assert during.bridge_addresses[second.bridge] == [f"{second.gateway}/24"]
    assert during.bridge_addresses[host_network.bridge] == [f"{host_network.gateway}/24"]
    assert len(veths) == 1, during.links
    assert second.service_cidr != host_network.service_cidr
    nat, filter_, mangle = (during.iptables[t] for t in ("nat", "filter", "mangle"))
    assert f"-A PREROUTING -i {second.bridge} -j {second.chain}" in nat
    assert f"-A OUTPUT -d {second.service_cidr} -j {second.chain}" in nat
    assert any(f"-d {second.service_ip}/32 -p tcp" in r and "-j DNAT" in r for r in nat if second.chain in r), nat
    for jump in (f"-i {second.bridge}", f"-d {second.service_cidr}"):
        assert f"-A FORWARD {jump} -j {second.chain}" in filter_, filter_
    assert f"-A OUTPUT -d {second.service_cidr} -j {second.chain}" in filter_
    assert f"-A POSTROUTING -d {second.service_cidr} -j {second.chain}" in mangle
    assert other.isolation is not None
    assert other.isolation.after["escaped"] == 0
    assert {name: during.sysctls[name] for name in KUBELET_SYSCTL_VALUES} == KUBELET_SYSCTL_VALUES
    assert mounted, "the pod's volumes and rootfs are mounted under the node's directory"

    # After: nothing of it is left...
    assert second.bridge not in after.links
    assert not set(veths) & set(after.links), "the pod's interface went with its sandbox"
    assert not any(second.chain in r for t in after.iptables.values() for r in t)
    assert not _cgroup_roots(second)
    assert not _mounts_under(other.workdir)
    assert not any(p.alive() for p in processes)
    assert not shims_of(other.runtime.socket)
    # ...and everything else is as it was (the session's slot included).
    mine = {host_network.slot, second.slot}
    assert after.comparable(mine) == before.comparable(mine)
    # The session's node still runs: the kubelet's values stay, the originals are kept.
    assert {name: after.sysctls[name] for name in KUBELET_SYSCTL_VALUES} == KUBELET_SYSCTL_VALUES
    assert (STATE_DIR / "sysctls.json").read_text() == recorded
    assert any(r.startswith("-N KUBE-") for r in after.iptables["filter"])


def test_a_podman_call_that_does_not_end_fails_naming_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every harness podman call has a deadline: a wedged podman (here a stand-in
    process that sleeps) fails its caller instead of holding the e2e run."""
    from e2e.harness import podman as podman_module

    monkeypatch.setattr(podman_module, "PODMAN", ("sh", "-c", "sleep 60", "podman"))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"podman image inspect x did not end within 0.5s"):
        podman_module.podman("image", "inspect", "x", timeout=0.5)
    assert time.monotonic() - started < 30
