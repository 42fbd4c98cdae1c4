#!/usr/bin/env python3
"""The runner against the shell pipeline it replaces, metric by metric.

Every row of the measurement table in docs/performance.md comes from here. Each metric runs
the runner and its shell anchor in alternating pairs on loopback fixtures this
script makes itself, and prints min and median of each side and the ratio of
the medians (runner / shell):

* relay CPU: deploy.sh printing N bytes, relayed by the runner's deploy step
  (CPU of the runner process only) against ``deploy.sh | tee deploy.log``
  (CPU of ``tee`` only), in the console and the JSON log format;
* runner memory: peak RSS of that relay process, at the big size against the
  small one (flat means a ratio near 1);
* overhead per aicr call: one child run through the runner's step path against
  ``subprocess.run`` of the same argv, in one process (the child is the Go
  ``oras version``, since the real Go aicr is not available here: like aicr it
  prints a few lines and exits);
* ``aicr-runner version`` / ``--help`` wall against ``python -c pass``;
* whole ``plan`` wall against the same aicr commands run by a shell script,
  twice: with the real aicr v0.11.1 (a Go binary; the release folder named by
  ``AICR_TEST_RELEASES_DIR``, which scripts/test.sh sets: ``v0.11.1/`` with the
  release archive and its checksums), where the row's note is the runner's own
  overhead (median minus median), and with the contract-faithful fake aicr from
  tests/fake_aicr (its own start-up is Python's, so both sides pay it); each with
  its floor: the same calls made by scripts/plan_floor.py, which imports the
  runner's libraries (pydantic-settings before the first call, structlog and
  PyYAML while it answers) and does nothing else;
* what the upgrade check adds: whole ``plan --upgrade-from`` (a crossing whose
  components are all safe) against the same ``plan`` without it, fake aicr;
* pack pull, whole process, against the Go ``oras pull`` (a local
  ``docker-registry``);
* release fetch (download, verify, extract), whole process, against
  ``curl`` + ``sha256sum -c`` + ``tar`` (a local HTTP server). The real aicr
  release from ``$AICR_TEST_RELEASES_DIR`` (scripts/test.sh sets it) is served
  when it is there for this machine's architecture; otherwise a synthetic
  archive of a Go binary's bytes of the same size stands in, and the row says so.
* the image (``--image REF``, default what scripts/build-image.sh builds): its
  size uncompressed and compressed against the budgets of tests/support/image_metrics.py,
  and the wall time to pull it from a loopback ``docker-registry`` into an empty
  podman store and run ``aicr-runner version``, against the same for its bare
  Debian base (its first layer alone) running ``python3 -c``.

Usage: scripts/bench.py [--quick] [--markdown] [--relay-mib 100,1024] [--repeat N] [--runtime-venv DIR]
                        [--only METRICS] [--mirror-images N] [--mirror-mib M]

``--quick`` runs small sizes in under a minute (CI runs it as a smoke test,
without thresholds). Load average and core count are printed with the table:
the numbers mean something only next to them.

The runner's Python modules are compiled once, into a bytecode cache of the
benchmark's own (``PYTHONPYCACHEPREFIX``), before anything is timed: the image
ships them compiled, so a run that compiled them would time the build, not
the runner.

``--runtime-venv DIR`` runs the whole benchmark on a venv holding only
requirements.lock (what the image installs; made in DIR when it is not there,
with pip and the lock's hashes) instead of the development venv. The test extras
change what the runner's libraries import: with click, rich and pygments
installed, ``import httpx`` also loads httpx's command line client and structlog
loads rich for its tracebacks; the image has none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

TOOLS = ROOT / ".tools" / "bin"
ORAS = TOOLS / "oras"
DOCKER_REGISTRY = TOOLS / "docker-registry"
PYTHON = sys.executable
RUNNER = Path(PYTHON).parent / "aicr-runner"
CRITERIA = {"service": "eks", "accelerator": "h100", "intent": "training", "os": "ubuntu"}
MIB = 1024 * 1024
#: A helm --debug-like line, 122 bytes with its newline (the issue's 100 MiB had 859k lines).
RELAY_LINE = (
    "helm.go:84: [debug] Created tunnel using local port: '40593' ... "
    "upgrade.go:142: [debug] preparing upgrade for gpu-operator ok"
)


@dataclass
class Row:
    metric: str
    goal: str
    runner_label: str
    shell_label: str
    unit: str
    runner: list[float] = field(default_factory=list)
    shell: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def ratio(self) -> float:
        shell = statistics.median(self.shell)
        return statistics.median(self.runner) / shell if shell else float("inf")


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit == "ms":
        return f"{value * 1000:.1f} ms"
    if unit in ("MiB", "MB"):
        return f"{value:.1f} {unit}"
    return f"{value:.3g} {unit}"


def _paired(repeat: int, runner: Callable[[], float], shell: Callable[[], float], row: Row) -> Row:
    """Alternate the two sides so load changes hit both alike; the first pair
    starts with the shell, the next with the runner, and so on."""
    for index in range(repeat):
        order = (shell, runner) if index % 2 == 0 else (runner, shell)
        for side in order:
            value = side()
            (row.runner if side is runner else row.shell).append(value)
    return row


def _wall(argv: Sequence[str], cpu: list[float] | None = None, **kwargs: object) -> float:
    """Wall time of ``argv``; its CPU time (user + system, children included) goes to ``cpu``.

    CPU time moves far less than wall time with the load of a shared machine, so
    the rows that spawn whole processes show both."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return wall


def _cpu_note(runner_cpu: list[float], shell_cpu: list[float]) -> str:
    return f"CPU medians {statistics.median(runner_cpu):.3f} s vs {statistics.median(shell_cpu):.3f} s"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(url: str, accept: Callable[[int], bool]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback fixture
                if accept(response.status):
                    return
        except urllib.error.HTTPError as exc:
            exc.close()
            if accept(exc.code):
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"fixture at {url} did not come up")


@contextlib.contextmanager
def _server(argv: Sequence[str], url: str, log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    with log.open("wb") as handle:
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_http(url, lambda status: status in (200, 401))
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


#: The benchmark's bytecode cache (set by main): compiled once, as in the image.
PYCACHE: Path | None = None


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("AICR_RUNNER_", "FAKE_AICR_"))}
    # This tree's sources first, ahead of whatever the venv has installed.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if PYCACHE is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def _compile_bytecode() -> None:
    """Fill the benchmark's bytecode cache with the runner and everything it imports."""
    subprocess.run(
        [
            PYTHON,
            "-c",
            "import aicr_runner.cli, aicr_runner.wiring, aicr_runner.aicr.release, aicr_runner.pack.pull, yaml",
        ],
        env=_base_env(),
        check=True,
    )
    subprocess.run([str(RUNNER), "--help"], env=_base_env(), check=True, stdout=subprocess.DEVNULL)


# --- relay -------------------------------------------------------------------------------


#: Components the relay's deploy.sh reports, each with aicr 1.x's start and result lines.
RELAY_COMPONENTS = 50


def _write_generator(directory: Path, size: int) -> Path:
    """A deploy.sh that prints ``size`` bytes of helm-debug-like lines, as
    ``RELAY_COMPONENTS`` components each framed by its start and result line (so
    the runner's per-component progress is parsed and written as in a deploy)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "deploy.sh"
    n, share = RELAY_COMPONENTS, size // RELAY_COMPONENTS
    script.write_text(
        "#!/usr/bin/env bash\n"
        f"for i in $(seq 1 {n}); do\n"
        f'  echo "┌─ [$i/{n}] component-$i  →  ns-$i"\n'
        f"  yes {RELAY_LINE!r} | head -c {share}\n"
        '  echo; echo "└─ ✓ component-$i installed"\n'
        "done\n"
    )
    script.chmod(0o755)
    return script


def _run_context(env: dict[str, str], work: Path) -> Any:
    """A run's context (a RunContext) as the runner builds it, with results in a directory.

    Imported here, in the child interpreter, so the parent never pays for the runner's import."""
    from aicr_runner import logs
    from aicr_runner.children.process import SubprocessRunner
    from aicr_runner.kube.sink import DirectorySink
    from aicr_runner.run.machine import Machine
    from aicr_runner.run.report import StepStatus
    from aicr_runner.settings.config import load
    from aicr_runner.steps.context import Mode, RunConfig, RunContext, RunExternals, RunHandlers
    from aicr_runner.wiring import _status_publisher

    settings = load(env)
    logs.configure(settings.log_format)
    report = Machine.new_report(runner_version="bench", aicr_version="bench", criteria=settings.criteria.stated())
    sink = DirectorySink(work / "results")
    # The status report written as a run writes it while a step runs (the live
    # publisher): the deploy step's progress writes are part of what the relay costs.
    publish_status, _ = _status_publisher(settings, sink, live=True)
    ctx = RunContext(
        config=RunConfig(settings=settings, mode=Mode.RUN, environ={"PATH": os.environ["PATH"]}),
        externals=RunExternals(sink=sink, processes=SubprocessRunner(redact=logs.redact)),
        report=report,
        handlers=RunHandlers(progress=lambda: publish_status(report)),
    )
    report.step("deploy").status = StepStatus.RUNNING
    return ctx


def relay_harness(size: int, fmt: str, work: Path, result: Path) -> None:
    """Run in a child interpreter: the runner's deploy step relaying ``size`` bytes.

    The pod log is this process's stderr (the bench points it at a file). CPU is
    this process's own (children excluded), around the deploy step only; peak RSS
    includes the whole runner import, as in the pod.
    """
    from aicr_runner import cli, logs, wiring  # noqa: F401 - the runner's whole import, as in the pod
    from aicr_runner.run.machine import State
    from aicr_runner.steps.table import Steps

    env = {f"AICR_RUNNER_CRITERIA__{k.upper()}": v for k, v in CRITERIA.items()}
    env |= {"AICR_RUNNER_WORK_DIR": str(work), "AICR_RUNNER_LOG_FORMAT": fmt, "PATH": os.environ["PATH"]}
    ctx = _run_context(env, work)
    # A registered credential, as with a private pack: redaction has work to do.
    logs.register_dockerconfig_secrets(json.dumps({"auths": {"r.example": {"auth": "dXNlcjpzM2NyM3QtcGFzcw=="}}}))
    _write_generator(work / "bundle", size)
    deploy = Steps(ctx).functions()[State.DEPLOY]
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    outcome = deploy()
    sys.stderr.flush()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result.write_text(
        json.dumps({"cpu": cpu, "wall": wall, "maxrss_kib": after.ru_maxrss, "status": outcome.status.value})
    )


def _settle_page_cache() -> None:
    """Write back what the previous relay run left dirty before the next is timed
    (each run also deletes its big files): otherwise the run that follows another
    pays, as CPU, for writing back and reclaiming its hundreds of MiB of page
    cache (measured: the second format relayed at 1.5-6x the first's CPU,
    whichever format went second)."""
    os.sync()


def _relay_runner(size: int, fmt: str, tmp: Path) -> dict[str, float]:
    work = tmp / f"relay-{fmt}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    _settle_page_cache()
    result = work / "result.json"
    with (work / "pod.log").open("wb") as pod_log:
        subprocess.run(
            [PYTHON, __file__, "_relay", str(size), fmt, str(work), str(result)],
            check=True,
            stdout=pod_log,
            stderr=pod_log,
            env=_base_env(),
        )
    data: dict[str, float] = json.loads(result.read_text())
    if data.get("status") not in ("succeeded", "warned"):  # type: ignore[comparison-overlap]
        raise SystemExit(f"relay harness: deploy step ended {data.get('status')}; see {work}")
    relayed = (work / "logs" / "deploy.log").stat().st_size
    if relayed < size:
        raise SystemExit(f"relay harness: deploy.log has {relayed} bytes, expected at least {size}")
    # Its hundreds of MiB of page cache are not left for the next run to reclaim.
    (work / "logs" / "deploy.log").unlink()
    (work / "pod.log").unlink()
    return data


def _relay_shell(size: int, tmp: Path) -> float:
    """``deploy.sh | tee deploy.log > pod.log``: tee's own CPU."""
    work = tmp / "relay-shell"
    shutil.rmtree(work, ignore_errors=True)
    script = _write_generator(work, size)
    _settle_page_cache()
    with (work / "pod.log").open("wb") as pod_log:
        generator = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE)
        tee = subprocess.Popen(["tee", str(work / "deploy.log")], stdin=generator.stdout, stdout=pod_log)
        assert generator.stdout is not None
        generator.stdout.close()
        _, status, usage = os.wait4(tee.pid, 0)
        tee.returncode = os.waitstatus_to_exitcode(status)
        generator.wait()
    if tee.returncode != 0:
        raise SystemExit(f"tee exited {tee.returncode}")
    shutil.rmtree(work)
    return usage.ru_utime + usage.ru_stime


def bench_relay(sizes_mib: Sequence[float], formats: Sequence[str], repeat: int, tmp: Path) -> list[Row]:
    rows: list[Row] = []
    rss: dict[float, list[float]] = {}
    for size_mib in sizes_mib:
        size = int(size_mib * MIB)
        shell_samples: list[float] = []
        for fmt in formats:
            row = Row(
                f"relay CPU, {_size(size_mib)} of deploy.sh output, {fmt} log",
                "≤ 1.5x (stretch ≤ 1.2x)",
                "runner deploy step",
                "`tee`",
                "s",
            )
            walls: list[float] = []

            def runner(fmt: str = fmt, size: int = size, walls: list[float] = walls, key: float = size_mib) -> float:
                data = _relay_runner(size, fmt, tmp)
                walls.append(data["wall"])
                rss.setdefault(key, []).append(data["maxrss_kib"] / 1024)
                return data["cpu"]

            def shell(size: int = size, samples: list[float] = shell_samples) -> float:
                value = _relay_shell(size, tmp)
                samples.append(value)
                return value

            _paired(repeat, runner, shell, row)
            row.note = f"runner wall median {statistics.median(walls):.2f} s"
            rows.append(row)
    small, big = min(sizes_mib), max(sizes_mib)
    memory = Row(
        f"runner peak RSS, relay of {_size(big)} (against {_size(small)})",
        "≤ 100 MiB, flat",
        f"at {_size(big)}",
        f"at {_size(small)}",
        "MiB",
        runner=rss[big],
        shell=rss[small],
    )
    rows.append(memory)
    return rows


def _size(mib: float) -> str:
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"


# --- one aicr call -------------------------------------------------------------------------


def call_harness(repeat: int, work: Path, result: Path) -> None:
    """Run in a child interpreter: a Go child through the runner's step path
    against ``subprocess.run``, alternating, in one warm process."""
    from aicr_runner.run.machine import State

    env = {f"AICR_RUNNER_CRITERIA__{k.upper()}": v for k, v in CRITERIA.items()}
    env |= {"AICR_RUNNER_WORK_DIR": str(work), "PATH": os.environ["PATH"]}
    ctx = _run_context(env, work)
    argv = [str(ORAS), "version"]
    through_runner: list[float] = []
    direct: list[float] = []
    for index in range(repeat + 2):  # two warm-up pairs
        pair: list[float] = []
        for side in ("direct", "runner") if index % 2 == 0 else ("runner", "direct"):
            started = time.perf_counter()
            if side == "runner":
                code = ctx.run_child(State.FETCH, argv).exit_code
            else:
                code = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False).returncode
            elapsed = time.perf_counter() - started
            if code != 0:
                raise SystemExit(f"{argv} exited {code}")
            pair.append(elapsed)
            if index >= 2:
                (through_runner if side == "runner" else direct).append(elapsed)
    result.write_text(json.dumps({"runner": through_runner, "direct": direct}))


def bench_call(repeat: int, tmp: Path) -> Row:
    work = tmp / "call"
    work.mkdir()
    result = work / "result.json"
    with (work / "pod.log").open("wb") as pod_log:
        subprocess.run(
            [PYTHON, __file__, "_call", str(repeat), str(work), str(result)],
            check=True,
            stdout=pod_log,
            stderr=pod_log,
            env=_base_env(),
        )
    data = json.loads(result.read_text())
    row = Row(
        "one aicr-like call (Go `oras version`), wall",
        "≤ 5 ms above the child",
        "runner step path",
        "`subprocess.run`",
        "ms",
        runner=data["runner"],
        shell=data["direct"],
    )
    by_median = statistics.median(row.runner) - statistics.median(row.shell)
    by_min = min(row.runner) - min(row.shell)
    row.note = f"overhead per call {by_median * 1000:.1f} ms (medians), {by_min * 1000:.1f} ms (minimums)"
    return row


# --- start-up -------------------------------------------------------------------------------


def bench_startup(repeat: int) -> list[Row]:
    rows = []
    env = _base_env()
    for args in (["version"], ["--help"]):
        row = Row(
            f"`aicr-runner {' '.join(args)}`, wall",
            "≤ 0.10 s",
            f"`aicr-runner {' '.join(args)}`",
            "`python -c pass`",
            "s",
        )

        def runner(args: list[str] = args) -> float:
            return _wall([str(RUNNER), *args], env=env)

        _paired(repeat, runner, lambda: _wall([PYTHON, "-c", "pass"], env=env), row)
        rows.append(row)
    return rows


# --- plan ------------------------------------------------------------------------------------


def bench_plan(repeat: int, tmp: Path) -> list[Row]:
    """Whole ``plan`` with the contract-faithful fake aicr (a Python program), and its floor."""
    from tests.fake_aicr import install_fake_aicr

    fake = install_fake_aicr(tmp / "fake-bin")
    row = _plan_row(fake, "fake aicr", "≤ 1.5x", repeat, tmp / "plan-fake")
    return [row, _plan_floor_row("fake aicr", repeat, tmp / "plan-fake")]


#: Criteria every aicr since v0.11 has a recipe for.
REAL_AICR_VERSION = "0.11.1"


def real_aicr(tmp: Path) -> Path:
    """The real aicr v0.11.1 binary, checked against its release's checksums and extracted."""
    import hashlib

    folder = os.environ.get("AICR_TEST_RELEASES_DIR", "")
    release = Path(folder) / f"v{REAL_AICR_VERSION}"
    archive = release / f"aicr_{REAL_AICR_VERSION}_linux_amd64.tar.gz"
    if not folder or not archive.is_file():
        raise SystemExit(
            f"bench: the real aicr release is needed: set AICR_TEST_RELEASES_DIR to the folder holding "
            f"v{REAL_AICR_VERSION}/{archive.name} and aicr_checksums.txt (scripts/test.sh sets it); "
            f"got {folder!r}"
        )
    sums = dict(line.split()[::-1] for line in (release / "aicr_checksums.txt").read_text().splitlines() if line)
    if hashlib.sha256(archive.read_bytes()).hexdigest() != sums.get(archive.name):
        raise SystemExit(f"bench: {archive} does not match {release / 'aicr_checksums.txt'}")
    dest = tmp / "real-aicr"
    dest.mkdir()
    with tarfile.open(archive) as tar:
        # The data filter where the interpreter has it (3.11.4+; Debian 12's python3, the image's, is 3.11.2).
        tar.extract("aicr", dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))  # type: ignore[arg-type]
    binary = dest / "aicr"
    binary.chmod(0o755)
    return binary


def bench_plan_real(repeat: int, tmp: Path) -> list[Row]:
    """Whole ``plan`` with the real aicr (Go): the runner's own overhead is the gap; and its floor."""
    cpu: dict[str, list[float]] = {"runner": [], "shell": []}
    row = _plan_row(
        real_aicr(tmp), f"real aicr v{REAL_AICR_VERSION}", "overhead ≤ 0.35 s", repeat, tmp / "plan-real", cpu=cpu
    )
    overhead = statistics.median(row.runner) - statistics.median(row.shell)
    own_cpu = statistics.median(cpu["runner"]) - statistics.median(cpu["shell"])
    row.note = (
        f"overhead {overhead:.3f} s (median minus median), {min(row.runner) - min(row.shell):.3f} s (minimums); "
        f"CPU overhead {own_cpu:.3f} s (medians; less sensitive to load)"
    )
    floor = _plan_floor_row(f"real aicr v{REAL_AICR_VERSION}", repeat, tmp / "plan-real")
    floor_overhead = statistics.median(floor.runner) - statistics.median(floor.shell)
    floor.note = f"overhead {floor_overhead:.3f} s (median minus median)"
    return [row, floor]


def _plan_row(
    binary: Path, label: str, goal: str, repeat: int, tmp: Path, *, cpu: dict[str, list[float]] | None = None
) -> Row:
    """``cpu``, when given, collects each side's CPU seconds (the process and its children)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "plan"
    invocations = tmp / "aicr-calls.txt"
    # Neither the fake nor this build of the real aicr carries Sigstore provenance,
    # and the shell anchor checks none either.
    env = {**_base_env(), "AICR_RUNNER_AICR__PROVENANCE__MODE": "off"}
    criteria = [f"--{k}={v}" for k, v in CRITERIA.items()]

    def plan_argv(aicr: Path) -> list[str]:
        return [str(RUNNER), "plan", "--aicr-binary", str(aicr), "--output", str(out), *criteria]

    # Record the runner's own aicr calls once (through a recording wrapper), then
    # replay them from a script.
    recorder = tmp / "record" / "aicr"
    recorder.parent.mkdir(exist_ok=True)
    recorder.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"with open({str(invocations)!r}, 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv({str(binary)!r}, [{str(binary)!r}, *sys.argv[1:]])\n"
    )
    recorder.chmod(0o755)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(plan_argv(recorder), check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    calls = [json.loads(line) for line in invocations.read_text().splitlines()]
    # The floor row (_plan_floor_row) makes the same calls, the same way.
    (tmp / "calls.json").write_text(json.dumps([[str(binary), *argv] for argv in calls]))
    work = out / "work"
    lines = ["set -euo pipefail", f"mkdir -p {_q(work)}", f"cd {_q(work)}"]
    for argv in calls:
        if "bundle" in argv:
            lines.append(f"rm -rf {_q(work / 'bundle')}")
        lines.append(f"{_q(binary)} {' '.join(_q(a) for a in argv)} >> {_q(tmp / 'plan-shell.log')} 2>&1")
    script = tmp / "plan.sh"
    script.write_text("\n".join(lines) + "\n")

    def runner() -> float:
        return _plan_wall(plan_argv(binary), out, env, None if cpu is None else cpu["runner"])

    def shell() -> float:
        return _plan_wall(["bash", str(script)], out, env, None if cpu is None else cpu["shell"])

    row = Row(
        f"whole `plan` ({len(calls)} aicr calls, {label}), wall",
        goal,
        "`aicr-runner plan`",
        "the same aicr calls from bash",
        "s",
    )
    runner()  # warm the page cache for the binary on both sides
    shell()
    if cpu is not None:
        cpu["runner"].clear()
        cpu["shell"].clear()
    return _paired(repeat, runner, shell, row)


def _plan_floor_row(label: str, repeat: int, tmp: Path) -> Row:
    """The aicr calls ``_plan_row`` recorded, made by scripts/plan_floor.py (the runner's
    libraries imported, nothing else done) against the same calls from bash: the least a
    plan on those libraries pays. A goal the floor misses, no runner on them meets."""
    calls = json.loads((tmp / "calls.json").read_text())
    if calls[0][1:] != ["--version"]:
        raise SystemExit(f"bench: the plan's first aicr call was {calls[0][1:]}, not --version: the floor assumes it")
    # Where the runner worked and the recorded calls write: the shell anchor's directory too.
    work = tmp / "plan" / "work"
    script, log = ROOT / "scripts" / "plan_floor.py", tmp / "floor.log"
    floor = [PYTHON, str(script), str(tmp / "calls.json"), str(work), str(log)]
    env = _base_env()
    row = Row(
        f"whole `plan` floor ({len(calls)} aicr calls, {label}; the runner's libraries imported, nothing else: "
        "scripts/plan_floor.py), wall",
        "reference: the least a plan on these libraries pays",
        "`plan_floor.py`",
        "the same aicr calls from bash",
        "s",
    )
    shell, out = ["bash", str(tmp / "plan.sh")], work.parent
    _plan_wall(floor, out, env)
    return _paired(repeat, lambda: _plan_wall(floor, out, env), lambda: _plan_wall(shell, out, env), row)


def _plan_wall(argv: list[str], out: Path, env: dict[str, str], cpu: list[float] | None = None) -> float:
    """One whole plan (the runner's, the floor's or bash's) from an empty output directory."""
    shutil.rmtree(out, ignore_errors=True)
    return _wall(argv, cpu, env=env)


def bench_upgrade_check(repeat: int, tmp: Path) -> Row:
    """What the upgrade check adds: whole ``plan --upgrade-from`` (a crossing, every
    component safe) against the same ``plan`` without it, the fake aicr both sides."""
    import yaml

    from tests.fake_aicr import install_fake_aicr

    fake = install_fake_aicr(tmp / "fake-bin-upgrade")
    work = tmp / "upgrade"
    out = work / "plan"
    env = {**_base_env(), "AICR_RUNNER_AICR__PROVENANCE__MODE": "off"}
    env["FAKE_AICR_UPGRADE_TRANSITIONS"] = json.dumps({"gpu-operator": {"verdict": "safe"}})
    argv = [str(RUNNER), "plan", "--aicr-binary", str(fake), "--output", str(out)]
    argv += [f"--{k}={v}" for k, v in CRITERIA.items()]
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    doc = yaml.safe_load((out / "aicr-recipe" / "recipe.yaml").read_text())
    for ref in doc["componentRefs"]:
        if ref["name"] == "gpu-operator":
            ref["version"] = "v25.3.0"
    installed = work / "installed.yaml"
    installed.write_text(yaml.safe_dump(doc))

    def plan(extra: list[str]) -> float:
        shutil.rmtree(out, ignore_errors=True)
        return _wall([*argv, *extra], env=env)

    row = Row(
        "whole `plan` with a crossing checked (fake aicr; `upgrade-check` one more aicr call), wall",
        "the check adds ≤ 0.5 s",
        "`plan --upgrade-from`",
        "`plan`",
        "s",
    )
    _paired(repeat, lambda: plan(["--upgrade-from", str(installed)]), lambda: plan([]), row)
    added = statistics.median(row.runner) - statistics.median(row.shell)
    least = min(row.runner) - min(row.shell)
    row.note = f"the check adds {added:.3f} s (median minus median), {least:.3f} s (minimums)"
    return row


def _q(value: object) -> str:
    import shlex

    return shlex.quote(str(value))


# --- pack pull -------------------------------------------------------------------------------


def _push(host: str, repository: str, source: Path, paths: Sequence[str], home: Path) -> None:
    subprocess.run(
        [str(ORAS), "push", "--plain-http", f"{host}/{repository}", *paths],
        cwd=source,
        env={**os.environ, "HOME": str(home)},
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _pack_files(directory: Path, files: int, total_bytes: int) -> list[str]:
    """registry.yaml plus ``files`` YAML-ish files of about total/files bytes each."""
    directory.mkdir(parents=True)
    (directory / "registry.yaml").write_text("apiVersion: aicr.run/v1beta1\nkind: ComponentRegistry\n")
    names = ["registry.yaml"]
    each = max(1, total_bytes // max(files, 1))
    for index in range(files):
        name = f"overlay-{index:03d}.yaml"
        # Half random hex (incompressible), half repetitive YAML, like real values files.
        body = (f"# overlay {index}\nkey: {secrets.token_hex(each // 4)}\n" + "value: x\n" * (each // 20))[:each]
        (directory / name).write_text(body)
        names.append(name)
    return names


def bench_pack(packs: Sequence[tuple[str, int, int, bool]], repeat: int, tmp: Path) -> list[Row]:
    """packs: (label, files, total bytes, as one directory layer)."""
    if not (os.access(ORAS, os.X_OK) and os.access(DOCKER_REGISTRY, os.X_OK)):
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "oras", "debian"], cwd=ROOT, check=True)
    base = tmp / "registry"
    storage = base / "storage"
    storage.mkdir(parents=True)
    home = base / "home"
    home.mkdir()
    port = _free_port()
    host = f"127.0.0.1:{port}"
    config = base / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
        f"http:\n  addr: {host}\n  secret: {secrets.token_hex(16)}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    rows = []
    with _server([str(DOCKER_REGISTRY), "serve", str(config)], f"http://{host}/v2/", base / "registry.log", env):
        for label, files, total, as_directory in packs:
            source = tmp / f"pack-src-{label}"
            names = _pack_files(source / "overlays" if as_directory else source, files, total)
            if as_directory:
                (source / "overlays" / "registry.yaml").replace(source / "registry.yaml")
                paths = ["registry.yaml", "overlays/"]
            else:
                paths = names
            ref = f"{host}/bench/{label}:v1"
            _push(host, f"bench/{label}:v1", source, paths, home)
            dest = tmp / f"pack-dest-{label}"
            pull = (
                "import sys; from pathlib import Path; from aicr_runner.settings.config import PackSettings; "
                "from aicr_runner.pack.pull import pull_pack; "
                "pull_pack(PackSettings(ref=sys.argv[1], plain_http=True), Path(sys.argv[2]))"
            )
            runner_env = _base_env()
            runner_cpu: list[float] = []
            shell_cpu: list[float] = []

            def runner(
                ref: str = ref,
                dest: Path = dest,
                pull: str = pull,
                env: dict[str, str] = runner_env,
                cpu: list[float] = runner_cpu,
            ) -> float:
                shutil.rmtree(dest, ignore_errors=True)
                return _wall([PYTHON, "-c", pull, ref, str(dest)], cpu, env=env)

            def shell(ref: str = ref, dest: Path = dest, cpu: list[float] = shell_cpu) -> float:
                shutil.rmtree(dest, ignore_errors=True)
                return _wall(
                    [str(ORAS), "pull", "--plain-http", ref, "-o", str(dest)],
                    cpu,
                    env={**os.environ, "HOME": str(home)},
                )

            layers = 2 if as_directory else files + 1
            shape = "registry.yaml + 1 directory layer" if as_directory else f"{layers} file layers"
            # The goals: small packs pay start-up only, so a fixed overhead;
            # big packs pay per blob, so a ratio.
            small = total < 1_000_000
            row = Row(
                f"pack pull, {total / 1e6:g} MB in {shape} ({files} files), whole process",
                "≤ 0.3 s above `oras pull`" if small else "≤ 1.2x",
                "python + `pull_pack`",
                "`oras pull`",
                "s",
            )
            rows.append(_paired(repeat, runner, shell, row))
            overhead = statistics.median(row.runner) - statistics.median(row.shell)
            row.note = f"overhead {overhead:+.3f} s (medians); {_cpu_note(runner_cpu, shell_cpu)}"
            if not small:
                rows.append(_pack_floor_row(repeat, ref, dest, row.metric, shell))
                rows.append(_pack_floor_row(repeat, ref, dest, row.metric, shell, runner_imports=True))
    rows.append(_pack_imports_row(repeat))
    return rows


_MIRROR_COPY = (
    "import sys; from aicr_runner.mirror.copy import copy_all; from aicr_runner.mirror.items import Item, Kind; "
    "from aicr_runner.mirror.oras_copier import OrasCopier; "
    "up, target, oras = sys.argv[1], sys.argv[2], sys.argv[3]; refs = sys.argv[4:]; "
    "copier = OrasCopier(oras, plain_http=frozenset({up, target.removeprefix('oci://').split('/')[0]})); "
    "copy_all([Item(Kind.IMAGE, r) for r in refs], target, copier)"
)


def bench_mirror(images: int, size: int, repeat: int, tmp: Path) -> list[Row]:
    """``mirror --to``'s copy (``copy_all``: the digests read in process, ``oras cp`` for
    what the target lacks, its final check included) against the Go ``oras cp`` of the
    same references one by one: into an empty target, then again. Wall and CPU time
    (the children's: the CPU moves far less than the wall with a shared machine's load)."""
    if not (os.access(ORAS, os.X_OK) and os.access(DOCKER_REGISTRY, os.X_OK)):
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), "oras", "debian"], cwd=ROOT, check=True)
    home = tmp / "mirror-home"
    home.mkdir()
    with contextlib.ExitStack() as stack:
        up, target = (stack.enter_context(_plain_registry(tmp / f"mirror-{name}")) for name in ("up", "target"))
        source = tmp / "mirror-src"
        names = _pack_files(source, images, images * size)
        refs = []
        for n, name in enumerate(names):
            _push(up, f"bench/img{n}:1", source, [name], home)
            refs.append(f"{up}/bench/img{n}:1")
        counter = iter(range(10**6))
        rows = []
        for again in (False, True):
            fixed = f"oci://{target}/fixed"
            runner_env, oras_env = _base_env(), {**os.environ, "HOME": str(home)}
            runner_cpu: list[float] = []
            shell_cpu: list[float] = []

            def runner(
                again: bool = again, fixed: str = fixed, env: dict[str, str] = runner_env, cpu: list[float] = runner_cpu
            ) -> float:
                prefix = fixed if again else f"oci://{target}/r{next(counter)}"
                return _wall([PYTHON, "-c", _MIRROR_COPY, up, prefix, str(ORAS), *refs], cpu, env=env)

            def shell(
                again: bool = again, fixed: str = fixed, env: dict[str, str] = oras_env, cpu: list[float] = shell_cpu
            ) -> float:
                prefix = (fixed if again else f"oci://{target}/s{next(counter)}").removeprefix("oci://")
                script = "; ".join(
                    f"{ORAS} cp --from-plain-http --to-plain-http {ref} {prefix}/{ref.replace(':', '_', 1)}"
                    for ref in refs
                )
                return _wall(["bash", "-c", f"set -e; {script}"], cpu, env=env)

            if again:
                runner(True, fixed)  # fill the target once; each timed run then finds everything there
            state = "again (all there)" if again else "empty target"
            row = Row(
                f"mirror copy, {images} images of {size / MIB:g} MiB, {state}",
                "≤ 1.1x",
                "python + `copy_all` (digests in process, `oras cp` per missing item; final check)",
                "`oras cp` per image",
                "s",
            )
            rows.append(_paired(repeat, runner, shell, row))
            row.note = _cpu_note(runner_cpu, shell_cpu)
    return rows


@contextlib.contextmanager
def _plain_registry(base: Path) -> Iterator[str]:
    """A ``docker-registry`` on loopback, plain HTTP, no login; its host:port."""
    (base / "storage").mkdir(parents=True)
    host = f"127.0.0.1:{_free_port()}"
    config = base / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {base / 'storage'}\n"
        f"http:\n  addr: {host}\n  secret: {secrets.token_hex(16)}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with _server([str(DOCKER_REGISTRY), "serve", str(config)], f"http://{host}/v2/", base / "registry.log", env):
        yield host


def _pack_imports_row(repeat: int) -> Row:
    """Start-up only: what the runner's pull imports against what the floor imports."""
    env = _base_env()
    runner = "import aicr_runner.settings.config, aicr_runner.pack.pull"
    floor = [PYTHON, str(ROOT / "scripts" / "pack_floor.py"), "--imports-only"]
    row = Row(
        "pack pull start-up: the runner's imports (`aicr_runner.settings.config`, `aicr_runner.pack.pull`), "
        "whole process",
        "reference: part of the pull rows",
        f"`python -c '{runner}'`",
        "the floor's imports (`pack_floor.py --imports-only`)",
        "s",
    )
    _paired(repeat, lambda: _wall([PYTHON, "-c", runner], env=env), lambda: _wall(floor, env=env), row)
    row.note = f"{statistics.median(row.runner) - statistics.median(row.shell):+.3f} s (medians)"
    return row


def _pack_floor_row(
    repeat: int, ref: str, dest: Path, metric: str, shell: Callable[..., float], *, runner_imports: bool = False
) -> Row:
    """The same pull by scripts/pack_floor.py: the least any Python process pays for it;
    with ``runner_imports``, plus the runner's modules a pull needs besides HTTP."""
    option = ["--runner-imports"] if runner_imports else []
    floor_cpu: list[float] = []
    shell_cpu: list[float] = []

    def floor() -> float:
        shutil.rmtree(dest, ignore_errors=True)
        argv = [PYTHON, str(ROOT / "scripts" / "pack_floor.py"), *option, ref, str(dest)]
        wall = _wall(argv, floor_cpu, env=_base_env())
        if not (dest / "registry.yaml").is_file():
            raise RuntimeError(f"scripts/pack_floor.py left no registry.yaml in {dest}")
        return wall

    def anchor() -> float:
        return shell(cpu=shell_cpu)

    what = "floor + the runner's non-HTTP imports" if runner_imports else "floor"
    row = Row(
        metric.replace("pack pull,", f"pack pull {what} (stdlib-only HTTP, no checks: scripts/pack_floor.py),"),
        "reference: bound for a stdlib-HTTP pull" if runner_imports else "reference: the least Python pays",
        f"`pack_floor.py{' --runner-imports' if runner_imports else ''}`",
        "`oras pull`",
        "s",
    )
    _paired(repeat, floor, anchor, row)
    row.note = _cpu_note(floor_cpu, shell_cpu)
    return row


# --- release fetch -----------------------------------------------------------------------------


#: The real release the release row serves when present (the one the real-aicr plan row runs).
REAL_RELEASE_VERSION = REAL_AICR_VERSION


def _real_release(arch: str) -> Path | None:
    """The directory holding the real v0.11.1 release for ``arch``, if this machine has it."""
    root = os.environ.get("AICR_TEST_RELEASES_DIR", "")
    folder = Path(root) / f"v{REAL_RELEASE_VERSION}" if root else None
    archive = f"aicr_{REAL_RELEASE_VERSION}_linux_{arch}.tar.gz"
    if folder and (folder / archive).is_file() and (folder / "aicr_checksums.txt").is_file():
        return folder
    return None


def _synthetic_release(release_dir: Path, archive_name: str, size_bytes: int, tmp: Path) -> None:
    """An archive of ``size_bytes`` of a Go binary's bytes (the pinned helm), and its checksums file."""
    binary = tmp / "aicr"
    with (TOOLS / "helm").open("rb") as source, binary.open("wb") as out:
        remaining = size_bytes
        while remaining > 0:
            chunk = source.read(min(remaining, MIB)) or b"\0" * min(remaining, MIB)
            out.write(chunk)
            remaining -= len(chunk)
    archive = release_dir / archive_name
    with gzip.open(archive, "wb", compresslevel=6) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        tar.add(binary, arcname="aicr")
    import hashlib

    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (release_dir / "aicr_checksums.txt").write_text(f"{digest}  {archive_name}\n")


def bench_release(size_bytes: int, repeat: int, tmp: Path) -> Row:
    arch = "arm64" if os.uname().machine in ("aarch64", "arm64") else "amd64"
    real = _real_release(arch)
    version = REAL_RELEASE_VERSION if real else "1.2.0"
    serve = tmp / "releases"
    release_dir = serve / f"v{version}"
    archive_name = f"aicr_{version}_linux_{arch}.tar.gz"
    release_dir.mkdir(parents=True)
    if real:
        for name in (archive_name, "aicr_checksums.txt"):
            shutil.copyfile(real / name, release_dir / name)  # not the read-only modes
    else:
        _synthetic_release(release_dir, archive_name, size_bytes, tmp)
    archive = release_dir / archive_name
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    fetch = (
        "import sys; from pathlib import Path; from aicr_runner.settings.config import AicrSettings; "
        "from aicr_runner.aicr.release import fetch_aicr; "
        "fetch_aicr(AicrSettings(version=sys.argv[1], release_base_url=sys.argv[2], arch=sys.argv[3]), "
        "Path(sys.argv[4]))"
    )
    dest = tmp / "release-dest"
    runner_env = _base_env()
    shell_script = (
        'set -euo pipefail; cd "$1"; '
        'curl -fsS -o aicr_checksums.txt "$2/v$3/aicr_checksums.txt"; '
        'curl -fsS -o "$4" "$2/v$3/$4"; '
        'grep "  $4\\$" aicr_checksums.txt | sha256sum -c --status; '
        'tar -xzf "$4" aicr; rm -f "$4"'
    )

    runner_cpu: list[float] = []
    shell_cpu: list[float] = []

    def runner() -> float:
        shutil.rmtree(dest, ignore_errors=True)
        return _wall([PYTHON, "-c", fetch, version, base_url, arch, str(dest)], runner_cpu, env=runner_env)

    def shell() -> float:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        return _wall(["bash", "-c", shell_script, "fetch", str(dest), base_url, version, archive_name], shell_cpu)

    what = f"the real aicr v{version}" if real else "a synthetic"
    row = Row(
        f"release fetch, {what} {archive.stat().st_size / 1e6:.1f} MB archive, whole process",
        "≤ 1.0x",
        "python + `fetch_aicr`",
        "curl + sha256sum + tar",
        "s",
    )
    http_server = [PYTHON, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(serve)]
    with _server(http_server, f"{base_url}/v{version}/aicr_checksums.txt", tmp / "http.log"):
        _paired(repeat, runner, shell, row)
    overhead = statistics.median(row.runner) - statistics.median(row.shell)
    row.note = f"overhead {overhead:+.3f} s (medians); {_cpu_note(runner_cpu, shell_cpu)}"
    return row


# --- image -------------------------------------------------------------------------------------


def _image_ref(image: str | None) -> str:
    if image:
        return image
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"scripts/build-image.sh failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def bench_image(image: str | None, repeat: int, tmp: Path) -> list[Row]:
    """The image's size against its budgets, and its pull + start from a loopback
    registry against the same for its bare Debian base (python3, no tools, no venv)."""
    from tests.support import image_metrics
    from tests.support.podman import PODMAN

    ref = _image_ref(image)
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    inputs = tmp / "image-inputs"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "image-inputs.sh"), "--arch", arch, "--out", str(inputs), "base"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"localhost/aicr-runner-bench-base:{secrets.token_hex(4)}"
    subprocess.run(
        [*PODMAN, "import", "--quiet", str(inputs / f"base-{arch}.tar"), base], check=True, stdout=subprocess.DEVNULL
    )
    registry = tmp / "image-registry"
    registry.mkdir()
    mb = 1e6
    try:
        with image_metrics.local_registry(registry) as host:
            pushed = image_metrics.push(ref, host, tag="bench")
            pushed_base = image_metrics.push(base, host, repository="base", tag="bench")
            uncompressed = Row(
                "image size, uncompressed (on disk after a pull)",
                f"≤ {image_metrics.UNCOMPRESSED_BUDGET_BYTES / mb:.0f} MB",
                "aicr-runner image",
                "budget",
                "MB",
            )
            uncompressed.runner.append(image_metrics.uncompressed_bytes(ref) / mb)
            uncompressed.shell.append(image_metrics.UNCOMPRESSED_BUDGET_BYTES / mb)
            compressed = Row(
                "image size, compressed (gzip layers a registry serves)",
                f"≤ {image_metrics.COMPRESSED_BUDGET_BYTES / mb:.0f} MB",
                "aicr-runner image",
                "budget",
                "MB",
            )
            compressed.runner.append(image_metrics.compressed_bytes(pushed) / mb)
            compressed.shell.append(image_metrics.COMPRESSED_BUDGET_BYTES / mb)
            base_size = image_metrics.compressed_bytes(pushed_base) / mb
            compressed.note = f"its Debian base alone: {base_size:.1f} MB compressed"
            pull = Row(
                "pull from a loopback registry into an empty store + start, wall",
                "reported (no goal set)",
                "pull + `aicr-runner version`",
                "pull of the bare base + `python3 -c`",
                "s",
            )
            _paired(
                repeat,
                lambda: image_metrics.pull_and_start_seconds(pushed),
                lambda: image_metrics.pull_and_start_seconds(pushed_base, ("python3", "-c", "print('ok')"), "ok"),
                pull,
            )
            return [uncompressed, compressed, pull]
    finally:
        subprocess.run([*PODMAN, "rmi", "--force", base], capture_output=True, check=False)


# --- output -------------------------------------------------------------------------------------


def render(rows: Sequence[Row], markdown: bool) -> str:
    header = ("metric", "runner", "min", "median", "shell anchor", "min", "median", "ratio", "goal", "note")
    body = [
        (
            r.metric,
            r.runner_label,
            _fmt(min(r.runner), r.unit),
            _fmt(statistics.median(r.runner), r.unit),
            r.shell_label,
            _fmt(min(r.shell), r.unit),
            _fmt(statistics.median(r.shell), r.unit),
            f"{r.ratio:.2f}x",
            r.goal,
            r.note,
        )
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    return "\n".join("  ".join(cells) for cells in [header, *body])


def _runtime_venv(venv: Path) -> Path:
    """A venv with requirements.lock only (the image's packages) and an
    ``aicr-runner`` entrypoint on this tree's sources; its Python."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
        lock = ["--no-deps", "--require-hashes", "--only-binary=:all:", "-r", str(ROOT / "requirements.lock")]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *lock], check=True)
    entrypoint = venv / "bin" / "aicr-runner"
    # What pip writes for the project's console script (read from pyproject.toml, so a
    # moved entry point follows); the sources come from PYTHONPATH.
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["aicr-runner"]
    module, _, function = target.partition(":")
    script = (
        f"#!{python}\nimport sys\nfrom {module} import {function}\n"
        f"if __name__ == '__main__':\n    sys.exit({function}())\n"
    )
    if not entrypoint.exists() or entrypoint.read_text() != script:
        entrypoint.write_text(script)
        entrypoint.chmod(0o755)
    return python


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute (the CI smoke test)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table for docs/performance.md")
    parser.add_argument("--relay-mib", help="relay sizes in MiB, comma separated (default 100,1024; quick 1,8)")
    parser.add_argument("--relay-formats", default="console,json", help="log formats to relay in")
    parser.add_argument("--relay-repeat", type=int, help="pairs per relay size (default 2; quick 1)")
    parser.add_argument("--repeat", type=int, help="pairs for the other metrics (default 7; quick 2)")
    parser.add_argument("--only", help="comma separated: relay,call,startup,plan,upgrade,pack,release,image,mirror")
    parser.add_argument("--mirror-images", type=int, help="images the mirror rows copy (default 20; quick 4)")
    parser.add_argument("--mirror-mib", type=float, help="MiB of each of them (default 8; quick 1)")
    parser.add_argument("--image", help="the image to measure (default: what scripts/build-image.sh builds)")
    parser.add_argument(
        "--runtime-venv", metavar="DIR", help="run on a venv of requirements.lock only (made if missing)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if "--runtime-venv" in args_list:
        at = args_list.index("--runtime-venv")
        python = _runtime_venv(Path(args_list[at + 1]).resolve())
        rest = args_list[:at] + args_list[at + 2 :]
        return subprocess.run([str(python), __file__, *rest], check=False).returncode
    if args_list[:1] == ["_relay"]:
        relay_harness(int(args_list[1]), args_list[2], Path(args_list[3]), Path(args_list[4]))
        return 0
    if args_list[:1] == ["_call"]:
        call_harness(int(args_list[1]), Path(args_list[2]), Path(args_list[3]))
        return 0
    args = _parser().parse_args(args_list)
    quick = args.quick
    relay_sizes = [float(s) for s in (args.relay_mib or ("1,8" if quick else "100,1024")).split(",")]
    relay_formats = args.relay_formats.split(",")
    relay_repeat = args.relay_repeat or (1 if quick else 2)
    repeat = args.repeat or (2 if quick else 7)
    only = set((args.only or "relay,call,startup,plan,upgrade,pack,release,image,mirror").split(","))
    if quick:
        packs = [("small", 2, 20_000, False), ("files", 21, 2_000_000, False), ("dir", 20, 2_000_000, True)]
        release_bytes = 4 * MIB
    else:
        packs = [("small", 2, 20_000, False), ("files", 201, 20_000_000, False), ("dir", 200, 20_000_000, True)]
        release_bytes = 48 * MIB
    load_before = os.getloadavg()
    started = time.monotonic()
    rows: list[Row] = []
    global PYCACHE  # noqa: PLW0603 - set once, before anything is timed
    with tempfile.TemporaryDirectory(prefix="aicr-bench-") as tmp_name:
        tmp = Path(tmp_name)
        PYCACHE = tmp / "pycache"
        _compile_bytecode()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("relay", lambda: rows.extend(bench_relay(relay_sizes, relay_formats, relay_repeat, tmp))),
            ("call", lambda: rows.append(bench_call(10 if quick else 40, tmp))),
            ("startup", lambda: rows.extend(bench_startup(repeat if quick else 2 * repeat))),
            ("plan", lambda: rows.extend([*bench_plan_real(repeat, tmp), *bench_plan(repeat, tmp)])),
            ("upgrade", lambda: rows.append(bench_upgrade_check(repeat, tmp))),
            ("pack", lambda: rows.extend(bench_pack(packs, repeat, tmp))),
            ("release", lambda: rows.append(bench_release(release_bytes, repeat, tmp))),
            ("image", lambda: rows.extend(bench_image(args.image, 1 if quick else 5, tmp))),
            (
                "mirror",
                lambda: rows.extend(
                    bench_mirror(
                        args.mirror_images or (4 if quick else 20),
                        int((args.mirror_mib or (1 if quick else 8)) * MIB),
                        repeat,
                        tmp,
                    )
                ),
            ),
        ]
        for name, step in steps:
            if name in only:
                step()
                elapsed = time.monotonic() - started
                print(f"[{name} done at {elapsed:.0f} s, load {os.getloadavg()[0]:.2f}]", file=sys.stderr)
    load_after = os.getloadavg()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"{when}; {os.cpu_count()} cores; load average (1/5/15 min) before "
        f"{'/'.join(f'{x:.2f}' for x in load_before)}, after {'/'.join(f'{x:.2f}' for x in load_after)}; "
        f"{time.monotonic() - started:.0f} s in all; Python {sys.version.split()[0]}"
    )
    print(render(rows, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
