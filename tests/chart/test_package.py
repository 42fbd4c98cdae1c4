"""The packaged chart: what `helm package` ships, what `helm show` tells a user who
has nothing else, and Chart.yaml metadata that agrees with values.yaml and the release."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART, ROOT, helm, load_script

RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
DIGEST = "sha256:" + "e" * 64


def chart_yaml(chart: Path = CHART) -> dict[str, Any]:
    return yaml.safe_load((chart / "Chart.yaml").read_text())  # type: ignore[no-any-return]


def package(chart: Path, dest: Path) -> Path:
    proc = helm("package", str(chart), "--destination", str(dest))
    assert proc.returncode == 0, proc.stderr
    meta = chart_yaml(chart)
    return dest / f"{meta['name']}-{meta['version']}.tgz"


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package(CHART, tmp_path_factory.mktemp("package"))


def test_the_package_carries_readme_license_and_schema(packaged: Path) -> None:
    with tarfile.open(packaged) as tar:
        names = set(tar.getnames())
        readme = tar.extractfile("nvidia-aicr/README.md")
        assert readme is not None
        assert readme.read().decode() == (CHART / "README.md").read_text()
    assert {
        "nvidia-aicr/README.md",
        "nvidia-aicr/LICENSE",
        "nvidia-aicr/values.schema.json",
        "nvidia-aicr/values.yaml",
        "nvidia-aicr/Chart.yaml",
    } <= names


def test_helm_show_readme_is_useful_on_its_own(packaged: Path) -> None:
    proc = helm("show", "readme", str(packaged))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for heading in ("## Installing the chart", "## Values", "## aicr provenance", "## Which criteria?"):
        assert f"\n{heading}\n" in text, heading
    assert "`aicr.provenance.mode` is `require` by default" in text
    assert "helm upgrade --install aicr oci://" in text


def test_helm_show_values_keeps_the_descriptions(packaged: Path) -> None:
    proc = helm("show", "values", str(packaged))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == (CHART / "values.yaml").read_text().rstrip("\n")
    assert "# -- Verify aicr's Sigstore provenance" in proc.stdout


def test_the_sections_the_chart_messages_name_are_in_the_chart_readme() -> None:
    """NOTES and the chart's refusals say README "Permissions" / "Uninstalling": a chart
    user's README is the one `helm show readme` prints."""
    readme = (CHART / "README.md").read_text()
    messages = "".join(p.read_text() for p in (CHART / "templates").glob("*") if p.suffix in (".txt", ".tpl"))
    named = set(re.findall(r'README \\?"([^"\\]+)\\?"', messages))
    assert named >= {"Permissions", "Uninstalling"}, named
    for section in named:
        assert f"\n## {section}\n" in readme, section


def test_the_chart_readme_stands_alone_on_artifact_hub() -> None:
    """Artifact Hub shows the page without the repository: every link is absolute, into
    this project's repository or aicr's, and no test file is cited as a reference."""
    readme = (CHART / "README.md").read_text()
    home = chart_yaml()["home"]
    targets = re.findall(r"\]\(([^)\s]+)\)", readme) + re.findall(r"<(https?://[^>]+)>", readme)
    assert targets
    for target in targets:
        assert target.startswith("#") or target.startswith((home, "https://github.com/NVIDIA/aicr")), target
    assert not re.search(r"\b(tests|e2e)/[\w/]*\.py\b", readme)


def test_the_chart_readme_states_the_measured_image_size() -> None:
    """One set of figures: the chart's page quotes the image sizes scripts/bench.py measured
    (the rows of docs/performance.md's measurement table), and the supply-chain page the same ones."""
    measured = (ROOT / "docs" / "performance.md").read_text()
    sizes = {}
    for kind in ("uncompressed", "compressed"):
        pattern = rf"^\| image size, {kind} .*?\| aicr-runner image \| [\d.]+ MB \| ([\d.]+) MB \|"
        row = re.search(pattern, measured, re.M)
        assert row, kind
        sizes[kind] = row.group(1)
    for page in (CHART / "README.md", ROOT / "docs" / "supply-chain.md"):
        text = " ".join(page.read_text().split())
        stated = {kind: size for size, kind in re.findall(r"([\d.]+) MB (uncompressed|compressed)", text)}
        assert stated == sizes, page.name


def test_the_license_is_apache_2_in_the_repository_and_the_chart() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert (CHART / "LICENSE").read_text() == text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()


# -- Chart.yaml metadata ------------------------------------------------------------------------


def test_home_sources_and_maintainers_name_this_project() -> None:
    meta = chart_yaml()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # The release pushes ghcr.io/<owner>/aicr-runner from github.com/<owner>/aicr-runner.
    owner = values["image"]["repository"].removeprefix("ghcr.io/").split("/")[0]
    project = f"https://github.com/{owner}/aicr-runner"
    assert meta["home"] == project
    assert meta["sources"][0] == project
    assert "https://github.com/NVIDIA/aicr" not in meta["sources"], "sources are this project's"
    assert meta["maintainers"]
    assert all(m.get("name") and m.get("url", "").startswith("https://") for m in meta["maintainers"])
    annotations = meta["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    links = yaml.safe_load(annotations["artifacthub.io/links"])
    assert {"name": "source", "url": project} in links


def test_artifacthub_images_and_prerelease_agree_with_values_and_version() -> None:
    meta = chart_yaml()
    annotations = meta["annotations"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    [image] = yaml.safe_load(annotations["artifacthub.io/images"])
    tag = values["image"]["tag"] or meta["appVersion"]
    assert image["image"] == f"{values['image']['repository']}:{tag}"
    assert image["platforms"] == ["linux/amd64", "linux/arm64"]
    assert annotations["artifacthub.io/prerelease"] == ("true" if "-" in meta["version"] else "false")
    changes = yaml.safe_load(annotations["artifacthub.io/changes"])
    assert changes
    assert all(c["kind"] in {"added", "changed", "deprecated", "removed", "fixed", "security"} for c in changes)
    assert all(c["description"] for c in changes)
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "chart-metadata.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_metadata_generator_notices_drift_and_prereleases() -> None:
    gen = load_script("chart-metadata")
    chart_text = (CHART / "Chart.yaml").read_text()
    values_text = (CHART / "values.yaml").read_text()
    moved = values_text.replace("repository: ghcr.io/nvidia-aicr/aicr-runner", "repository: ghcr.io/acme/runner")
    assert "image: ghcr.io/acme/runner:0.1.0\n" in gen.synced(chart_text, moved)
    rc = chart_text.replace("version: 0.4.0", "version: 0.5.0-rc.1")
    assert 'artifacthub.io/prerelease: "true"' in gen.synced(rc, values_text)
    with pytest.raises(gen.MetadataError, match="expected sha256"):
        gen.with_digest(values_text, "sha256:short")


def test_the_release_digest_reaches_the_packaged_chart(tmp_path: Path) -> None:
    """What the release does: the built digest into the packaged chart's defaults,
    so a default install pulls repository@digest."""
    copy = tmp_path / "nvidia-aicr"
    shutil.copytree(CHART, copy)
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            str(ROOT / "scripts" / "chart-metadata.py"),
            "--chart",
            str(copy),
            "--image-digest",
            DIGEST,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    packaged = package(copy, tmp_path / "dist")
    values = yaml.safe_load(helm("show", "values", str(packaged)).stdout)
    assert values["image"]["digest"] == DIGEST
    shown = yaml.safe_load(helm("show", "chart", str(packaged)).stdout)
    [image] = yaml.safe_load(shown["annotations"]["artifacthub.io/images"])
    assert image["image"] == f"ghcr.io/nvidia-aicr/aicr-runner:0.1.0@{DIGEST}"
    rendered = helm("template", "t", str(packaged), "--set", "accelerator=h100")
    assert rendered.returncode == 0, rendered.stderr
    assert f'image: "ghcr.io/nvidia-aicr/aicr-runner@{DIGEST}"' in rendered.stdout
    # The repository's own chart keeps an empty digest: only packages carry one.
    assert yaml.safe_load((CHART / "values.yaml").read_text())["image"]["digest"] == ""
