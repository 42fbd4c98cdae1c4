"""scripts/bench.py --quick still runs every metric (a smoke test: no thresholds;
the numbers belong in docs/performance.md's measurement table, from a full run, not in a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ensure_tools
from tests.support.podman import built_image

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_ROWS = [
    "relay CPU, 1 MiB of deploy.sh output, console log",
    "relay CPU, 1 MiB of deploy.sh output, json log",
    "relay CPU, 8 MiB of deploy.sh output, console log",
    "relay CPU, 8 MiB of deploy.sh output, json log",
    "runner peak RSS, relay of 8 MiB (against 1 MiB)",
    "one aicr-like call (Go `oras version`), wall",
    "`aicr-runner version`, wall",
    "`aicr-runner --help`, wall",
    "whole `plan` (4 aicr calls, real aicr v0.11.1), wall",
    "whole `plan` floor (4 aicr calls, real aicr v0.11.1; the runner's libraries imported, nothing else",
    "whole `plan` (",
    "whole `plan` floor (",
    "whole `plan` with a crossing checked (fake aicr;",
    "pack pull, 0.02 MB in 3 file layers (2 files), whole process",
    "pack pull, 2 MB in 22 file layers (21 files), whole process",
    "pack pull floor (stdlib-only HTTP, no checks: scripts/pack_floor.py), 2 MB in 22 file layers (21 files)",
    "pack pull floor + the runner's non-HTTP imports (stdlib-only HTTP, no checks: scripts/pack_floor.py), 2 MB in 22",
    "pack pull, 2 MB in registry.yaml + 1 directory layer (20 files), whole process",
    "pack pull floor (stdlib-only HTTP, no checks: scripts/pack_floor.py), 2 MB in registry.yaml + 1 directory",
    "pack pull floor + the runner's non-HTTP imports (stdlib-only HTTP, no checks: scripts/pack_floor.py), 2 MB in reg",
    "pack pull start-up: the runner's imports",
    "release fetch, ",
    "image size, uncompressed (on disk after a pull)",
    "image size, compressed (gzip layers a registry serves)",
    "pull from a loopback registry into an empty store + start, wall",
    "mirror copy, 4 images of 1 MiB, empty target",
    "mirror copy, 4 images of 1 MiB, again (all there)",
]


@pytest.mark.image
@pytest.mark.timeout(600)
def test_the_quick_benchmark_produces_every_row() -> None:
    ensure_tools()
    image = built_image()  # built (or found) before the clock starts: the bench measures it, never builds it
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--markdown", "--image", image],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "cores" in lines[0]
    assert "load average" in lines[0]
    metrics = [line.split(" | ")[0].removeprefix("| ") for line in lines if line.startswith("| ")][1:]
    assert len(metrics) == len(EXPECTED_ROWS), metrics
    for metric, expected in zip(metrics, EXPECTED_ROWS, strict=True):
        assert metric.startswith(expected), (metric, expected)
    for line in lines[3:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        ratio = cells[7]
        assert ratio.endswith("x")
        assert float(ratio[:-1]) > 0
