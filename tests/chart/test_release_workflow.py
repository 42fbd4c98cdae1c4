"""The release workflow signs what it publishes, never overwrites, pins every Action
by commit SHA and hands the image digest to the packaged chart."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))
RELEASE = ROOT / ".github" / "workflows" / "release.yaml"
_PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+)@(?P<sha>[0-9a-f]{40}) # (?P<version>v\d+\.\d+\.\d+)$")


def uses_lines(path: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\s*(?:- )?uses: (.+)$", path.read_text(), re.M)]


def release() -> dict[str, Any]:
    return yaml.safe_load(RELEASE.read_text())  # type: ignore[no-any-return]


def script(job: str) -> str:
    return "\n".join(step.get("run", "") for step in release()["jobs"][job]["steps"])


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_sha_with_its_version(workflow: Path) -> None:
    lines = uses_lines(workflow)
    assert lines
    for line in lines:
        assert _PINNED.match(line), f"{workflow.name}: {line!r} is not 'owner/repo@<40 hex> # vX.Y.Z'"


def test_one_action_version_is_one_sha_everywhere() -> None:
    seen: dict[str, tuple[str, str]] = {}
    for workflow in WORKFLOWS:
        for line in uses_lines(workflow):
            match = _PINNED.match(line)
            assert match
            pin = (match["sha"], match["version"])
            assert seen.setdefault(match["action"], pin) == pin, f"{match['action']} pinned two ways"
    assert seen, "no workflow uses an action"


def test_nothing_is_pushed_before_both_tags_are_known_to_be_new() -> None:
    jobs = release()["jobs"]
    check = script("check")
    assert '"$IMAGE" "$CHART"' in check
    assert "is already published; tags are never overwritten" in check
    assert "cannot tell whether $ref exists" in check, "an unclear answer fails, it is not taken as 'new'"
    assert "check" in jobs["image"]["needs"]
    assert "image" in jobs["chart"]["needs"]
    # No path that skips the build and reuses an existing tag.
    assert not any("if" in step for step in jobs["image"]["steps"])


def test_the_image_and_the_chart_are_signed_keylessly_with_sbom_and_provenance() -> None:
    jobs = release()["jobs"]
    for job in ("image", "chart"):
        assert jobs[job]["permissions"]["id-token"] == "write", job
    assert release()["permissions"] == {"contents": "read"}, "write access only where a job needs it"
    image = script("image")
    assert 'cosign sign --yes --recursive "$ref"' in image
    assert 'ref="$IMAGE@$DIGEST"' in image, "sign the pushed digest, never a tag"
    assert '--type spdxjson --predicate "sbom-$name.spdx.json" "$ref"' in image
    assert '--type slsaprovenance --predicate "provenance-$name.json" "$ref"' in image
    build = next(s for s in jobs["image"]["steps"] if s.get("id") == "build")
    assert build["with"]["sbom"] is True
    assert build["with"]["provenance"] == "mode=max"
    chart = script("chart")
    assert 'cosign sign --yes "$REGISTRY/nvidia-aicr@$chart_digest"' in chart
    # cosign is the pinned build of tools/versions.env, not a downloaded installer.
    assert "bootstrap-tools.sh cosign" in image
    assert "bootstrap-tools.sh helm cosign" in chart


def test_the_packaged_chart_gets_the_built_image_digest() -> None:
    jobs = release()["jobs"]
    assert jobs["image"]["outputs"]["digest"] == "${{ steps.build.outputs.digest }}"
    assert jobs["chart"]["env"]["DIGEST"] == "${{ needs.image.outputs.digest }}"
    chart = script("chart")
    assert 'scripts/chart-metadata.py --chart build/nvidia-aicr --image-digest "$DIGEST"' in chart
    assert "helm package build/nvidia-aicr --destination dist" in chart
    assert chart.index("chart-metadata.py") < chart.index("helm package")


def test_the_release_image_is_built_from_the_inputs_script_for_both_architectures() -> None:
    """The release path is the local one (scripts/image-inputs.sh, then the
    Dockerfile on the directory it makes) for amd64 and arm64: no base image, no
    downloaded binary, no checksum that has to be set by hand."""
    jobs = release()["jobs"]
    image = script("image")
    assert "bash scripts/image-inputs.sh --arch amd64,arm64 --out build/image" in image
    build = next(s for s in jobs["image"]["steps"] if s.get("id") == "build")
    assert build["with"]["context"] == "build/image"
    assert build["with"]["file"] == "Dockerfile"
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    steps = [s.get("uses", "").split("@")[0] or s.get("name", "") for s in jobs["image"]["steps"]]
    assert steps.index("docker/setup-qemu-action") < steps.index("Make the build context (linux/amd64, linux/arm64)")
    assert "mmdebstrap debian-archive-keyring" in image
    assert "PYTHON_IMAGE" not in RELEASE.read_text()
