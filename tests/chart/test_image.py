"""The runner image (Dockerfile) and the release workflow: linted, and consistent
with what the chart mounts and sets. There is no Docker engine here, so the image
is checked statically."""

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
    froms = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", DOCKERFILE, re.M)
    assert [image for image, _ in froms] == ["${PYTHON_IMAGE}"] * 3
    assert [stage for _, stage in froms] == ["builder", "tools", ""]
    assert "COPY --from=builder /opt/venv /opt/venv" in DOCKERFILE


@pytest.mark.parametrize("tool", ["HELM", "KUBECTL"])
def test_tools_are_pinned_per_architecture_and_checked(tool: str) -> None:
    assert re.search(rf"^ARG {tool}_VERSION=v\d+\.\d+\.\d+$", DOCKERFILE, re.M)
    for arch in ("AMD64", "ARM64"):
        assert re.search(rf"^ARG {tool}_SHA256_{arch}=[0-9a-f]{{64}}$", DOCKERFILE, re.M), arch
    assert "sha256sum -c SHA256SUMS" in DOCKERFILE
    assert '"${TARGETARCH}"' in DOCKERFILE
    assert "unsupported TARGETARCH" in DOCKERFILE


def test_runtime_is_non_root_with_tini_and_the_runner_entrypoint() -> None:
    assert re.search(r"^USER 65532:65532$", DOCKERFILE, re.M)
    assert 'ENTRYPOINT ["tini", "--", "aicr-runner"]' in DOCKERFILE
    assert 'CMD ["run"]' in DOCKERFILE
    for package in ("bash", "jq", "ca-certificates", "tini"):
        assert re.search(rf"apt-get install -y --no-install-recommends [^\n]*\b{package}\b", DOCKERFILE), package
    for label in ("title", "description", "licenses", "version", "revision", "created"):
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
