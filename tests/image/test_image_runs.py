"""The image built from the Dockerfile (scripts/build-image.sh, podman) runs the way
the chart and the README run it: as 65532, read-only root, writable only where the
chart mounts emptyDirs.

aicr itself is the contract-faithful stand-in (tests/fake_aicr), mounted into the
container with a launcher bound to the image's Python: the real release cannot be
downloaded here."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

import pytest

from tests.chart.helm import renders
from tests.fake_aicr import PACKAGE_DIR, install_fake_aicr
from tests.support.podman import IMAGE_PYTHON, PODMAN, ROOT, RUN_LIMITS, built_image

pytestmark = pytest.mark.image

#: Where the tests mount the fake aicr package and its launcher in the container.
FAKE_PACKAGE = "/opt/fake-aicr/fake_aicr"
FAKE_AICR = "/opt/fake-aicr/aicr"
CRITERIA_ENV = {
    "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
    "AICR_RUNNER_CRITERIA__SERVICE": "eks",
    "AICR_RUNNER_CRITERIA__INTENT": "training",
    "AICR_RUNNER_CRITERIA__OS": "ubuntu",
}
#: How the tests point the runner at the stand-in. It has no Sigstore attestation
#: (provenance is tested with real Sigstore material in tests/unit/aicr/test_provenance.py),
#: so verification is switched off explicitly, as the runner demands for such a binary.
STAND_IN_ENV = {"AICR_RUNNER_AICR__BINARY": FAKE_AICR, "AICR_RUNNER_AICR__PROVENANCE__MODE": "off"}
#: The first and last rows of the eks/h100/training/ubuntu component table.
PLAN_COMPONENTS = ("cert-manager", "kubeflow-trainer")


def pins() -> dict[str, str]:
    text = (ROOT / "tools" / "versions.env").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=\"?([^\"\n]*)\"?$", text, re.M))


def podman(*args: str, check: bool = False, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


@pytest.fixture(scope="module")
def fake_aicr_mounts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    launcher = install_fake_aicr(tmp_path_factory.mktemp("fake-aicr"), python=IMAGE_PYTHON, package_dir=FAKE_PACKAGE)
    return ["-v", f"{PACKAGE_DIR}:{FAKE_PACKAGE}:ro", "-v", f"{launcher}:{FAKE_AICR}:ro"]


def chart_pod() -> tuple[list[str], list[str]]:
    """podman flags for the chart's securityContext, and the chart's emptyDir mount paths."""
    rendered = renders()
    pod_sc = rendered.pod["securityContext"]
    container_sc = rendered.container["securityContext"]
    assert container_sc["readOnlyRootFilesystem"] is True
    assert container_sc["allowPrivilegeEscalation"] is False
    assert container_sc["capabilities"]["drop"] == ["ALL"]
    flags = [
        f"--user={pod_sc['runAsUser']}:{pod_sc['runAsGroup']}",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
    ]
    empty_dirs = {name for name, volume in rendered.volumes.items() if "emptyDir" in volume}
    paths = sorted(m["mountPath"] for m in rendered.mounts.values() if m["name"] in empty_dirs)
    assert {"/tmp", "/work", "/home/aicr"} <= set(paths), paths
    return flags, paths


def tmpfs(paths: Sequence[str]) -> list[str]:
    # ":U" gives the tmpfs to the container's user: podman mounts it root-owned 0755
    # (/tmp aside) where the kubelet's emptyDir is world-writable.
    return [arg for path in paths for arg in ("--tmpfs", f"{path}:U")]


def env_flags(env: dict[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]


def test_version_reports_the_runtime_and_the_pinned_aicr(image: str) -> None:
    proc = podman("run", "--rm", "--read-only", *RUN_LIMITS, image, "version")
    assert proc.returncode == 0, proc.stderr
    version = re.search(r'^__version__ = "([^"]+)"', (ROOT / "src" / "aicr_runner" / "__init__.py").read_text(), re.M)
    assert version is not None
    assert proc.stdout.strip() == f"aicr-runner {version.group(1)} (pinned aicr {pins()['AICR_VERSION']})"


def test_the_image_has_no_time_zone_database_and_parses_api_timestamps_without_one(image: str) -> None:
    """tzdata is uninstalled in the build (2.8 MB): the API server's timestamps still
    parse, to fixed offsets, in the kubernetes client's own parser."""
    script = (
        "import importlib.metadata as m, importlib.util as u, kubernetes.client as k\n"
        "names = [d.metadata['Name'] for d in m.distributions()]\n"
        "print(u.find_spec('tzdata'), [name for name in names if name == 'tzdata'])\n"
        "stamp = k.ApiClient()._ApiClient__deserialize_datetime('2026-12-05T15:10:08Z')\n"
        "print(stamp.isoformat())\n"
    )
    proc = podman("run", "--rm", "--read-only", *RUN_LIMITS, "--entrypoint", "python3", image, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["None []", "2026-12-05T15:10:08+00:00"]


def test_the_image_runs_as_65532_with_the_pinned_helm_kubectl_cosign_oras_and_tini(image: str) -> None:
    """The stripped tools still run, report the pinned versions, and are hard links
    to one binary (one inode: a file mounted over one of them replaces only that one)."""
    script = (
        "id -u; id -g; helm version --short; kubectl version --client -o yaml | sed -n 's/^  gitVersion: //p'; "
        "cosign version 2>&1 | sed -n 's/^GitVersion: *//p'; "
        "oras version | sed -n 's/^Version: *//p'; "
        "stat -c %i /usr/local/bin/image-tools /usr/local/bin/helm /usr/local/bin/kubectl /usr/local/bin/cosign "
        "/usr/local/bin/oras "
        "| sort -u | wc -l; "
        'command -v tini jq bash aicr-runner; echo "$HOME $PATH"'
    )
    proc = podman("run", "--rm", "--read-only", *RUN_LIMITS, "--entrypoint", "bash", image, "-c", script)
    assert proc.returncode == 0, proc.stderr
    uid, gid, helm, kubectl, cosign, oras, inodes, tini, jq, bash, runner, env = proc.stdout.strip().splitlines()
    assert (uid, gid) == ("65532", "65532")
    versions = pins()
    assert helm.split("+")[0] == versions["HELM_VERSION"]
    assert kubectl == versions["KUBERNETES_VERSION"]
    assert cosign == versions["COSIGN_VERSION"]
    assert f"v{oras}" == versions["ORAS_VERSION"]
    assert inodes == "1"
    assert (tini, jq, bash) == ("/usr/bin/tini", "/usr/bin/jq", "/usr/bin/bash")
    assert runner == "/opt/venv/bin/aicr-runner"
    assert env.startswith("/home/aicr /opt/venv/bin:")


def test_the_image_helm_is_built_for_the_newest_supported_minor(image: str) -> None:
    """Helm documents support for the Kubernetes minor its client-go is built with
    and the three before it; the image's helm reports that minor
    (KubeClientVersion), which is the newest supported one. The supported minors
    older than that skew rest on e2e/test_kubernetes_floor.py, which installs the
    chart and runs a whole run against the floor's API server: the oldest of them."""
    proc = podman("run", "--rm", *RUN_LIMITS, "--entrypoint", "helm", image, "version")
    assert proc.returncode == 0, proc.stderr
    client = re.search(r'KubeClientVersion:"v1\.(\d+)"', proc.stdout)
    assert client is not None, proc.stdout
    newest = int(client.group(1))
    supported = [int(minor.split(".")[1]) for minor in pins()["IMAGE_KUBERNETES_MINORS"].split()]
    assert supported[-1] == newest, f"helm's client-go is 1.{newest}, the newest supported minor 1.{supported[-1]}"
    beyond_skew = [minor for minor in supported if minor < newest - 3]
    floor = int(pins()["KUBE_APISERVER_FLOOR_VERSION"].split(".")[1])
    assert not beyond_skew or beyond_skew[0] == floor, "the oldest minor beyond helm's skew is the e2e floor server's"


def test_the_tools_binary_names_the_tool_it_was_started_as_or_refuses(image: str) -> None:
    as_argument = podman("run", "--rm", *RUN_LIMITS, "--entrypoint", "image-tools", image, "kubectl", "version",
                         "--client", "-o", "json")  # fmt: skip
    assert as_argument.returncode == 0, as_argument.stderr
    assert f'"gitVersion": "{pins()["KUBERNETES_VERSION"]}"' in as_argument.stdout
    unknown = podman("run", "--rm", *RUN_LIMITS, "--entrypoint", "image-tools", image, "crane", "version")
    assert unknown.returncode == 2
    assert (
        "start me as helm, kubectl, cosign or oras (a link named so, or 'image-tools <tool> ...'), not \"crane\""
        in (unknown.stderr)
    )


def test_plan_runs_read_only_as_the_chart_runs_it_and_writes_only_to_the_emptydirs(
    image: str, fake_aicr_mounts: list[str]
) -> None:
    security, empty_dirs = chart_pod()
    common = [
        *RUN_LIMITS,
        *security,
        *tmpfs(empty_dirs),
        *fake_aicr_mounts,
        *env_flags({**CRITERIA_ENV, **STAND_IN_ENV}),
    ]

    locked = podman("run", "--rm", "--read-only", *common, image, "plan", "--output", "/work/plan")

    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert "phase: Succeeded" in locked.stdout
    assert re.search(r"^fetch +succeeded +0 ", locked.stdout, re.M), locked.stdout
    assert "from preinstalled /opt/fake-aicr/aicr" in locked.stdout
    for component in PLAN_COMPONENTS:
        assert re.search(rf"^{component}\s", locked.stdout, re.M), locked.stdout
    assert "results in /work/plan" in locked.stdout

    # The same run with a writable root: whatever it wrote outside the emptyDirs
    # would show in `podman diff`. Compared with a container that runs nothing,
    # which shows only what podman itself adds (mount points, the passwd entry).
    def changes(*args: str) -> set[str]:
        created = podman("create", *common, *args, image, "plan", "--output", "/work/plan", check=True)
        name = created.stdout.strip()
        try:
            started = podman("start", "--attach", name)
            diff = podman("diff", name, check=True)
        finally:
            podman("rm", "--force", name)
        assert started.returncode == 0, started.stdout + started.stderr
        return set(diff.stdout.split("\n")) - {""}

    baseline = changes("--entrypoint", "true")
    written = changes()
    assert written == baseline, f"written outside {empty_dirs}: {sorted(written - baseline)}"
    assert not any(line.split()[-1].startswith(("/opt/venv", "/usr/local/bin")) for line in written)


#: Where the documentation shows `docker run` commands: the README and docs/.
DOC_PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def readme_docker_run_commands() -> list[list[str]]:
    """Every `docker run ... plan` command in the bash blocks of the README and docs/, as argv."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", "\n".join(p.read_text() for p in DOC_PAGES), re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:2] == ["docker", "run"] and "plan" in argv:
                commands.append(argv)
    return commands


DOC_COMMANDS = readme_docker_run_commands()
#: Each distinct command once (a page may repeat another's).
README_COMMANDS = [list(argv) for argv in dict.fromkeys(tuple(argv) for argv in DOC_COMMANDS)]


def test_the_readme_shows_the_docker_run_plan_command() -> None:
    assert len(README_COMMANDS) >= 1
    chart = (ROOT / "chart" / "Chart.yaml").read_text()
    app_version = re.search(r'^appVersion: "?([^"\n]+)"?$', chart, re.M)
    assert app_version is not None
    for argv in README_COMMANDS:
        images = [a for a in argv if re.match(r"^ghcr\.io/[^/]+/aicr-runner:", a)]
        assert images == [f"ghcr.io/nvidia-aicr/aicr-runner:{app_version.group(1)}"], argv


@pytest.mark.parametrize("argv", README_COMMANDS, ids=lambda argv: " ".join(argv[argv.index("plan") :]))
def test_the_readme_docker_run_plan_command_runs_with_podman(
    argv: list[str], image: str, fake_aicr_mounts: list[str]
) -> None:
    """The README's command with `docker` -> `podman` and only what this machine
    needs changed: podman's runtime flags and ulimits, the local image for the
    published one, `:U` on the tmpfs mounts (podman leaves them root-owned 0755,
    Docker makes them world-writable), and the stand-in aicr with provenance off
    (GitHub, where the pinned release and its attestation come from, is
    unreachable here)."""
    command = list(argv[2:])
    for i, arg in enumerate(command):
        if i > 0 and command[i - 1] == "--tmpfs":
            command[i] = f"{arg}:U"
        if arg.startswith("ghcr.io/"):
            command[i] = image
    stand_in = [*fake_aicr_mounts, *env_flags(STAND_IN_ENV)]

    proc = podman("run", *RUN_LIMITS, *stand_in, *command)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "phase: Succeeded" in proc.stdout
    assert "criteria: service=eks, accelerator=h100, os=ubuntu, intent=training" in proc.stdout
    for component in PLAN_COMPONENTS:
        assert re.search(rf"^{component}\s", proc.stdout, re.M), proc.stdout
    assert sum(p.read_text().count("docker run --rm --read-only") for p in DOC_PAGES) == len(DOC_COMMANDS)
