"""The runner image (Dockerfile) and the release workflow: linted, and consistent
with what the chart mounts and sets. These are the static checks; the image built
from the Dockerfile is run in tests/image."""

from __future__ import annotations

import os
import re
import subprocess
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


def test_base_image_is_pinned_by_digest_and_stages_are_multi_stage() -> None:
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$", DOCKERFILE, re.M)
    froms = re.findall(r"^FROM (\S+)(?: AS ([\w-]+))?$", DOCKERFILE, re.M)
    assert froms == [
        ("${PYTHON_IMAGE}", "wheels-download"),
        ("scratch", "wheels"),
        ("${PYTHON_IMAGE}", "builder"),
        ("${PYTHON_IMAGE}", "tools-download"),
        ("scratch", "tools"),
        ("${PYTHON_IMAGE}", ""),
    ]
    assert "COPY --from=builder /opt/venv /opt/venv" in DOCKERFILE
    assert "pip install --no-cache-dir --no-index --find-links /wheels aicr-runner" in DOCKERFILE


def test_every_stage_the_local_build_replaces_is_a_plain_directory_of_files() -> None:
    """scripts/build-image.sh replaces the "tools" and "wheels" stages with local
    directories (--build-context NAME=DIR); the release build fills the same
    stages from the network. The binaries the script puts in "tools" are the ones
    the runtime stage copies."""
    script = (ROOT / "scripts" / "build-image.sh").read_text()
    for stage in ("tools", "wheels"):
        assert re.search(rf"^FROM scratch AS {stage}\nCOPY --from={stage}-download /\S+/ /$", DOCKERFILE, re.M)
        assert f'--build-context "{stage}=$work/{stage}"' in script
    assert '--build-arg "PYTHON_IMAGE=$base"' in script
    listed = re.search(r"^image_tools=\(([^)]*)\)$", script, re.M)
    assert listed is not None
    script_tools = [entry.split(":")[0] for entry in listed.group(1).split()]
    copied = re.search(r"^COPY --from=tools (.+) /usr/local/bin/$", DOCKERFILE, re.M)
    assert copied is not None
    assert [path.lstrip("/") for path in copied.group(1).split()] == script_tools
    assert re.findall(r"install -m 0755 \S+ /out/(\w+)", DOCKERFILE) == script_tools


def test_kubectl_is_pinned_per_architecture_and_helm_is_the_tests_v4() -> None:
    assert re.search(r"^ARG KUBECTL_VERSION=v\d+\.\d+\.\d+$", DOCKERFILE, re.M)
    for arch in ("AMD64", "ARM64"):
        assert re.search(rf"^ARG KUBECTL_SHA256_{arch}=[0-9a-f]{{64}}$", DOCKERFILE, re.M), arch
        assert re.search(rf"^ARG HELM_SHA256_{arch}=(?:[0-9a-f]{{64}})?$", DOCKERFILE, re.M), arch
    pinned = re.search(r"^HELM_VERSION=(\S+)$", (ROOT / "tools" / "versions.env").read_text(), re.M)
    assert pinned is not None
    assert f"ARG HELM_VERSION={pinned.group(1)}" in DOCKERFILE
    assert "sha256sum -c SHA256SUMS" in DOCKERFILE
    assert '"${TARGETARCH}"' in DOCKERFILE


def pin_guard() -> str:
    """The release build's check of the per-architecture pins, as bash runs it."""
    run = DOCKERFILE[DOCKERFILE.index('RUN case "${TARGETARCH}"') :]
    return run[len("RUN ") : run.index(" && curl")].replace("\\\n", "")  # Dockerfile line continuations


@pytest.mark.parametrize(
    ("arch", "helm_pin", "refused"),
    [
        ("amd64", "", "no sha256 pinned for helm v4.3.1 linux/amd64: set --build-arg HELM_SHA256_AMD64"),
        ("arm64", "abc", "no sha256 pinned for helm v4.3.1 linux/arm64: set --build-arg HELM_SHA256_ARM64"),
        ("s390x", "0" * 64, "unsupported TARGETARCH 's390x' (amd64 or arm64)"),
        ("amd64", "0" * 64, ""),
        ("arm64", "0" * 64, ""),
    ],
)
def test_the_release_build_refuses_to_download_without_a_checksum(arch: str, helm_pin: str, refused: str) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "TARGETARCH": arch,
        "HELM_VERSION": "v4.3.1",
        "KUBECTL_VERSION": "v1.34.1",
        "COSIGN_VERSION": "v3.1.3",
        "HELM_SHA256_AMD64": helm_pin,
        "HELM_SHA256_ARM64": helm_pin,
        "KUBECTL_SHA256_AMD64": "1" * 64,
        "KUBECTL_SHA256_ARM64": "1" * 64,
        "COSIGN_SHA256_AMD64": "2" * 64,
        "COSIGN_SHA256_ARM64": "2" * 64,
    }
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pin_guard()], env=env, capture_output=True, text=True, check=False
    )
    if refused:
        assert proc.returncode == 1
        assert refused in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


def test_a_missing_cosign_pin_stops_the_release_build() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "TARGETARCH": "arm64",
        "HELM_VERSION": "v4.3.1",
        "KUBECTL_VERSION": "v1.34.1",
        "COSIGN_VERSION": "v3.1.3",
        "HELM_SHA256_ARM64": "0" * 64,
        "KUBECTL_SHA256_ARM64": "1" * 64,
        "COSIGN_SHA256_ARM64": "",
    }
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pin_guard()], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert "no sha256 pinned for cosign v3.1.3 linux/arm64: set --build-arg COSIGN_SHA256_ARM64" in proc.stderr


def test_cosign_is_the_pinned_version_with_per_architecture_checksums() -> None:
    """The image's cosign verifies aicr's provenance; it is the version the tests use."""
    pinned = re.search(r"^COSIGN_VERSION=(\S+)$", (ROOT / "tools" / "versions.env").read_text(), re.M)
    assert pinned is not None
    assert f"ARG COSIGN_VERSION={pinned.group(1)}" in DOCKERFILE
    for arch in ("AMD64", "ARM64"):
        assert re.search(rf"^ARG COSIGN_SHA256_{arch}=[0-9a-f]{{64}}$", DOCKERFILE, re.M), arch
    assert '"https://github.com/sigstore/cosign/releases/download/${COSIGN_VERSION}/cosign-linux-${TARGETARCH}"' in (
        DOCKERFILE
    )
    assert "COPY --from=tools /helm /kubectl /cosign /usr/local/bin/" in DOCKERFILE


def test_runtime_is_non_root_with_tini_and_the_runner_entrypoint() -> None:
    assert re.search(r"^USER 65532:65532$", DOCKERFILE, re.M)
    assert 'ENTRYPOINT ["tini", "--", "aicr-runner"]' in DOCKERFILE
    assert 'CMD ["run"]' in DOCKERFILE
    assert "RUN packages=(bash ca-certificates jq tini) missing=()" in DOCKERFILE
    assert 'apt-get install -y --no-install-recommends "${missing[@]}"' in DOCKERFILE
    assert "command -v bash jq tini >/dev/null" in DOCKERFILE
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


def test_dockerignore_keeps_the_context_to_the_runtime() -> None:
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)


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
