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


def test_the_readme_opens_with_a_three_line_install() -> None:
    readme = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert headings[0] == "Install"
    section = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 3
    chart_version = re.search(r"^version: (\S+)$", (ROOT / "chart" / "Chart.yaml").read_text(), flags=re.M)
    assert chart_version
    assert block[0].startswith("helm install aicr oci://ghcr.io/nvidia-aicr/charts/nvidia-aicr ")
    assert f"--version {chart_version.group(1)} " in block[0]
    assert block[1].startswith("helm install aicr ./chart ")
    assert readme.index("## Install") < readme.index("## Two commands")
