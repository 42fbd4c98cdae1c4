"""What docs/installing.md tells users to set, read from the page itself, so a test
that uses it and the page cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

INSTALLING = Path(__file__).resolve().parents[2] / "docs" / "installing.md"


def documented_extra_rules() -> list[dict[str, Any]]:
    """``rbac.extraRules`` of the YAML block in the "Permissions" section: what the
    recipe eks/h100/training/ubuntu needs beyond the least-privilege ClusterRole."""
    section = INSTALLING.read_text().split("\n## Permissions\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "extraRules" in b]
    assert len(blocks) == 1, (
        f"{INSTALLING}: expected one YAML block with rbac.extraRules under Permissions, got {len(blocks)}"
    )
    rules: list[dict[str, Any]] = yaml.safe_load(blocks[0])["rbac"]["extraRules"]
    return rules
