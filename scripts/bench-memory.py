#!/usr/bin/env python3
"""Peak RSS of a full `aicr-runner run` while deploy.sh prints N bytes of output.

The runner streams child output line by line to the pod log and a per-step file;
this measures that its memory stays flat as the output grows. It runs the real
runner as a subprocess (fake aicr, directory results, pod-log relay into a file)
and samples the runner's VmHWM (peak resident set) from /proc until it exits.

Usage: scripts/bench-memory.py [--sizes-mb 0,10,100] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_aicr import install_fake_aicr  # noqa: E402


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def measure(size_bytes: int, work: Path, fake: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_"))}
    env.update(
        {
            "AICR_RUNNER_CRITERIA__SERVICE": "eks",
            "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
            "AICR_RUNNER_CRITERIA__INTENT": "training",
            "AICR_RUNNER_CRITERIA__OS": "ubuntu",
            "AICR_RUNNER_WORK_DIR": str(work / "work"),
            "AICR_RUNNER_LOG_FORMAT": "json",
            "FAKE_AICR_DEPLOY_OUTPUT_BYTES": str(size_bytes),
        }
    )
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = work / "pod.log"
    started = time.monotonic()
    with pod_log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(work / "results")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _vm_hwm_kib(proc.pid) or 0)
            time.sleep(0.02)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"run failed with exit {proc.returncode}; see {pod_log}")
    deploy_log = work / "work" / "logs" / "deploy.log"
    return {
        "output_mb": size_bytes / 1e6,
        "peak_rss_mb": peak / 1024,
        "seconds": elapsed,
        "deploy_log_mb": deploy_log.stat().st_size / 1e6,
        "pod_log_mb": pod_log.stat().st_size / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", default="0,10,100")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table for the README")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aicr-bench-") as tmp:
        fake = install_fake_aicr(Path(tmp) / "bin")
        for size in (int(float(s) * 1_000_000) for s in args.sizes_mb.split(",")):
            work = Path(tmp) / f"run-{size}"
            work.mkdir()
            rows.append(measure(size, work, fake))
    header = "| deploy.sh output | runner peak RSS | wall time | deploy.log | pod log |"
    lines = [header, "|---:|---:|---:|---:|---:|"] if args.markdown else []
    for r in rows:
        if args.markdown:
            lines.append(
                f"| {r['output_mb']:.0f} MB | {r['peak_rss_mb']:.1f} MiB | {r['seconds']:.1f} s "
                f"| {r['deploy_log_mb']:.1f} MB | {r['pod_log_mb']:.1f} MB |"
            )
        else:
            lines.append(
                f"output={r['output_mb']:.0f}MB peak_rss={r['peak_rss_mb']:.1f}MiB time={r['seconds']:.1f}s "
                f"deploy_log={r['deploy_log_mb']:.1f}MB pod_log={r['pod_log_mb']:.1f}MB"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
