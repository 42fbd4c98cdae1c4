"""The fake aicr's ``upgrade-check`` against the aicr CLI contract (section 12).

Which facts come from where. No aicr 1.x binary runs here (its Go module is not
served), so every fact below is from the **1.x documentation and source only**,
never observed running:

* the command exists from v1.0.0 on, and v0.11.1 has none (v0.11.1 *is* observed:
  ``tests/contract/test_fake_contract.py::test_what_0_11_lacks`` runs the real one);
* ``--from`` a recipe file, a bundle directory, ``cm://ns/name`` or ``cluster``;
  ``--to`` required with ``--from cluster``; ``--deployer`` required with
  ``--from cluster`` or when a component needs steps;
* ``--fail-on-error`` defaults to true; ``--format`` defaults to table;
* exit 0 when every component is safe, exit 2 (CONFLICT, ``upgrade check failed:
  N component change(s) need attention``) when any is manual, blocked, unknown
  or unversioned, the report written first;
* the log line ``upgrade check complete components=N failing=M``;
* the verdicts: safe, manual (with steps), blocked (with the earliest recorded
  starting point), unknown, unversioned.

Not documented at all, so the fake's (and the runner's) own reading: the JSON
field names (``components[]`` of ``name``, ``from``, ``to``, ``verdict``,
``steps``, ``earliestFrom``, ``reference``), which the runner parses in
``aicr_runner.aicr.upgrade_check.parse_report``. A real 1.x report with other
names is refused there as a broken contract (exit 30), never taken as safe.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.aicr.capabilities import AicrVersion, HelpProbe, has_upgrade_check
from aicr_runner.aicr.upgrade_check import Verdict, parse_report
from tests.fake_aicr import install_fake_aicr

CRITERIA = ["--accelerator", "h100"]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


def aicr(fake: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], **env}
    return subprocess.run([str(fake), *args], capture_output=True, text=True, env=base, check=False, timeout=60)


@pytest.fixture(scope="module")
def recipes(fake: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fake's h100 recipe, and the same with gpu-operator and nfd moved."""
    root = tmp_path_factory.mktemp("recipes")
    old = root / "old.yaml"
    assert aicr(fake, "recipe", *CRITERIA, "--output", str(old)).returncode == 0
    doc = yaml.safe_load(old.read_text())
    for ref in doc["componentRefs"]:
        ref["version"] = {"gpu-operator": "v26.3.3", "nfd": "v0.18.2"}.get(ref["name"], ref["version"])
    new = root / "new.yaml"
    new.write_text(yaml.safe_dump(doc))
    return old, new


def check(fake: Path, old: Path, new: Path, out: Path, table: dict[str, Any], *extra: str) -> tuple[int, str]:
    proc = aicr(
        fake,
        "upgrade-check",
        "--from",
        str(old),
        "--to",
        str(new),
        "--deployer",
        "helm",
        "-t",
        "json",
        "--output",
        str(out),
        *extra,
        FAKE_AICR_UPGRADE_TRANSITIONS=json.dumps(table),
    )
    return proc.returncode, proc.stderr


def test_every_component_safe_exits_0_and_the_runner_reads_the_report(
    fake: Path, recipes: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = recipes
    table = {"gpu-operator": {"verdict": "safe"}, "nfd": {"verdict": "safe"}}
    code, stderr = check(fake, old, new, tmp_path / "r.json", table)
    assert code == 0, stderr
    assert "upgrade check complete: components=12 failing=0" in stderr
    verdicts = {c.name: c.verdict for c in parse_report((tmp_path / "r.json").read_text())}
    assert set(verdicts.values()) == {Verdict.SAFE}
    assert len(verdicts) == 12


def test_attention_exits_2_conflict_with_the_report_written_first(
    fake: Path, recipes: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = recipes
    table = {
        "gpu-operator": {"verdict": "blocked", "earliestFrom": "v25.10.2", "reference": "UPGRADING.md"},
        "nfd:0.17.3:v0.18.2": {"verdict": "manual", "steps": ["relabel the nodes"]},
    }
    code, stderr = check(fake, old, new, tmp_path / "r.json", table)
    assert code == 2, stderr
    assert "upgrade check failed: 2 component change(s) need attention" in stderr
    assert "[CONFLICT]" in stderr
    by_name = {c.name: c for c in parse_report((tmp_path / "r.json").read_text())}
    assert (by_name["gpu-operator"].verdict, by_name["gpu-operator"].earliest_from) == (Verdict.BLOCKED, "v25.10.2")
    assert by_name["gpu-operator"].source == "v25.10.1"
    assert (by_name["nfd"].verdict, by_name["nfd"].steps) == (Verdict.MANUAL, ("relabel the nodes",))


def test_a_move_without_a_record_is_unknown_and_fail_on_error_false_exits_0(
    fake: Path, recipes: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = recipes
    # The nfd record names another move: it does not apply to this one.
    code, _ = check(fake, old, new, tmp_path / "r.json", {"nfd:v0.1.0:v0.2.0": {"verdict": "safe"}})
    assert code == 2
    by_name = {c.name: c.verdict for c in parse_report((tmp_path / "r.json").read_text())}
    assert (by_name["gpu-operator"], by_name["nfd"]) == (Verdict.UNKNOWN, Verdict.UNKNOWN)
    code, _ = check(fake, old, new, tmp_path / "r2.json", {}, "--fail-on-error=false")
    assert code == 0
    assert (tmp_path / "r2.json").is_file()


def test_from_cluster_needs_to_and_deployer(fake: Path, recipes: tuple[Path, Path]) -> None:
    proc = aicr(fake, "upgrade-check", "--from", "cluster", "--to", str(recipes[1]))
    assert proc.returncode == 2
    assert "--from cluster requires --to and --deployer" in proc.stderr


def test_the_capability_is_read_from_the_version_or_the_help(fake: Path) -> None:
    one = AicrVersion.parse("aicr version v1.2.0")
    old = AicrVersion.parse("aicr version 0.11.1")
    assert one is not None
    assert old is not None
    assert (has_upgrade_check(one), has_upgrade_check(old)) == (True, False)
    dev = aicr(fake, "--help", FAKE_AICR_VERSION="dev").stdout
    legacy = aicr(fake, "--help", FAKE_AICR_VERSION="0.11.1").stdout
    with_it = AicrVersion.detected("aicr version dev", HelpProbe.read(dev, {}))
    without = AicrVersion.detected("aicr version dev", HelpProbe.read(legacy, {}))
    assert (has_upgrade_check(with_it), has_upgrade_check(without)) == (True, False)
