"""The runner image (Dockerfile) and the release workflow: linted, and consistent
with what the chart mounts and sets. These are the static checks; the image built
from the Dockerfile is run in tests/image."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import ROOT, renders

DOCKERFILE = (ROOT / "Dockerfile").read_text()
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))


def actionlint() -> str:
    path = ROOT / ".tools" / "bin" / "actionlint"
    if not path.is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "actionlint"], check=True, cwd=ROOT)
    return str(path)


def test_hadolint_is_clean() -> None:
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "Dockerfile"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_would_catch_a_regression(tmp_path: object) -> None:
    bad = DOCKERFILE.replace("USER 65532:65532", "USER root")
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "-"],
        input=bad,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode != 0
    assert "DL3002" in proc.stdout


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_is_clean(workflow: object) -> None:
    env = dict(os.environ, PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")  # shellcheck for run:
    proc = subprocess.run([actionlint(), str(workflow)], capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_dockerfile_downloads_nothing_and_installs_only_locked_wheels() -> None:
    """Every input is in the build context scripts/image-inputs.sh makes: no registry
    base image, no package manager, no download, no unpinned wheel."""
    froms = re.findall(r"^FROM (\S+)(?: AS ([\w-]+))?$", DOCKERFILE, re.M)
    assert froms == [("scratch", "base"), ("base", "venv"), ("base", "tools"), ("base", "")]
    assert "ADD base-${TARGETARCH}.tar /" in DOCKERFILE
    for fetch in ("curl", "wget", "apt-get", "pip download", "https://", "http://", "git clone"):
        assert fetch not in DOCKERFILE, fetch
    commands = DOCKERFILE.replace("\\\n", " ").replace("&&", "\n").splitlines()
    installs = [command for command in commands if "pip" in command and " install " in command]
    assert len(installs) == 2
    assert all("--no-index" in install for install in installs)
    locked = installs[0]
    assert '/opt/venv/bin/python "${pip_wheel}/pip" install' in locked, "pip runs from its locked wheel"
    assert "--require-hashes" in locked
    assert "--only-binary=:all:" in locked
    assert "-r /build/requirements.lock" in locked
    assert "/build/wheels/aicr_runner-*.whl" in installs[1]
    assert "COPY --from=venv /opt/venv /opt/venv" in DOCKERFILE
    assert "COPY --from=venv /app/ /" in DOCKERFILE, "the runner's own files are a layer of their own"


def test_the_image_inputs_script_makes_every_file_the_dockerfile_reads() -> None:
    script = (ROOT / "scripts" / "image-inputs.sh").read_text()
    copied = set(re.findall(r"^(?:COPY|ADD) (?!--from)(\S+)", DOCKERFILE, re.M))
    assert copied == {
        "base-${TARGETARCH}.tar",
        "requirements.lock",
        "wheels/${TARGETARCH}/",
        "tools/${TARGETARCH}/image-tools",
    }
    assert '"$out/base-$arch.tar"' in script
    assert '"$out/tools/$arch/image-tools"' in script
    assert '--dest "$out/wheels/$arch"' in script
    assert 'cp requirements.lock "$out/requirements.lock"' in script
    assert "--require-hashes" in script
    build = (ROOT / "scripts" / "build-image.sh").read_text()
    assert 'scripts/image-inputs.sh --arch "$arch" --out "$work"' in build
    assert '--file Dockerfile "$work"' in build


def versions() -> dict[str, str]:
    text = (ROOT / "tools" / "versions.env").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=\"?([^\"\n]*)\"?$", text, re.M))


def test_the_tools_binary_is_helm_kubectl_cosign_and_oras_at_their_pins() -> None:
    main = (ROOT / "tools" / "image-tools" / "main.go").read_text()
    tools = re.search(r"^var tools = map\[string\]func\(\)\{(.*)\}$", main, re.M)
    assert tools is not None
    assert re.findall(r'"(\w+)": (\w+)', tools.group(1)) == [
        ("helm", "helm"),
        ("kubectl", "kubectl"),
        ("cosign", "cosign"),
        ("oras", "oras"),
    ]
    assert re.search(r"for tool in helm kubectl cosign oras; do ln /out/usr/local/bin/image-tools ", DOCKERFILE)
    assert "COPY --from=tools /out/ /" in DOCKERFILE
    bootstrap = (ROOT / "scripts" / "bootstrap-tools.sh").read_text()
    assert '"$HELM_MODULE@$HELM_VERSION" "$KUBERNETES_MODULE@$KUBERNETES_VERSION" "$COSIGN_MODULE@$COSIGN_VERSION"' in (
        bootstrap
    )
    assert '"$ORAS_MODULE@$ORAS_VERSION"' in bootstrap
    assert 'go build -trimpath -ldflags "-s -w $xflags" -o "$work/image-tools" .' in bootstrap


def test_the_supported_kubernetes_minors_are_a_range_whose_ends_the_e2e_servers_are() -> None:
    """IMAGE_KUBERNETES_MINORS lists every supported minor, oldest first, without
    gaps. Its newest is kubectl's own minor, the e2e suite's main API server
    (KUBERNETES_VERSION); its oldest is the e2e suite's floor API server
    (KUBE_APISERVER_FLOOR_VERSION), where e2e/test_kubernetes_floor.py installs the
    chart and runs a whole run. The minors below kubectl's documented skew (its
    minor -1) rest on that test. (helm's side: the image test reads the
    client-go minor compiled into the binary.)"""
    pinned = versions()
    supported = [int(minor.removeprefix("1.")) for minor in pinned["IMAGE_KUBERNETES_MINORS"].split()]
    assert all(minor.startswith("1.") for minor in pinned["IMAGE_KUBERNETES_MINORS"].split())
    assert supported == list(range(supported[0], supported[-1] + 1)), f"not a range without gaps: {supported}"
    kubectl_minor = int(pinned["KUBERNETES_VERSION"].split(".")[1])
    floor_minor = int(pinned["KUBE_APISERVER_FLOOR_VERSION"].split(".")[1])
    assert supported[-1] == kubectl_minor, "the newest supported minor is the e2e API server's (KUBERNETES_VERSION)"
    assert supported[0] == floor_minor, "the oldest supported minor is the floor API server's"
    assert floor_minor < kubectl_minor - 1, "within kubectl's own skew no floor server is needed: drop it"
    # The chart refuses clusters older than the image supports (helm checks kubeVersion
    # against the live server at install), so the two statements cannot drift apart.
    chart = (ROOT / "chart" / "Chart.yaml").read_text()
    oldest = f"1.{supported[0]}"
    assert f'kubeVersion: ">= {oldest}.0-0"' in chart, f"chart/Chart.yaml's kubeVersion floor is not {oldest}"


def test_the_docs_state_the_supported_range_as_versions_env_does() -> None:
    """Every page that states the range states IMAGE_KUBERNETES_MINORS' ends."""
    minors = versions()["IMAGE_KUBERNETES_MINORS"].split()
    oldest, newest = minors[0], minors[-1]
    stated = {
        "docs/installing.md": f"Kubernetes {oldest} to {newest}",
        "chart/README.md": f"Kubernetes {oldest} to {newest}",
        "docs/supply-chain.md": f"Kubernetes {oldest} to {newest}",
    }
    for page, words in stated.items():
        text = " ".join((ROOT / page).read_text().split())
        assert words in text, f"{page} does not say {words!r}"
        assert f"`>= {oldest}.0-0`" in text, f"{page} does not quote the chart's kubeVersion"


def test_the_lock_matches_pyproject() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lock-image-deps.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_lock_check_fails_when_pyproject_changes(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    text = (ROOT / "pyproject.toml").read_text()
    pyproject.write_text(text.replace('"httpx>=0.28,<0.29",', '"httpx>=0.29,<0.30",'))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lock-image-deps.py"), "--check", "--pyproject", str(pyproject)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "requirements.lock is stale: pyproject.toml's dependencies changed since it was made" in proc.stderr
    assert "httpx==0.28.1 in requirements.lock does not satisfy 'httpx<0.30,>=0.29'" in proc.stderr


#: Import names that differ from their distribution's.
_DISTRIBUTION = {"yaml": "pyyaml", "pydantic_settings": "pydantic-settings", "zlib_ng": "zlib-ng"}


def test_the_runtime_dependencies_are_exactly_what_src_imports() -> None:
    """Every third-party import in src/ (lazy ones too) is a declared dependency,
    and every declared dependency is imported: nothing ships that nothing uses."""
    imported: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported - set(sys.stdlib_module_names) if name != "aicr_runner"}
    declared = {
        re.split(r"[<>=!~ \[;]", line, maxsplit=1)[0].lower()
        for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    assert {_DISTRIBUTION.get(name, name) for name in third_party} == declared


def test_runtime_is_non_root_with_tini_and_the_runner_entrypoint() -> None:
    assert re.search(r"^USER 65532:65532$", DOCKERFILE, re.M)
    assert 'ENTRYPOINT ["tini", "--", "aicr-runner"]' in DOCKERFILE
    assert 'CMD ["run"]' in DOCKERFILE
    assert "RUN command -v bash jq tini python3 helm kubectl cosign oras >/dev/null" in DOCKERFILE
    inputs = (ROOT / "scripts" / "image-inputs.sh").read_text()
    assert re.search(r"^base_packages=python3,bash,ca-certificates,jq,tini,libstdc\+\+6$", inputs, re.M)
    for label in ("title", "description", "licenses", "version", "revision", "created", "base.name"):
        assert f"org.opencontainers.image.{label}=" in DOCKERFILE


def test_image_environment_matches_the_chart_mounts_and_env() -> None:
    image_env = dict(re.findall(r"^\s+(?:ENV )?([A-Z_]+)=(\S+?)(?: \\)?$", DOCKERFILE, re.M))
    result = renders()
    chart_env = result.env
    for var in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME",
                "KUBECACHEDIR", "AICR_RUNNER_WORK_DIR"):  # fmt: skip
        assert image_env[var] == chart_env[var], var
    assert image_env["PYTHONDONTWRITEBYTECODE"] == "1"
    mounts = {m["mountPath"] for m in result.mounts.values()}
    for var in ("HOME", "TMPDIR", "AICR_RUNNER_WORK_DIR", "XDG_CACHE_HOME", "KUBECACHEDIR", "HELM_DATA_HOME"):
        assert any(image_env[var] == m or image_env[var].startswith(m + "/") for m in mounts), var
    assert "WORKDIR /work" in DOCKERFILE


# -- release workflow -----------------------------------------------------------------------------------


def release() -> Any:
    return yaml.safe_load((ROOT / ".github" / "workflows" / "release.yaml").read_text())


def test_release_runs_on_version_tags_and_builds_both_architectures() -> None:
    workflow = release()
    triggers = workflow[True]  # YAML 1.1 reads the key "on" as a boolean
    assert triggers["push"]["tags"] == ["v*"]
    text = (ROOT / ".github" / "workflows" / "release.yaml").read_text()
    assert "platforms: linux/amd64,linux/arm64" in text
    assert "docker/setup-buildx-action" in text
    assert "helm lint --strict chart --set accelerator=h100" in text.replace(".tools/bin/", "")
    assert 'helm push "dist/nvidia-aicr-$VERSION.tgz" "$CHARTS"' in text.replace(".tools/bin/", "")
    assert "already published" in text, "the release refuses to overwrite a chart version"
    assert "does not match chart/Chart.yaml version" in text
    assert "tr '[:upper:]' '[:lower:]'" in text, "ghcr owners are lowercased"
