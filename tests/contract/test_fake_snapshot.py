"""The fake aicr's ``snapshot`` (0.11 mode) against the real aicr v0.11.1.

The real CLI always deploys an agent Job, so without a cluster it ends at the
Kubernetes client (exit 8, a 0-byte output file); everything before that is
compared: the flags ``--help`` lists, and the refusals of bad flags (exit codes
and the failure record). The runner's own ``aicr snapshot`` argv must pass the
real flag parsing and checks (it reaches the client: exit 8, not 1 or 2).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aicr_runner.aicr import argv as commands
from aicr_runner.settings import config
from tests.contract.test_fake_contract import both, call
from tests.fake_aicr import install_fake_aicr
from tests.support.real_aicr import RealAicr

_FLAG = re.compile(r"^\s+--([a-z][a-z0-9-]*)", re.MULTILINE)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


def test_help_lists_the_same_flags(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    pair = both(fake, real_aicr, tmp_path, "snapshot", "--help")
    assert (pair.fake.code, pair.real.code) == (0, 0)
    real = set(_FLAG.findall(pair.real.stdout.split("GLOBAL OPTIONS")[0])) - {"help"}
    assert "privileged" in real
    assert "toleration" in real
    assert set(_FLAG.findall(pair.fake.stdout)) - {"help"} == real


@pytest.mark.parametrize(
    "args",
    [
        ("--toleration", "bad"),
        ("--toleration", "gpu=true"),
        ("--node-selector", "bad"),
        ("--require-gpu", "--runtime-class", "nvidia"),
        ("--bogus",),
        ("--privileged=maybe",),
    ],
    ids=" ".join,
)
def test_bad_flags_are_refused_the_same_way(fake: Path, real_aicr: RealAicr, tmp_path: Path, args: tuple[str]) -> None:
    pair = both(fake, real_aicr, tmp_path, "--log-json", "snapshot", *args, "-o", "out.yaml")
    assert pair.fake.code == pair.real.code, (pair.fake.stderr, pair.real.stderr)
    assert pair.real.code in (1, 2)
    assert pair.fake.failure() == pair.real.failure()


def test_the_runners_argv_passes_the_real_flag_checks(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    settings = config.load(
        {
            "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
            "AICR_RUNNER_SNAPSHOT__ENABLED": "true",
            "AICR_RUNNER_SNAPSHOT__PRIVILEGED": "false",
            "AICR_RUNNER_SNAPSHOT__NODE_SELECTOR": '["nvidia.com/gpu.present=true"]',
            "AICR_RUNNER_SNAPSHOT__TOLERATIONS": '["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]',
        }
    )
    out = tmp_path / "real" / "snapshot.yaml"
    argv = commands.snapshot_argv(settings, real_aicr.binary, str(out), "0.11.1")
    (tmp_path / "real").mkdir()
    real = call(real_aicr.binary, tmp_path / "real", argv[1:], {})
    assert real.code == 8, real.stderr
    assert "failed to create Kubernetes client" in real.failure()
    assert out.read_bytes() == b"", "aicr truncates the output before the run"
    fake_out = tmp_path / "fake" / "snapshot.yaml"
    fake_argv = commands.snapshot_argv(settings, fake, str(fake_out), "0.11.1")
    simulated = call(fake, tmp_path / "fake", fake_argv[1:], {"FAKE_AICR_VERSION": "0.11.1"})
    assert simulated.code == 0, simulated.stderr
    assert fake_out.read_text().startswith("kind: Snapshot")
