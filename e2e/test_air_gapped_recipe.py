"""Air-gapped, on the real stack: the recipe eks/h100/training/ubuntu installed by the
chart's Job, under least privilege, from a mirror that ``aicr-runner mirror`` filled,
with the upstream stopped.

The upstream (``e2e/recipe_upstream.py``) answers under the real names: the chart
repositories of the recipe serve the real component charts (``component-charts/``;
skyhook-operator's pinned v0.14.0 is its v0.13.1 stand-in repackaged under the pinned
version), the registry holds the OCI charts (kai-scheduler, nvsentinel, the runner's
own chart) and every image the mirror lists: the real GPU Operator image
(``e2e/gpu_operator_image.py``), the real deployment validator image
(``e2e/validators.py``), the real kube-state-metrics, node-exporter and
node-feature-discovery images, built from their Go modules (``e2e/program_images.py``),
and ONE stand-in image (labelled) under every other name.
Three images are pinned by digest in skyhook-operator's values; no stand-in can have
those digests, so they are absent upstream and allowed missing.

1. ``aicr-runner mirror --list``, ``--to oci://<mirror>/aicr --hosts-toml`` (twice:
   into an empty registry, then again) and ``--to-archive``, each a real process from
   the worktree's venv with ``validate.enabled`` (the list names the validator), in a
   mount namespace where the upstream names resolve to loopback (no ``--resolve``,
   no ``--plain-http`` for the upstream). The plan inside fetches the real aicr
   v0.11.1 from "github.com".
2. The upstream is stopped. ``--from-archive --to oci://<second mirror>/aicr
   --hosts-toml`` fills a second registry (on the node's bridge address: pods reach
   it): every item lands with the digest the first copy recorded.
3. The chart's Job, run by the node's kubelet from the e2e image, with the values
   ``--from-archive`` printed (``mirror.registry``, ``aicr.releaseRef``),
   ``rbac.clusterAdmin=false`` plus ``EXTRA_RULES`` and validation of the deployment
   phase: the aicr release comes from the second mirror as the OCI artifact, the
   recipe is rewritten, the real deploy.sh (the runner's default flags ``--best-effort
   --no-wait``: stand-in pods never become Ready) installs every chart from the
   mirror, the node's containerd pulls every image through it (the ``--hosts-toml``
   output in its ``config_path``), the real GPU Operator's pod becomes Ready and the
   real ``aicr validate`` runs the real deployment checks against it;
   kube-prometheus-stack's real kube-state-metrics becomes Ready and exports the
   operator pod's readiness, read through its ServiceAccount; its real node-exporter
   becomes Ready on the host's network and exports the node's kernel; the GPU
   Operator's real node-feature-discovery (master, worker, gc) becomes Ready and
   labels the node with what its worker read from the host. The API server's audit
   log shows no request of the installer refused.

The mirror is TLS (deploy.sh gives helm no ``--plain-http`` or CA flag): its CA is
given to the mirror command's helm and oras by ``SSL_CERT_FILE``, to the Job by a
ConfigMap mounted through ``job.extraVolumes`` and named by ``SSL_CERT_FILE`` in
``job.extraEnv``, and to containerd by a ``ca`` line added to each written
``hosts.toml`` (the file names no CA itself).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.gpu_operator_image import OPERATOR_IMAGE, GpuOperatorMissing, gpu_operator_archive, gpu_operator_image
from e2e.harness.apiserver import ControlPlane
from e2e.harness.helm import Helm
from e2e.harness.kube import KubeError
from e2e.harness.node import NODE_NAME, Kubelet, RealNode
from e2e.harness.pki import CertAuthority
from e2e.harness.procs import wait_for
from e2e.harness.registry import Registry
from e2e.program_images import (
    ADAPTER_IMAGE,
    ALERTMANAGER_IMAGE,
    CONFIG_RELOADER_IMAGE,
    KSM_IMAGE,
    KSM_VERSION,
    NFD_IMAGE,
    NODE_EXPORTER_IMAGE,
    PROGRAM_IMAGES,
    PROMETHEUS_IMAGE,
    PROMETHEUS_OPERATOR_IMAGE,
    program_images,
)
from e2e.recipe_upstream import (
    STAND_IN_LABEL,
    ChartHost,
    UpstreamNetwork,
    stand_in_image,
    start_tls_registry,
)
from e2e.scenarios import CHART, RELEASE, RunResults, extra_env
from e2e.test_monitoring import samples
from e2e.test_real_aicr import SNAPSHOT, snapshot_configmap
from e2e.test_real_validators import CHECKS, evidence
from e2e.tools import REPO_ROOT, tool
from e2e.validators import VALIDATOR_IMAGE, ValidatorsMissing, more_controllers, validator_archive, validator_image
from tests.support.installing_doc import documented_extra_rules
from tests.support.podman import PODMAN
from tests.support.real_aicr import RealAicrMissing, component_charts_dir, extract_binary

pytestmark = pytest.mark.e2e

CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
FLAGS = [word for name, value in CRITERIA.items() for word in (f"--{name}", value)]
PREFIX = "aicr"
TAG = "v0.11.1"
#: Not the pinned version: the shared test data's stand-in chart, repackaged under it.
NOT_PINNED = {"skyhook-operator": ("skyhook-operator-v0.13.1.tgz", "v0.14.0")}
COMPONENT_NAMESPACES = ("cert-manager", "monitoring", "skyhook", "gpu-operator", "kai-scheduler", "nvidia-dra-driver",
                        "nvsentinel")  # fmt: skip
#: What the real charts and the recipe's values do here (e2e/README.md): not the mirror's doing.
KNOWN_FAILURES = {
    # A Skyhook object needs skyhook-operator's mutating webhook (failurePolicy Fail), whose pod
    # cannot run (its image is pinned by a digest no stand-in has) and Services have no proxy here.
    "skyhook-customizations": 'failed calling webhook "mutate-skyhook.nvidia.com"',
}
#: The node has 2 CPUs; each of the validator's check pods requests 1. skyhook-operator's
#: manager (its image pinned by a digest no stand-in has: it never runs here) requests 1 in
#: the bundle's values: lowered, so that the check's pod can be scheduled (aicr waits for it).
BUNDLE_ARGS = [
    "--set", "skyhook-operator:controllerManager.manager.resources.requests.cpu=10m",
    # nvsentinel's platform-connectors (a stand-in that restarts) requests 200m: lowered too.
    "--set", "nvsentinel:platformConnector.resources.requests.cpu=10m",
    # The real Prometheus and Alertmanager the operator starts request 500m and 100m: lowered too.
    "--set", "kube-prometheus-stack:prometheus.prometheusSpec.resources.requests.cpu=10m",
    "--set", "kube-prometheus-stack:alertmanager.alertmanagerSpec.resources.requests.cpu=10m",
]  # fmt: skip
#: One image of the list the upstream holds as the stand-in.
STAND_IN = "quay.io/jetstack/cert-manager-controller:v1.17.2"
#: rbac.extraRules: the custom resources the recipe's charts and bundle create at install
#: time, beyond the chart's least-privilege ClusterRole, as docs/installing.md
#: "Permissions" gives them (tests/integration/test_rbac_extra_rules.py: exactly those).
EXTRA_RULES = documented_extra_rules()
#: The pods of the real programs, each Ready on the node: (namespace, label selector).
#: node-feature-discovery is the GPU Operator's subchart, one pod per role.
READY_PODS = {
    "the GPU Operator": ("gpu-operator", "app=gpu-operator"),
    "kube-state-metrics": ("monitoring", "app.kubernetes.io/name=kube-state-metrics"),
    "node-exporter": ("monitoring", "app.kubernetes.io/name=prometheus-node-exporter"),
    "prometheus-operator": ("monitoring", "app=kube-prometheus-stack-operator"),
    "prometheus": ("monitoring", "app.kubernetes.io/name=prometheus"),
    "alertmanager": ("monitoring", "app.kubernetes.io/name=alertmanager"),
    "prometheus-adapter": ("monitoring", "app.kubernetes.io/name=prometheus-adapter"),
    **{f"nfd-{role}": ("gpu-operator", f"app.kubernetes.io/name=node-feature-discovery,role={role}")
       for role in ("master", "worker", "gc")},
}  # fmt: skip
CONTROLLERS = ("deployment-controller", "replicaset-controller", "daemonset-controller", "statefulset-controller",
               "persistentvolume-binder-controller")  # fmt: skip
#: What kube-prometheus-stack's certgen hook Job (kube-webhook-certgen, not built here)
#: creates for its operator: the Secret of the operator's serving certificate.
ADMISSION_SECRET = ("monitoring", "kube-prometheus-admission")
OPERATOR_SERVICE_HOSTS = ["kube-prometheus-operator", "kube-prometheus-operator.monitoring.svc"]
AICR_RUNNER = REPO_ROOT / ".venv" / "bin" / "aicr-runner"


@dataclass
class Upstream:
    charts: ChartHost
    registry: Registry
    network: UpstreamNetwork
    ca: CertAuthority
    refs: list[dict[str, Any]]
    listed: list[dict[str, Any]]
    #: Listed references absent upstream (pinned by a digest no stand-in has).
    missing: list[str]

    def requests(self) -> int:
        return len(self.charts.requests) + len(self.registry.requests())

    def stop(self) -> None:
        self.charts.stop()
        self.registry.process.stop()


def _run(argv: list[str], env: Mapping[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (
        f"{proc.args[:12]} exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


def _env(tmp_path: Path, ca_file: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBERNETES_"))}
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "PATH": f"{REPO_ROOT / '.tools' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            "SSL_CERT_FILE": str(ca_file),
            "AICR_RUNNER_LOG_FORMAT": "json",
            "AICR_RUNNER_AICR__VERSION": TAG,
            "AICR_RUNNER_AICR__ARCH": "amd64",
            # The shared release carries no NVIDIA attestation (tests/support/real_aicr.py).
            "AICR_RUNNER_AICR__PROVENANCE__MODE": "off",
            **extra,
        }
    )
    return env


def _recipe_refs(release: Path, work: Path) -> list[dict[str, Any]]:
    binary = extract_binary(work / "bin", {"AICR_TEST_RELEASES_DIR": str(release.parent)})
    subprocess.run(
        [str(binary), "recipe", *FLAGS, "--output", "recipe.yaml"], cwd=work, check=True, capture_output=True
    )
    return [r for r in yaml.safe_load((work / "recipe.yaml").read_text())["componentRefs"] if r.get("chart")]


def _chart_archive(name: str, version: str, out: Path, helm: Helm) -> Path:
    """The real chart archive; a not-pinned stand-in repackaged under the pinned version."""
    charts = component_charts_dir()
    for folder in (charts, charts / "not-pinned"):  # nvsentinel: not NVIDIA's v1.1.0 (the data's README)
        if (folder / f"{name}-{version}.tgz").is_file():
            return folder / f"{name}-{version}.tgz"
    archive, pinned = NOT_PINNED[name]
    unpacked = out / f"unpacked-{name}"
    with tarfile.open(charts / "not-pinned" / archive) as tar:
        tar.extractall(unpacked, filter="data")
    helm.run("package", str(unpacked / name), "--version", pinned, "--destination", str(out))
    return out / f"{name}-{pinned}.tgz"


def _fill_charts(refs: list[dict[str, Any]], root: Path, local: Path, helm: Helm) -> None:
    """Repository charts under ``<root>/<host>/<path>`` (indexed); every chart in ``local``
    as ``<chart>-<version>.tgz`` too (the OCI ones are pushed once the registry runs)."""
    local.mkdir(parents=True)
    for ref in refs:
        archive = _chart_archive(ref["chart"], ref["version"], root.parent, helm)
        shutil.copy(archive, local / f"{ref['chart']}-{ref['version']}.tgz")
        scheme, _, location = ref["source"].partition("://")
        if scheme == "https":
            folder = root / location.strip("/")
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(archive, folder / f"{ref['chart']}-{ref['version']}.tgz")
    for index_dir in {p.parent for p in root.rglob("*.tgz")}:
        helm.run("repo", "index", str(index_dir))


def _push_oci_charts(
    refs: list[dict[str, Any]], local: Path, registry: str, helm: Helm, env: Mapping[str, str]
) -> None:
    """The OCI charts of the recipe, and the runner's own chart, pushed as their owners do."""
    runner_chart = local.parent / "runner-chart"
    helm.run("package", str(REPO_ROOT / "chart"), "--destination", str(runner_chart))
    [packaged] = runner_chart.glob("*.tgz")
    pushes = [(packaged, "nvidia-aicr/charts")]
    for ref in refs:
        if ref["source"].startswith("oci://"):
            path = ref["source"].removeprefix("oci://").split("/", 1)[1]
            pushes.append((local / f"{ref['chart']}-{ref['version']}.tgz", path))
    for archive, path in pushes:
        _ok(_run([str(helm.binary), "push", str(archive), f"oci://{registry}/{path}"], env))


def _fill_images(images: list[str], registry: str, real: Mapping[str, str], env: Mapping[str, str]) -> None:
    """``real``: published name -> the local image pushed under it; the stand-in under every other name."""
    stand_in = f"{registry}/e2e/stand-in:1"
    pushes = [
        (stand_in_image(), stand_in),
        *((local, f"{registry}/{name.split('/', 1)[1]}") for name, local in real.items()),
    ]
    for local, remote in pushes:
        push = [*PODMAN, "push", "--quiet", "--tls-verify=false", local, f"docker://{remote}"]
        subprocess.run(push, check=True, capture_output=True, timeout=600)

    def one(image: str) -> None:
        path = image.split("/", 1)[1]
        _ok(_run([str(tool("oras")), "cp", stand_in, f"{registry}/{path}"], env, timeout=120))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, [i for i in images if i not in real]))


@pytest.fixture
def upstream(tmp_path: Path, real_aicr_release: Path, helm: Helm, host_network: Any) -> Iterator[Upstream]:
    try:
        real = {
            OPERATOR_IMAGE: gpu_operator_image(gpu_operator_archive()),
            VALIDATOR_IMAGE: validator_image(validator_archive()),
            **program_images(),
        }
        refs = _recipe_refs(real_aicr_release, tmp_path / "recipe")
    except (GpuOperatorMissing, ValidatorsMissing, RealAicrMissing) as exc:
        pytest.fail(str(exc), pytrace=False)
    ca = CertAuthority("aicr-e2e-upstream-ca")
    chart_address, registry_address = f"127.38.{host_network.slot}.1", f"127.38.{host_network.slot}.2"
    base = tmp_path / "upstream"
    root, local = base / "charts", base / "chart-files"
    _fill_charts(refs, root, local, helm)
    release = root / "github.com" / "NVIDIA" / "aicr" / "releases" / "download" / TAG
    release.mkdir(parents=True)
    for part in real_aicr_release.iterdir():
        (release / part.name).symlink_to(part)
    chart_hosts = {p.name for p in root.iterdir()}
    charts = ChartHost(root, chart_address, ca, sorted(chart_hosts))
    registry: Registry | None = None
    try:
        # What to put in the registry: the list, its charts rendered from the local copies.
        network = UpstreamNetwork.write(base, ca, {chart_address: chart_hosts})
        listed = _mirror(tmp_path, network, "--list", "-o", "json", "--charts-dir", str(local), work="list-work")
        items = json.loads(listed)["items"]
        images = [i["reference"] for i in items if i["kind"] == "image"]
        missing = [i for i in images if "@sha256:" in i]
        registries = {i.split("/", 1)[0] for i in images} | {"ghcr.io"}
        registries |= {"registry-1.docker.io"} if "docker.io" in registries else set()  # oras' and containerd's
        registry = start_tls_registry(base / "registry", ca, sorted(registries), registry_address, 443)
        env = _env(tmp_path, network.ca_file)
        _push_oci_charts(refs, local, registry.host, helm, env)
        # Each program image's tag follows its pin: the pin must be its chart's appVersion.
        assert set(real) <= set(images), (sorted(set(real) - set(images)), "not in the list")
        _fill_images([i for i in images if i not in missing], registry.host, real, env)
        network = UpstreamNetwork.write(base, ca, {chart_address: chart_hosts, registry_address: registries})
        charts.requests.clear()
        yield Upstream(charts, registry, network, ca, refs, items, missing)
    finally:
        charts.stop()
        if registry is not None:
            registry.process.stop()


def _mirror(tmp_path: Path, network: UpstreamNetwork, *args: str, work: str = "mirror-work", plan: bool = True) -> str:
    """``aicr-runner mirror ARGS`` as a process, where the upstream names resolve to the upstream."""
    argv = [str(AICR_RUNNER), "mirror", *args]
    argv += ["--work-dir", str(tmp_path / work), *FLAGS] if plan else []
    # validate.enabled (phases: deployment): the list names the deployment validator's image.
    env = _env(tmp_path, network.ca_file, AICR_RUNNER_VALIDATE__ENABLED="true")
    return _ok(_run(network.argv(argv), env, timeout=900))


def _copied(output: str, registry: str) -> dict[str, str]:
    """``copied|present <target> <digest>`` lines: the target's path (without its registry) -> digest."""
    found = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] in ("copied", "present") and words[1].startswith(f"{registry}/"):
            found[words[1].removeprefix(f"{registry}/")] = words[2]
    return found


def _install_hosts_toml(written: Path, certs_dir: Path, ca_file: Path) -> list[str]:
    """The ``--hosts-toml`` output into containerd's config_path, each mirror entry given the CA."""
    hosts = []
    for source in sorted(written.glob("*/hosts.toml")):
        text = source.read_text().replace("  override_path = true\n", f'  override_path = true\n  ca = "{ca_file}"\n')
        (certs_dir / source.parent.name).mkdir(parents=True, exist_ok=True)
        (certs_dir / source.parent.name / "hosts.toml").write_text(text)
        hosts.append(source.parent.name)
    return hosts


def _pods(plane: ControlPlane, namespaces: set[str]) -> list[dict[str, Any]]:
    return [p for p in plane.admin.get("/api/v1/pods")["items"] if p["metadata"]["namespace"] in namespaces]


def _images(pod: dict[str, Any]) -> set[str]:
    spec = pod["spec"]
    return {c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]}


def _cannot_pull(plane: ControlPlane, pod: dict[str, Any]) -> str:
    """Why the kubelet never pulls this pod's images: unscheduled, or a volume it cannot mount; "" if none."""
    if not pod["spec"].get("nodeName"):
        return "not scheduled"
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    events = plane.admin.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}")
    mounts = [e["message"] for e in events["items"] if e.get("reason") == "FailedMount"]
    return f"FailedMount: {mounts[-1][:200]}" if mounts else ""


def _settled(plane: ControlPlane, node: RealNode, namespaces: set[str], missing: set[str]) -> PullOutcome | None:
    """Each pod's images on the node, or the pod named with why the kubelet cannot pull them."""
    outcome = PullOutcome({}, {})
    for pod in _pods(plane, namespaces):
        images = _images(pod) - missing
        found = {image: _node_digest(node, image) for image in images}
        if all(found.values()):
            outcome.pulled.update({i: d for i, d in found.items() if d})
            continue
        why = _cannot_pull(plane, pod)
        if not why:
            return None
        outcome.stuck[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = why
    return outcome


@dataclass
class PullOutcome:
    #: image -> its digest on the node
    pulled: dict[str, str]
    #: pod -> why the kubelet cannot pull its images
    stuck: dict[str, str]


def _node_digest(node: RealNode, image: str) -> str | None:
    lines = node.runtime.ctr("images", "list", f"name=={image}").splitlines()[1:]
    return lines[0].split()[2] if lines else None


@dataclass
class Installed:
    """What the test leaves behind: hosts.toml folders, and the images its pods run."""

    hosts: list[str] = field(default_factory=list)
    images: set[str] = field(default_factory=set)


@pytest.fixture
def recipe_removed_after(helm: Helm, control_plane: ControlPlane, node: RealNode) -> Iterator[Installed]:
    """The releases the test installs, uninstalled after it (no hooks: stand-ins cannot run them),
    their namespaces deleted, their pods gone (a container the node is still creating at the
    session's end would hold its cgroup) and the hosts.toml files taken away."""
    installed = Installed()
    yield installed
    for release in reversed(helm.list_releases()):
        helm.run("uninstall", release["name"], "-n", release["namespace"], "--no-hooks", check=False, timeout=300)
    for namespace in COMPONENT_NAMESPACES:
        with contextlib.suppress(KubeError):
            control_plane.admin.delete(f"/api/v1/namespaces/{namespace}")

    def gone() -> bool | None:
        pods = control_plane.admin.get("/api/v1/pods")["items"]
        return True if not any(_images(p) & installed.images for p in pods) else None

    try:
        wait_for(gone, timeout=180, what="the recipe's pods gone")
    finally:
        for host in installed.hosts:
            shutil.rmtree(node.runtime.certs_dir / host, ignore_errors=True)


@pytest.mark.timeout(1800)
def test_the_recipe_installs_from_a_mirror_the_mirror_command_filled_with_the_upstream_stopped(  # noqa: PLR0917 - one story
    upstream: Upstream,
    tmp_path: Path,
    control_plane: ControlPlane,
    node: RealNode,
    helm: Helm,
    namespace: str,
    pod_host: str,
    kubelet: Kubelet,
    recipe_removed_after: Installed,
) -> None:
    started = time.monotonic()
    mirror = start_tls_registry(tmp_path / "mirror", upstream.ca, [], "127.0.0.1")
    # The install's registry, filled from the archive alone: on the node's bridge
    # address, where this host's processes, the node's containerd and pods reach it.
    second = start_tls_registry(tmp_path / "mirror-2", upstream.ca, [], pod_host)
    try:
        target = f"oci://{mirror.host}/{PREFIX}"
        allow = [word for ref in upstream.missing for word in ("--allow-missing", ref)]
        timings: dict[str, float] = {}

        def timed(name: str, *args: str, plan: bool = True) -> str:
            begun = time.monotonic()
            out = _mirror(tmp_path, upstream.network, *args, plan=plan)
            timings[name] = time.monotonic() - begun
            return out

        # 1. The mirror command, as a process, against the upstream.
        first = timed("empty", "--to", target, "--hosts-toml", str(tmp_path / "hosts"), *allow)
        again = timed("again", "--to", target, *allow)
        archive = tmp_path / "recipe-mirror.tar"
        timed("archive", "--to-archive", str(archive), *allow)
        copied = _copied(first, mirror.host)
        assert _copied(again, mirror.host) == copied
        assert "(0 copied, " in again, again[-600:]
        listed = [i for i in upstream.listed if i["kind"] != "file"]
        assert len(copied) == len(listed) - len(upstream.missing) + 1, (len(copied), len(listed))  # + the release
        for ref in upstream.missing:
            assert f"not copied {ref}: not at its source, allowed by --allow-missing" in first, ref
        requests_before_stop = upstream.requests()
        # The stand-ins say what they are; the operator, the validator and the programs are the real ones.
        env = _env(tmp_path, upstream.network.ca_file)
        real = (OPERATOR_IMAGE, VALIDATOR_IMAGE, *PROGRAM_IMAGES)
        for image, stand_in in ((STAND_IN, True), *((name, False) for name in real)):
            config = _run([str(tool("oras")), "manifest", "fetch-config", f"{mirror.host}/{PREFIX}/{image}"], env)
            labels = json.loads(_ok(config))["config"].get("Labels") or {}
            assert (labels.get(STAND_IN_LABEL) == "true") is stand_in, (image, labels)

        # 2. The upstream goes away; the archive fills a second mirror with the same digests.
        upstream.stop()
        hosts = tmp_path / "hosts-2"
        from_archive = timed("from-archive", "--from-archive", str(archive), "--to", f"oci://{second.host}/{PREFIX}",
                             "--hosts-toml", str(hosts), plan=False)  # fmt: skip
        assert _copied(from_archive, second.host) == copied
        assert sorted(p.name for p in hosts.iterdir()) == sorted(p.name for p in (tmp_path / "hosts").iterdir())
        values = _printed_values(from_archive)
        assert values == {
            "mirror.registry": f"{second.host}/{PREFIX}",
            "aicr.releaseRef": f"{second.host}/{PREFIX}/nvidia/aicr/release:{TAG}",
        }, from_archive[-2000:]

        # 3. The install from the second mirror alone, with validation of the deployment phase.
        # The runner's own image is listed too; its pod runs the image loaded under that name.
        listed_images = {i["reference"] for i in upstream.listed if i["kind"] == "image"}
        recipe_removed_after.images.update(listed_images - {kubelet.image})
        certs_dir, ca_file = node.runtime.certs_dir, upstream.network.ca_file
        recipe_removed_after.hosts.extend(_install_hosts_toml(hosts, certs_dir, ca_file))
        # An earlier test of the session loads it under this name: here the node pulls it through the mirror.
        node.runtime.ctr("images", "rm", VALIDATOR_IMAGE, check=False)
        server_version = snapshot_configmap(control_plane, namespace)
        first_before, second_before = len(mirror.requests()), len(second.requests())
        namespaces = {r["namespace"] for r in upstream.refs} | {"gpu-operator"}
        _as_certgen_would(control_plane, upstream.ca)
        _prometheus_volume(control_plane, tmp_path / "prometheus-volume")
        with more_controllers(control_plane, tmp_path / "controllers", CONTROLLERS):
            run = _install(helm, kubelet, control_plane, values, namespace, upstream.ca.cert_pem)
            releases = {r["name"]: r for r in helm.list_releases()}
            missing = set(upstream.missing)
            outcome = wait_for(
                lambda: _settled(control_plane, node, namespaces, missing), timeout=300, what="every pod's images"
            )
            ready = {
                name: wait_for(functools.partial(_ready_pod, control_plane, *pod), timeout=180, what=f"{name} Ready")
                for name, pod in READY_PODS.items()
            }
        expected = _image_digests(copied)
    finally:
        mirror.process.stop()
        second.process.stop()

    # Every chart from the mirror, at its pinned version; what failed, failed for the known reasons.
    report = {r["name"]: (r["chart"], r["status"]) for r in releases.values()}
    want = {
        r["name"]: (f"{r['chart']}-{r['version']}", "failed" if r["name"] in KNOWN_FAILURES else "deployed")
        for r in upstream.refs
    }
    assert {n: report.get(n) for n in want} == want, json.dumps(run.report, indent=1)[-4000:]
    assert sorted(run.report["failedComponents"]) == sorted(KNOWN_FAILURES), run.report["failedComponents"]
    for component, why in KNOWN_FAILURES.items():
        assert why in run.deploy_log, (component, run.deploy_log[-3000:])
    _assert_applied_client_side(control_plane)
    assert "--repo" not in run.deploy_sh
    assert f"oci://{second.host}/{PREFIX}/" in run.deploy_sh
    # Least privilege: the installer bound to the chart's ClusterRole, never refused a request.
    binding = control_plane.admin.get(
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-{RELEASE}-installer"
    )
    assert binding["roleRef"]["name"] == f"{namespace}-{RELEASE}-installer", binding["roleRef"]
    assert run.refused == [], run.refused
    # The real GPU Operator Ready on the node, and the real deployment validator's verdict.
    operator = ready["the GPU Operator"]
    assert (operator["spec"]["nodeName"], operator["spec"]["containers"][0]["image"]) == (NODE_NAME, OPERATOR_IMAGE)
    tests = _assert_verdict(run.ctrf, operator)
    ksm_seen = _assert_kube_state_metrics(control_plane, ready["kube-state-metrics"], operator)
    exporter_seen = _assert_node_exporter(ready["node-exporter"])
    nfd_seen = _assert_node_feature_discovery(control_plane, [p for n, p in ready.items() if n.startswith("nfd-")])
    prometheus_seen = _assert_prometheus_stack(ready)
    readiness = [line for line in run.output.splitlines() if "readiness constraint" in line]
    assert any("passed name=K8s.server.version" in line and server_version in line for line in readiness), readiness
    # Every pod image, the validator's too, came from the second mirror, asked for by the
    # node's containerd, at the digest the first copy printed.
    requests = second.requests()[second_before:]
    pulled = {**outcome.pulled, VALIDATOR_IMAGE: _node_digest(node, VALIDATOR_IMAGE)}
    assert {OPERATOR_IMAGE, *PROGRAM_IMAGES} <= set(pulled), sorted(pulled)
    for image, digest in sorted(pulled.items()):
        assert digest == expected[image], (image, digest, expected[image])
        name, tag = image.rsplit(":", 1)
        path = f"/v2/{PREFIX}/{name}/manifests/{tag}"
        assert any(r.endswith(path) for r in requests), image
        assert any(a.startswith("containerd/") for a in second.user_agents(path)), image
    assert mirror.requests()[first_before:] == [], "the first mirror is not the install's"
    assert upstream.requests() == requests_before_stop
    print(
        f"\nthe recipe from the mirror: {len(listed)} items listed ({len(copied)} copied, {len(upstream.missing)} "
        f"allowed missing); mirror into an empty registry {timings['empty']:.1f}s, again {timings['again']:.1f}s, "
        f"to-archive {timings['archive']:.1f}s ({archive.stat().st_size / 1e6:.1f} MB), from-archive "
        f"{timings['from-archive']:.1f}s; upstream requests {requests_before_stop}; install {run.seconds:.1f}s "
        f"(validate {run.validate_seconds:.1f}s: {tests}), {len(pulled)} images pulled through the second mirror, "
        f"pods that cannot pull {outcome.stuck}; kube-state-metrics {ksm_seen}; node-exporter {exporter_seen}; "
        f"node-feature-discovery {nfd_seen}; {prometheus_seen}; whole test "
        f"{time.monotonic() - started:.1f}s"
    )


def _assert_applied_client_side(plane: ControlPlane) -> None:
    """deploy.helmApply's default (`client`): Helm 4 applied kube-prometheus-stack with
    ``--server-side=false``, so the bundle's ``storageSpec.emptyDir: null`` was dropped, not
    sent to the Prometheus CRD (which refuses it: ``spec.storage.emptyDir: Invalid value: "null"``)."""
    [prometheus] = plane.admin.get("/apis/monitoring.coreos.com/v1/namespaces/monitoring/prometheuses")["items"]
    helm_writes = {f["operation"] for f in prometheus["metadata"]["managedFields"] if f["manager"] == "helm"}
    assert helm_writes == {"Update"}, prometheus["metadata"]["managedFields"]
    assert "emptyDir" not in prometheus["spec"]["storage"], prometheus["spec"]["storage"]
    assert "volumeClaimTemplate" in prometheus["spec"]["storage"], prometheus["spec"]["storage"]


def _printed_values(output: str) -> dict[str, str]:
    """The chart values the mirror command printed (``mirror.registry: ...``, ``aicr.releaseRef: ...``)."""
    found = {}
    for line in output.splitlines():
        for key in ("mirror.registry", "aicr.releaseRef"):
            if f"{key}: " in line:
                found[key] = line.split(f"{key}: ", 1)[1].split()[0]
    return found


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _ready_pod(plane: ControlPlane, namespace: str, selector: str) -> dict[str, Any]:
    """The one pod of ``namespace`` that ``selector`` selects, once Ready; until then an
    error saying what there is (``wait_for`` reports the last one)."""
    pods = plane.admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    if len(pods) == 1 and _ready(pods[0]):
        ready: dict[str, Any] = pods[0]
        return ready
    seen = [(p["metadata"]["name"], p.get("status", {}).get("phase"), p.get("status", {}).get("containerStatuses"),
             p.get("status", {}).get("conditions")) for p in pods]  # fmt: skip
    raise AssertionError(f"{namespace} {selector}: {seen}")


def _assert_kube_state_metrics(plane: ControlPlane, ksm: dict[str, Any], operator: dict[str, Any]) -> str:
    """kube-prometheus-stack's kube-state-metrics is the real program: Ready on the node (its
    readiness probe, ``/readyz`` on 8081), its ``/metrics`` on 8080 carries the operator pod's
    readiness, read through its ServiceAccount with the chart's RBAC (no request refused), and
    each of its requests names the pinned version (the release build's User-Agent)."""
    assert (ksm["spec"]["nodeName"], ksm["spec"]["containers"][0]["image"]) == (NODE_NAME, KSM_IMAGE)
    url = f"http://{ksm['status']['podIP']}:8080/metrics"
    operator_pod = {"namespace": "gpu-operator", "pod": operator["metadata"]["name"], "condition": "true"}

    def operator_ready() -> str | None:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = str(response.read().decode())
        ready = samples(text, "kube_pod_status_ready")
        return text if any(labels.items() >= operator_pod.items() and v == 1 for labels, v in ready) else None

    text = wait_for(operator_ready, timeout=60, what="kube-state-metrics exports the operator pod Ready")
    user = f"system:serviceaccount:monitoring:{ksm['spec']['serviceAccountName']}"
    requests = [e for e in plane.audit_events_until_now() if e["user"]["username"] == user]
    assert requests, f"no request of {user} in the audit log"
    agents = {e.get("userAgent", "").split(" ")[0] for e in requests}
    assert agents == {f"kube-state-metrics/{KSM_VERSION}"}, agents
    refused = [f"{e['verb']} {e['requestURI']}" for e in requests if e["responseStatus"]["code"] == 403]
    assert refused == [], refused
    [status] = ksm["status"]["containerStatuses"]
    return f"{status['restartCount']} restarts, {len(requests)} requests, {len(text.splitlines())} lines of /metrics"


def _assert_node_exporter(exporter: dict[str, Any]) -> str:
    """kube-prometheus-stack's node-exporter is the real program: Ready on the node's network
    (its chart mounts the node's ``/`` with ``HostToContainer`` propagation), and its
    ``/metrics`` on 9100 names the pinned build and this machine's kernel."""
    container = exporter["spec"]["containers"][0]
    assert (exporter["spec"]["nodeName"], container["image"]) == (NODE_NAME, NODE_EXPORTER_IMAGE)
    assert exporter["spec"].get("hostNetwork") is True
    with urllib.request.urlopen(f"http://{exporter['status']['podIP']}:9100/metrics", timeout=10) as response:
        text = str(response.read().decode())
    [(build, _)] = samples(text, "node_exporter_build_info")
    assert build["version"] == NODE_EXPORTER_IMAGE.rsplit(":v", 1)[1], build
    [(uname, _)] = samples(text, "node_uname_info")
    assert uname["release"] == os.uname().release, uname
    [status] = exporter["status"]["containerStatuses"]
    return f"{status['restartCount']} restarts, {len(text.splitlines())} lines of /metrics"


def _assert_node_feature_discovery(plane: ControlPlane, pods: list[dict[str, Any]]) -> str:
    """The GPU Operator's node-feature-discovery is the real program: master, worker and gc
    Ready on the node, and the node labelled by the master from what the worker read of the
    host through the chart's mounts (the kernel's release, ``/etc/os-release``'s ID)."""
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {NFD_IMAGE}, pods
    os_id = next(line.split("=", 1)[1].strip('"') for line in Path("/etc/os-release").read_text().splitlines()
                 if line.startswith("ID="))  # fmt: skip
    want = {
        "feature.node.kubernetes.io/kernel-version.full": os.uname().release,
        "feature.node.kubernetes.io/system-os_release.ID": os_id,
    }

    def labelled() -> dict[str, str] | None:
        labels = plane.admin.get(f"/api/v1/nodes/{NODE_NAME}")["metadata"]["labels"]
        return labels if {k: labels.get(k) for k in want} == want else None

    labels = wait_for(labelled, timeout=120, what=f"node-feature-discovery's labels {want}")
    features = sorted(k for k in labels if k.startswith("feature.node.kubernetes.io/"))
    restarts = sum(s["restartCount"] for p in pods for s in p["status"]["containerStatuses"])
    return f"{len(features)} feature labels on the node, {restarts} restarts"


def _as_certgen_would(plane: ControlPlane, ca: CertAuthority) -> None:
    """The Secret kube-webhook-certgen's ``create`` hook Job makes (its keys ``ca``, ``cert``,
    ``key``; the operator's pod mounts it): that program's module is not served here, so its
    image is the stand-in, which makes nothing, and the test makes the Secret first."""
    namespace, name = ADMISSION_SECRET
    with contextlib.suppress(KubeError):  # deploy.sh's helm creates it otherwise
        plane.admin.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    serving = ca.serving(OPERATOR_SERVICE_HOSTS)
    data = {"ca": ca.cert_pem, "cert": serving.cert_pem, "key": serving.key_pem}
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": name}, "data": {k: base64.b64encode(v).decode() for k, v in data.items()}},
    )


def _prometheus_volume(plane: ControlPlane, directory: Path) -> None:
    """A volume for the claim the operator's Prometheus makes (the bundle's storage class
    ``gp2``, 50Gi): the class, which EKS creates in every cluster (the operator refuses a
    Prometheus whose class does not exist), without a provisioner (EBS and its CSI driver
    are not here), and one volume of that class, a directory of this host writable by
    Prometheus' user."""
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    plane.admin.create(
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "gp2"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
    )
    plane.admin.create(
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": "e2e-prometheus"},
            "spec": {
                "capacity": {"storage": "50Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp2",
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": str(directory), "type": "Directory"},
            },
        },
    )


def _assert_prometheus_stack(ready: Mapping[str, dict[str, Any]]) -> str:
    """kube-prometheus-stack's operator is the real program and starts the real Prometheus
    (with its config reloader) and Alertmanager from the chart's objects: each Ready on the
    node from its published name, Prometheus' configuration is the operator's, holding the
    chart's ServiceMonitors, and each says the pinned version; prometheus-adapter (its own
    chart) Ready on its serving port's ``/healthz`` (the API server reaches it through no
    Service here: its APIServices stay unavailable)."""
    images = {name: {c["name"]: c["image"] for c in ready[name]["spec"]["containers"]} for name in
              ("prometheus-operator", "prometheus", "alertmanager", "prometheus-adapter")}  # fmt: skip
    assert images["prometheus-operator"] == {"kube-prometheus-stack": PROMETHEUS_OPERATOR_IMAGE}, images
    assert images["prometheus"] == {"prometheus": PROMETHEUS_IMAGE, "config-reloader": CONFIG_RELOADER_IMAGE}, images
    assert images["alertmanager"]["alertmanager"] == ALERTMANAGER_IMAGE, images
    assert set(images["prometheus-adapter"].values()) == {ADAPTER_IMAGE}, images

    def api(name: str, port: int, path: str) -> Any:
        with urllib.request.urlopen(f"http://{ready[name]['status']['podIP']}:{port}{path}", timeout=10) as response:
            return json.loads(response.read())

    build = api("prometheus", 9090, "/api/v1/status/buildinfo")["data"]
    assert "v" + build["version"] == PROMETHEUS_IMAGE.rsplit(":", 1)[1], build
    config = api("prometheus", 9090, "/api/v1/status/config")["data"]["yaml"]
    jobs = [j["job_name"] for j in yaml.safe_load(config)["scrape_configs"]]
    assert "serviceMonitor/monitoring/kube-state-metrics/0" in jobs, jobs
    status = api("alertmanager", 9093, "/api/v2/status")
    assert "v" + status["versionInfo"]["version"] == ALERTMANAGER_IMAGE.rsplit(":", 1)[1], status["versionInfo"]
    restarts = sum(s["restartCount"] for n in images for s in ready[n]["status"]["containerStatuses"])
    return f"Prometheus {build['version']} with {len(jobs)} scrape jobs, Alertmanager, the adapter, {restarts} restarts"


def _assert_verdict(ctrf: dict[str, Any], operator: dict[str, Any]) -> dict[str, str]:
    """aicr v0.11.1's deployment checks against the real operator: operator-health
    passed on its pod; the others as ``e2e/test_real_validators.py`` has them."""
    assert ctrf["results"]["tool"] == {"name": "aicr", "version": "0.11.1"}
    tests = {t["name"]: t for t in ctrf["results"]["tests"]}
    statuses = {name: t["status"] for name, t in tests.items()}
    assert statuses == {name: status for name, _, status in CHECKS}, statuses
    assert evidence(tests["operator-health"]) == [
        "Found 1 gpu-operator pod(s):",
        f"  {operator['metadata']['name']}: Running",
        "Running: 1/1",
    ], tests["operator-health"]
    return statuses


def _image_digests(copied: Mapping[str, str]) -> dict[str, str]:
    """image reference (its upstream name) -> the digest copied into the mirror."""
    return {path.removeprefix(f"{PREFIX}/"): digest for path, digest in copied.items()}


@dataclass
class InstallRun:
    """What an install left to assert: its time, the run report, the CTRF verdict, deploy.sh and its log."""

    seconds: float
    validate_seconds: float
    report: dict[str, Any]
    ctrf: dict[str, Any]
    deploy_sh: str
    deploy_log: str
    #: the Job's pod log
    output: str
    #: the installer's requests the API server refused (its audit log)
    refused: list[str]
    #: the Job's pod as it ended
    pod: dict[str, Any]


#: Where the Job's pod finds the mirror's CA (a ConfigMap mounted through job.extraVolumes).
CA_DIR = "/etc/aicr-mirror-ca"


def _install(  # noqa: PLR0917 - one install's inputs
    helm: Helm, kubelet: Kubelet, plane: ControlPlane, printed: Mapping[str, str], namespace: str, ca_pem: bytes
) -> InstallRun:
    """The chart's Job, run by the node's kubelet: the values ``mirror`` printed,
    ``rbac.clusterAdmin=false`` with the recipe's extra rules, the mirror's CA as
    ``SSL_CERT_FILE`` (helm, oras and the runner's fetch read it)."""
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": "mirror-ca"}, "data": {"ca.crt": ca_pem.decode()}},
    )
    since = plane.audit_offset()
    begun = time.monotonic()
    helm.install(RELEASE, CHART, namespace, values=_chart_values(kubelet, printed, namespace))
    kept: dict[str, str] = {}

    def keep_deploy_files(line: str) -> bool:
        # The kubelet removes the pod's emptyDir once it ends: read deploy.sh and its log when validate starts.
        if not kept and "step started" in line and "step=validate" in line:
            [pod] = plane.admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="job-name")["items"]
            work = kubelet.pod_volume(pod, "work")
            kept.update(sh=(work / "bundle" / "deploy.sh").read_text(), log=(work / "logs" / "deploy.log").read_text())
        return False

    run = kubelet.run_job(RELEASE, namespace, timeout=1200, terminate_when=keep_deploy_files)
    seconds = time.monotonic() - begun
    results = RunResults(plane, namespace)
    report = results.report()
    assert run.exit_code == 0, run.describe()
    assert kept, "validate never started"
    user = f"system:serviceaccount:{namespace}:{run.pod['spec']['serviceAccountName']}"
    refused = [
        f"{e['verb']} {e['requestURI']}"
        for e in plane.audit_events_until_now(since)
        if e["user"]["username"] == user and e["responseStatus"]["code"] == 403
    ]
    [validate] = [s for s in report["steps"] if s["state"] == "validate"]
    ctrf = json.loads(results.data("aicr-validate-result")["ctrf.json"])
    return InstallRun(
        seconds,
        float(validate["durationSeconds"]),
        report,
        ctrf,
        kept["sh"],
        kept["log"],
        run.output,
        refused,
        dict(run.pod),
    )


def _chart_values(kubelet: Kubelet, printed: Mapping[str, str], namespace: str) -> dict[str, Any]:
    return {
        **CRITERIA,
        **kubelet.image_values(),
        "mirror": {"registry": printed["mirror.registry"]},
        # The shared release carries no NVIDIA attestation (tests/support/real_aicr.py).
        "aicr": {"version": TAG, "releaseRef": printed["aicr.releaseRef"], "provenance": {"mode": "off"}},
        # The runner's default flags, and no retries: a failure is final (the backoff would add minutes).
        "deploy": {"flags": "--best-effort --no-wait --retries 0"},
        "bundle": {"args": BUNDLE_ARGS},
        "validate": {"enabled": True, "phases": ["deployment"], "args": ["--snapshot", f"cm://{namespace}/{SNAPSHOT}"]},
        "rbac": {"clusterAdmin": False, "extraRules": EXTRA_RULES},
        "job": {
            "backoffLimit": 0,
            # The node's 2 CPUs hold the recipe's pods and the validator's (BUNDLE_ARGS).
            "resources": {
                "requests": {"cpu": "10m", "memory": "256Mi"},
                "limits": {"cpu": "1000m", "memory": "2048Mi"},
            },
            "extraVolumes": [{"name": "mirror-ca", "configMap": {"name": "mirror-ca"}}],
            "extraVolumeMounts": [{"name": "mirror-ca", "mountPath": CA_DIR, "readOnly": True}],
            "extraEnv": extra_env(SSL_CERT_FILE=f"{CA_DIR}/ca.crt"),
        },
    }
