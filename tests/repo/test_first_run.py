"""What a new user meets first: packaging, git, the README's opening."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_license_is_an_spdx_string_so_setuptools_does_not_warn() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert "setuptools>=77" in requires, "string licenses need setuptools 77 (older ones reject them)"


def test_the_default_plan_folder_is_ignored_by_git() -> None:
    result = subprocess.run(
        ["git", "check-ignore", "--quiet", "aicr-plan/aicr-run-status/report.json"], cwd=ROOT, check=False
    )
    assert result.returncode == 0


def test_the_readme_leads_with_what_works_from_a_checkout() -> None:
    """The two commands first, then an install from this checkout; the OCI chart and
    the image are what the release workflow will publish, never called published."""
    readme = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert headings[:2] == ["Two commands", "Install"]
    first = readme.split("## Two commands\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["bash scripts/dry-run.sh", "bash scripts/test.sh"]
    section = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0].startswith("helm install aicr ./chart ")
    chart = (ROOT / "chart" / "Chart.yaml").read_text()
    version = re.search(r"^version: (\S+)$", chart, flags=re.M)
    app_version = re.search(r'^appVersion: "?([^"\n]+)"?$', chart, flags=re.M)
    assert version
    assert app_version
    prose = " ".join(section.split())
    assert "Nothing is released yet." in prose
    assert f"the tag `v{version.group(1)}`" in prose
    assert f"oci://ghcr.io/nvidia-aicr/charts/nvidia-aicr --version {version.group(1)}" in prose
    assert f"`ghcr.io/nvidia-aicr/aicr-runner:{app_version.group(1)}`" in prose
    assert ".github/workflows/release.yaml" in prose
    assert (ROOT / ".github" / "workflows" / "release.yaml").is_file()
    assert "published" not in readme.lower()
    assert "docker run" not in readme
