"""The mirror's copy of the recipe eks/h100/training/ubuntu's own list, beside the copy
tools' command lines on the same list.

A benchmark, not a test: CI does not collect it (its file name does not start with
``test_``); ``scripts/bench-recipe-mirror.py`` runs it. It builds the upstream of
``e2e/test_air_gapped_recipe.py`` (its ``upstream`` fixture: the recipe's real charts
under their repositories' names, the real GPU Operator, deployment validator and
kube-state-metrics images, one labelled stand-in image under every other image
name), takes the list ``aicr-runner mirror --list -o json`` printed there, and then
times, in alternating pairs, into a plain-HTTP registry on loopback:

- the runner: ``copy_all`` of that list in a fresh Python process, what ``mirror
  --to`` does once it has its list (digests read in process, ``oras cp`` for an
  image or OCI chart the target lacks, ``helm pull`` and ``helm push`` for a
  repository chart, four items at a time, then its check of every item by digest);
- the tools: ``oras cp`` for each image and OCI chart and ``helm pull`` + ``helm
  push`` for each repository chart, one after the other, from bash.

Both run where the upstream names resolve to the upstream (``UpstreamNetwork``) and
copy the same items to the same target paths: into an empty target (a new prefix
each time) and again (a prefix both filled before). The aicr release files (HTTP
files: ``mirror --to`` leaves them to a folder of the user's) and the images absent
upstream (pinned by digests no stand-in has) are left out on both sides.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aicr_runner.mirror.copy import source_of, target_of
from aicr_runner.mirror.items import Item, Kind
from e2e.harness.registry import Registry, start_registry
from e2e.test_air_gapped_recipe import Upstream, _env, upstream  # noqa: F401 - the fixture, used by name
from e2e.tools import tool

#: Pairs per row (``BENCH_REPEAT`` overrides).
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))

_RUNNER_COPY = """
import json, sys
from aicr_runner.mirror.copy import copy_all
from aicr_runner.mirror.items import Item
from aicr_runner.mirror.oras_copier import OrasCopier
target, listing, oras, helm = sys.argv[1:5]
items = [Item.from_json(entry) for entry in json.loads(open(listing).read())]
copy_all(items, target, OrasCopier(oras, helm, plain_http=frozenset({target.removeprefix("oci://").split("/")[0]})))
"""


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Registry]:
    registry = start_registry(tmp_path / "target", anonymous=True)
    try:
        yield registry
    finally:
        registry.process.stop()


def _copied_items(listed: list[dict[str, object]], missing: list[str]) -> list[Item]:
    return [
        Item.from_json(entry)
        for entry in listed
        if entry["kind"] != Kind.FILE.value and entry["reference"] not in missing
    ]


def _tools_script(items: list[Item], prefix: str) -> str:
    """The same copies, one command line after the other, as a user of the tools writes them."""
    oras, helm = shlex.quote(str(tool("oras"))), shlex.quote(str(tool("helm")))
    lines = ["set -euo pipefail", "scratch=$(mktemp -d)", "trap 'rm -rf \"$scratch\"' EXIT"]
    for item in items:
        to = target_of(item, prefix)
        if item.kind is Kind.CHART and not item.chart_source.startswith("oci://"):
            repository = "oci://" + to.rsplit(":", 1)[0].rsplit("/", 1)[0]
            lines.append(
                f"{helm} pull {shlex.quote(item.chart_name)} --repo {shlex.quote(item.chart_source)} "
                f'--version {shlex.quote(item.version)} -d "$scratch" >/dev/null'
            )
            archive = f'"$scratch"/{shlex.quote(f"{item.chart_name}-{item.version}.tgz")}'
            lines.append(f"{helm} push {archive} {shlex.quote(repository)} --plain-http >/dev/null 2>&1")
            lines.append(f"rm -f {archive}")
        else:
            lines.append(f"{oras} cp --to-plain-http {shlex.quote(source_of(item))} {shlex.quote(to)} >/dev/null")
    return "\n".join(lines) + "\n"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
    took = time.monotonic() - started
    assert done.returncode == 0, f"{argv[-4:]} exit {done.returncode}\n{done.stderr[-3000:]}"
    return took


def _pairs(
    runner: Callable[[str], float], tools: Callable[[str], float], prefix: Callable[[], str]
) -> dict[str, list[float]]:
    """``REPEAT`` pairs, alternating which side goes first, each side on the prefix ``prefix()`` gives."""
    times: dict[str, list[float]] = {"runner": [], "tools": []}
    for index in range(REPEAT):
        order = [("tools", tools), ("runner", runner)] if index % 2 == 0 else [("runner", runner), ("tools", tools)]
        for side, run in order:
            times[side].append(run(prefix()))
    return times


def test_measure_the_mirror_copy_of_the_recipe_list_beside_oras_and_helm(
    upstream: Upstream,  # noqa: F811 - the fixture imported above, by its name
    target: Registry,
    tmp_path: Path,
) -> None:
    items = _copied_items(upstream.listed, upstream.missing)
    listing = tmp_path / "items.json"
    listing.write_text(json.dumps([i.as_json() for i in items]))
    env = _env(tmp_path, upstream.network.ca_file)
    (tmp_path / "home").mkdir(exist_ok=True)
    oras, helm = str(tool("oras")), str(tool("helm"))
    scripts = itertools.count()

    def runner(prefix: str) -> float:
        argv = [sys.executable, "-c", _RUNNER_COPY, f"oci://{prefix}", str(listing), oras, helm]
        return _timed(upstream.network.argv(argv), env)

    def tools(prefix: str) -> float:
        script = tmp_path / f"tools-{next(scripts)}.sh"
        script.write_text(_tools_script(items, prefix))
        return _timed(upstream.network.argv(["bash", str(script)]), env)

    prefixes = (f"{target.host}/empty{n}" for n in itertools.count())
    empty = _pairs(runner, tools, lambda: next(prefixes))
    runner(f"{target.host}/again")  # filled once; every timed copy then finds everything there
    again = _pairs(runner, tools, lambda: f"{target.host}/again")
    # A registry keeps each blob once whatever the repositories: its blobs are the set's unique bytes.
    size = sum(f.stat().st_size for f in target.storage.rglob("data") if "blobs" in f.parts)
    print(_table(items, size, {"into an empty target": empty, "again (all there)": again}))


def _table(items: list[Item], size: int, rows: dict[str, dict[str, list[float]]]) -> str:
    kinds = {kind: sum(1 for i in items if i.kind is kind) for kind in Kind}
    load = os.getloadavg()
    lines = [
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1/5/15 min) after "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}; {REPEAT} pairs a row; {len(items)} items "
        f"({kinds[Kind.IMAGE]} images, {kinds[Kind.CHART]} charts, {kinds[Kind.ARTIFACT]} artifacts), "
        f"{size / 1e6:.1f} MB of unique blobs in the target",
        "| copy of the recipe's list | runner min | runner median | oras/helm min | oras/helm median | ratio | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, times in rows.items():
        runner, tools = statistics.median(times["runner"]), statistics.median(times["tools"])
        lines.append(
            f"| {label} | {min(times['runner']):.2f} s | {runner:.2f} s | {min(times['tools']):.2f} s "
            f"| {tools:.2f} s | {runner / tools:.2f}x | ≤ 1.1x |"
        )
    return "\n".join(lines)
