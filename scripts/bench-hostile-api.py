#!/usr/bin/env python3
"""How long ``run``, ``validate`` and ``fleet`` take against API servers that
never give a usable answer, and ``fleet`` over 200 contexts of mixed health.

Each command is a process of its own, against a loopback stand-in
(tests/support/hostile_server.py): ``hang`` accepts and never answers, ``drip``
sends a 200 and its body one byte every 0.2 s, ``500`` answers every request
with 500. ``run`` and ``validate`` use the fake aicr and the Job path (results
to the API) with ``AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS`` (default 5); ``fleet``
uses ``--timeout`` (default 5) with the hostile cluster and a healthy one. The
200-context row: 50 contexts each healthy, refused (a closed port), hung (a
listener that accepts and never answers) and black-holed (a full listen
backlog: the handshake never completes), loopback only; its wall time and the
rows per state. Numbers go to stdout as a table; the load average goes with them.

Usage: scripts/bench-hostile-api.py [--budget 5] [--timeout 5] [--contexts 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.fake_aicr import install_fake_aicr  # noqa: E402
from tests.integration.test_runs import VALIDATE, clean_env  # noqa: E402
from tests.support.hostile_server import BlackHole, HostileKubeApi, StalledListener  # noqa: E402
from tests.unit.fleet import test_command  # noqa: E402

MODES = ("hang", "drip", "500")
_REPORTS = "/apis/openreports.io/v1alpha1/reports"


def _timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=3600)
    return time.monotonic() - start, done.returncode


def _runner(command: str, server: str, budget: float, tmp: Path, *, fake: Path, recipe: Path) -> tuple[float, int]:
    env = clean_env(
        tmp,
        **VALIDATE,
        KUBECONFIG=str(test_command.kubeconfig(tmp, {"c": server})),
        AICR_RUNNER_NAMESPACE="aicr",
        AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS=f"{budget:g}",
    )
    env.pop("KUBERNETES_SERVICE_HOST", None)
    extra = ["--recipe", str(recipe)] if command == "validate" else []
    return _timed([sys.executable, "-m", "aicr_runner", command, "--aicr-binary", str(fake), *extra], env)


def _fleet(kubeconfig: Path, timeout: float) -> tuple[float, int, str]:
    argv = [sys.executable, "-m", "aicr_runner", "fleet", "-o", "json", "--all-contexts", "--timeout", f"{timeout:g}"]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    start = time.monotonic()
    done = subprocess.run([*argv, "--kubeconfig", str(kubeconfig)], env=env, capture_output=True, check=False)
    return time.monotonic() - start, done.returncode, done.stdout.decode()


def _recorded(fake: Path, tmp: Path) -> Path:
    env = clean_env(tmp, **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    argv = [sys.executable, "-m", "aicr_runner", "run", "--aicr-binary", str(fake), "--results-dir", str(tmp / "r")]
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return tmp / "r" / "aicr-recipe" / "recipe.yaml"


def hostile_rows(budget: float, timeout: float, tmp: Path) -> list[str]:
    fake = install_fake_aicr(tmp / "bin")
    recipe = _recorded(fake, tmp / "install")
    rows = []
    serve = contextlib.contextmanager(test_command.serve)
    for mode in MODES:
        with HostileKubeApi(mode) as api:
            for command in ("run", "validate"):
                folder = Path(tempfile.mkdtemp(dir=tmp))
                took, code = _runner(command, api.url, budget, folder, fake=fake, recipe=recipe)
                rows.append(f"| {command} | {mode} | {took:.1f} s | {code} | write budget {budget:g} s |")
            with serve({_REPORTS: (200, {"items": [test_command.report("g", "g", {"pass": 1})]})}) as ok:
                config = test_command.kubeconfig(Path(tempfile.mkdtemp(dir=tmp)), {"bad": api.url, "good": ok})
                took, code, _ = _fleet(config, timeout)
            rows.append(
                f"| fleet | {mode} | {took:.1f} s | {code} | --timeout {timeout:g} s, with one healthy cluster |"
            )
    return rows


def many_contexts_row(count: int, timeout: float, tmp: Path) -> str:
    serve = contextlib.contextmanager(test_command.serve)
    answers = {_REPORTS: (200, {"items": [test_command.report("gpu", "gpu", {"pass": 16, "skip": 1})]})}
    with serve(answers) as healthy, StalledListener() as hung, BlackHole() as hole:
        kinds = {"healthy": healthy, "refused": test_command.refused_address(), "hung": f"http://127.0.0.1:{hung.port}"}
        kinds["blackholed"] = hole.url
        servers = {f"{kind}-{i:03d}": kinds[kind] for i in range(count // 4) for kind in kinds}
        config = test_command.kubeconfig(tmp, servers)
        took, code, out = _fleet(config, timeout)
    got: Counter[str] = Counter()
    for row in json.loads(out)["rows"]:
        state = row["problem"].split(":", 1)[0] if row["problem"] else row["phase"]
        got[f"{row['context'].split('-')[0]}->{state}"] += 1
    detail = ", ".join(f"{k} {v}" for k, v in sorted(got.items()))
    return f"| fleet | {len(servers)} contexts | {took:.1f} s | {code} | --timeout {timeout:g} s; {detail} |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--contexts", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as folder:
        tmp = Path(folder)
        rows = hostile_rows(args.budget, args.timeout, tmp)
        rows.append(many_contexts_row(args.contexts, args.timeout, tmp))
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print("| command | API server | wall | exit | setting |\n|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
