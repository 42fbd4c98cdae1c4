"""The aicr fetch against a loopback release server, and the pack pull against a
loopback registry: the node's architecture, and wall-clock budgets and SIGTERM
that hold whatever the server does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicr_runner.aicr.release import fetch_aicr
from aicr_runner.cli import main
from aicr_runner.errors import DownloadError, PackError
from aicr_runner.net.deadline import Cancellation, bounded
from aicr_runner.pack.pull import pull_pack
from aicr_runner.settings.config import AicrSettings, PackSettings
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import clean_env
from tests.support.hostile_server import HostileRegistry, ReleaseServer, StalledListener, release_archive, tls_context

ARM64 = "aicr_1.2.0_linux_arm64.tar.gz"
AMD64 = "aicr_1.2.0_linux_amd64.tar.gz"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReleaseServer]:
    with ReleaseServer(tmp_path / "releases") as srv:
        yield srv


def fake_binary(tmp_path: Path, arch: str) -> bytes:
    launcher = install_fake_aicr(tmp_path / f"fake-{arch}").read_bytes()
    return launcher + f"# built for linux/{arch}\n".encode()


def _pretend_the_machine_is_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    """What uname reports on an arm64 node; the runtime maps it to the arm64 release."""
    real = os.uname()
    arm = os.uname_result((real.sysname, real.nodename, real.release, real.version, "aarch64"))
    monkeypatch.setattr(os, "uname", lambda: arm)


def test_an_arm64_node_fetches_the_arm64_release_with_its_pin_and_checksum_line(
    server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart renders AICR__ARCH="" by default: the runtime asks the machine."""
    _pretend_the_machine_is_aarch64(monkeypatch)
    archives = {AMD64: release_archive(fake_binary(tmp_path, "amd64"))}
    archives[ARM64] = release_archive(fake_binary(tmp_path, "arm64"))
    sums = server.publish("v1.2.0", archives)
    env = clean_env(
        tmp_path,
        AICR_RUNNER_AICR__ARCH="",
        AICR_RUNNER_AICR__RELEASE_BASE_URL=server.url,
        AICR_RUNNER_AICR__SHA256__ARM64=sums[ARM64],
        AICR_RUNNER_AICR__SHA256__AMD64="0" * 64,  # never used for arm64: would fail if it were
    )
    code = main(["plan", "--output", str(tmp_path / "plan")], environ=env)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert server.requests == ["/v1.2.0/aicr_checksums.txt", f"/v1.2.0/{ARM64}"]
    records = [json.loads(line) for line in out.err.splitlines() if line.startswith("{")]
    start = next(r for r in records if r["event"] == "aicr-runner starting")
    assert start["arch"] == "arm64"
    verified = next(r for r in records if r["event"] == "aicr release verified")
    assert verified["url"] == f"{server.url}/v1.2.0/{ARM64}"
    assert verified["sha256"] == sums[ARM64], "the arm64 line of aicr_checksums.txt"
    assert verified["pinned"] is True
    binary = (tmp_path / "work" / "aicr-release" / "aicr").read_text()
    assert binary.endswith("# built for linux/arm64\n")


def test_an_arm64_node_refuses_an_archive_that_misses_the_arm64_pin(
    server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _pretend_the_machine_is_aarch64(monkeypatch)
    server.publish("v1.2.0", {ARM64: release_archive(fake_binary(tmp_path, "arm64"))})
    env = clean_env(
        tmp_path,
        AICR_RUNNER_AICR__ARCH="",
        AICR_RUNNER_AICR__RELEASE_BASE_URL=server.url,
        AICR_RUNNER_AICR__SHA256__ARM64="a" * 64,
    )
    code = main(["plan", "--output", str(tmp_path / "plan")], environ=env)
    assert code == 21
    assert "reviewed arm64 pin" in capsys.readouterr().err


BUDGET = 3.0
#: Generous slack for a loaded 2-core machine; the bug this guards held for 601 s.
SLACK = 4.0


@pytest.mark.parametrize("misbehaviour", ["drip", "redirect", "stalled-tls"])
def test_the_download_budget_bounds_the_fetch_whatever_the_server_does(
    misbehaviour: str, server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StalledListener() as stalled:
        base = {
            "drip": f"{server.url}/drip",
            "redirect": f"{server.url}/redirect/0",
            "stalled-tls": f"https://127.0.0.1:{stalled.port}",
        }[misbehaviour]
        env = clean_env(
            tmp_path,
            AICR_RUNNER_AICR__RELEASE_BASE_URL=base,
            AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS=str(BUDGET),
            AICR_RUNNER_AICR__DOWNLOAD_TIMEOUT_SECONDS="60",
        )
        started = time.monotonic()
        code = main(["run", "--results-dir", str(tmp_path / "results")], environ=env)
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 20, err[-3000:]
    assert elapsed < BUDGET + SLACK, f"{misbehaviour}: the run took {elapsed:.1f}s"
    termination = (tmp_path / "termination-log").read_text()
    assert termination.startswith("Failed (exit 20): fetch failed:")
    # Whichever notices first, the watchdog or the download loop, names the budget.
    assert re.search(r"\b3s (download )?budget \(AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS\)", termination), termination
    report = json.loads((tmp_path / "results" / "aicr-run-status" / "report.json").read_text())
    assert report["steps"][0]["state"] == "fetch"
    assert report["steps"][0]["status"] == "failed"


def test_a_stalled_download_is_broken_off_when_the_bound_gives_up(server: ReleaseServer, tmp_path: Path) -> None:
    """The server sends one byte and falls silent (the read timeout is 60 s): the
    cancellation shuts the socket down, so the download has ended, and its
    connection is closed, by the time ``bounded`` raises."""
    settings = AicrSettings(version="1.2.0", release_base_url=f"{server.url}/stall", download_timeout_seconds=60)
    ended = threading.Event()

    def work(cancelled: Cancellation) -> None:
        try:
            fetch_aicr(settings, tmp_path / "aicr", cancelled=cancelled)
        finally:
            ended.set()

    with pytest.raises(DownloadError, match="over budget"):
        bounded(
            work,
            budget_seconds=1.0,
            interrupted=lambda: False,
            over_budget=lambda: DownloadError("over budget"),
            what="the aicr download",
        )
    assert ended.is_set(), "the download had ended when the bound returned"
    assert server.stalled_client_left.wait(1.0), "its connection was closed"
    assert server.requests == ["/stall/v1.2.0/aicr_checksums.txt"], "not retried after the cancel"


def test_sigterm_during_a_dripping_download_stops_it_and_exits_143(server: ReleaseServer, tmp_path: Path) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=f"{server.url}/drip")
    results = tmp_path / "results"
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    with pod_log.open("wb") as out_file:
        proc = subprocess.Popen(
            [str(runner), "run", "--results-dir", str(results)], env=env, stdout=out_file, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while not any(path.startswith("/drip/") for path in server.requests):
        assert time.monotonic() < deadline, pod_log.read_text()
        time.sleep(0.05)
    time.sleep(1.0)  # well into the body
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    stopped_after = time.monotonic() - sent
    assert proc.returncode == 143, pod_log.read_text()[-3000:]
    assert stopped_after < 2.5, f"stopped {stopped_after:.1f}s after SIGTERM"
    report = json.loads((results / "aicr-run-status" / "report.json").read_text())
    fetch = report["steps"][0]
    assert (fetch["state"], fetch["status"]) == ("fetch", "interrupted")
    assert "during the aicr download" in fetch["message"]
    assert report["phase"] == "Interrupted"
    assert (tmp_path / "termination-log").read_text().startswith("Interrupted (exit 143): interrupted during fetch")


# --- the pack pull against a registry that drips, stalls or hangs ------------------------------

PACK_MODES = ["drip", "stall", "hang"]
#: The issue's bound: the pull ends within its budget plus this, and this long after SIGTERM.
PACK_SLACK = 2.0


def start_runner(tmp_path: Path, registry: HostileRegistry, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A real ``aicr-runner run`` pulling the registry's pack, in its own process group."""
    fake = install_fake_aicr(tmp_path / "bin")
    env = clean_env(tmp_path, AICR_RUNNER_PACK__REF=registry.ref, AICR_RUNNER_PACK__PLAIN_HTTP="true", **extra)
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    argv = [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "results")]
    with pod_log.open("wb") as out_file:
        proc = subprocess.Popen(argv, env=env, stdout=out_file, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, pod_log


def assert_nothing_left(proc: subprocess.Popen[bytes], registry: HostileRegistry, pod_log: Path) -> None:
    # Nothing of the run survives it: no child in its process group, no connection held.
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    assert registry.wait_until_released(timeout=5), "the runner's connections were closed"
    assert "Traceback" not in pod_log.read_text()


def pack_step(tmp_path: Path) -> dict[str, str]:
    report = json.loads((tmp_path / "results" / "aicr-run-status" / "report.json").read_text())
    step: dict[str, str] = next(s for s in report["steps"] if s["state"] == "pack")
    return step


@pytest.mark.parametrize("mode", PACK_MODES)
def test_the_pull_budget_ends_a_multi_layer_pull_whatever_the_registry_does(mode: str, tmp_path: Path) -> None:
    """A pull of three layers that drip, stall after one byte or hang: exit 22 within the budget + 2 s."""
    with HostileRegistry(mode) as registry:
        assert registry.layer_count >= 3
        proc, pod_log = start_runner(tmp_path, registry, AICR_RUNNER_PACK__PULL_BUDGET_SECONDS=str(BUDGET))
        assert registry.wait_for_blob_requests(registry.layer_count, timeout=60), pod_log.read_text()[-3000:]
        proc.wait(timeout=BUDGET + 60)
        ended = time.monotonic()
        assert registry.first_request_at is not None
        took = ended - registry.first_request_at
        assert proc.returncode == 22, pod_log.read_text()[-3000:]
        assert took < BUDGET + PACK_SLACK, f"{mode}: the pull ended {took:.2f}s after it started"
        assert_nothing_left(proc, registry, pod_log)
    termination = (tmp_path / "termination-log").read_text()
    assert termination.startswith("Failed (exit 22): pack failed:")
    assert "3s pull budget (AICR_RUNNER_PACK__PULL_BUDGET_SECONDS)" in termination
    assert pack_step(tmp_path)["status"] == "failed"
    assert not (tmp_path / "work" / "pack").exists()


@pytest.mark.parametrize("mode", PACK_MODES)
def test_sigterm_ends_a_multi_layer_pull_within_2s_whatever_the_registry_does(mode: str, tmp_path: Path) -> None:
    with HostileRegistry(mode) as registry:
        proc, pod_log = start_runner(tmp_path, registry)
        # Every layer is being fetched (in parallel) and is now blocked on the registry.
        assert registry.wait_for_blob_requests(registry.layer_count, timeout=60), pod_log.read_text()[-3000:]
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stopped_after = time.monotonic() - sent
        assert proc.returncode == 143, pod_log.read_text()[-3000:]
        assert stopped_after < PACK_SLACK, f"{mode}: stopped {stopped_after:.2f}s after SIGTERM"
        assert_nothing_left(proc, registry, pod_log)
    step = pack_step(tmp_path)
    assert step["status"] == "interrupted"
    assert "during the data pack pull" in step["message"]


@pytest.mark.parametrize(
    ("mode", "connection_close"), [*((mode, False) for mode in PACK_MODES), ("drip", True), ("stall", True)]
)
def test_a_cancelled_pull_has_ended_its_workers_and_sockets_when_the_bound_returns(
    mode: str, connection_close: bool, tmp_path: Path
) -> None:
    """In process: by the time ``bounded`` raises, every fetch thread has ended and
    every connection is closed (the sockets were shut down, not left to time out),
    also when the registry answers ``Connection: close`` (http.client then hands
    the socket from the connection to the response)."""
    with HostileRegistry(mode, connection_close=connection_close) as registry:
        settings = PackSettings(ref=registry.ref, plain_http=True)
        with pytest.raises(PackError, match="over budget"):
            bounded(
                lambda cancelled: pull_pack(settings, tmp_path / "pack", cancelled=cancelled),
                budget_seconds=1.0,
                interrupted=lambda: False,
                over_budget=lambda: PackError("over budget"),
                what="the data pack pull",
            )
        assert [t.name for t in threading.enumerate() if t.name.startswith(("pack fetch", "bounded"))] == []
        assert registry.wait_until_released(timeout=1.0), "every connection was closed at once"
        assert len([path for path in registry.requests if "/blobs/" in path]) == registry.layer_count
    assert list(tmp_path.iterdir()) == [], "no pack and no staging directory"


def test_a_pull_stuck_in_a_tls_handshake_is_broken_off_when_the_bound_gives_up(tmp_path: Path) -> None:
    """The socket is watched from the moment TCP connects, before the handshake
    that would take it over: a registry that never says a word is let go at once."""
    with StalledListener() as stalled:
        settings = PackSettings(ref=f"127.0.0.1:{stalled.port}/acme/aicr-pack:1.0.0")
        with pytest.raises(PackError, match="over budget"):
            bounded(
                lambda cancelled: pull_pack(settings, tmp_path / "pack", cancelled=cancelled),
                budget_seconds=1.0,
                interrupted=lambda: False,
                over_budget=lambda: PackError("over budget"),
                what="the data pack pull",
            )
        assert [t.name for t in threading.enumerate() if t.name.startswith("bounded")] == []


@pytest.mark.parametrize("mode", ["serve", "stall"])
def test_over_https_the_pull_works_and_a_stalled_one_is_broken_off(mode: str, tmp_path: Path) -> None:
    """The TLS socket is watched as well as the raw one under it: a pull over
    https lands, and one whose blobs stall is let go when the bound gives up."""
    with HostileRegistry(mode, tls=tls_context(tmp_path)) as registry:
        settings = PackSettings(ref=registry.ref, insecure_tls=True)  # a self-signed lab registry
        if mode == "serve":
            pulled = pull_pack(settings, tmp_path / "pack")
            assert (pulled.path / "overlays" / "gpu.yaml").is_file()
            assert (pulled.path / "values.yaml").is_file()
        else:
            with pytest.raises(PackError, match="over budget"):
                bounded(
                    lambda cancelled: pull_pack(settings, tmp_path / "pack", cancelled=cancelled),
                    budget_seconds=1.0,
                    interrupted=lambda: False,
                    over_budget=lambda: PackError("over budget"),
                    what="the data pack pull",
                )
            assert [t.name for t in threading.enumerate() if t.name.startswith(("pack fetch", "bounded"))] == []
        assert registry.wait_until_released(timeout=5)


def test_a_pack_pulled_from_the_hostile_registry_when_it_behaves(tmp_path: Path) -> None:
    """The same registry serving properly: the three layers land (the fixture is a real pack)."""
    with HostileRegistry("serve") as registry:
        pulled = pull_pack(PackSettings(ref=registry.ref, plain_http=True), tmp_path / "pack")
        assert registry.wait_until_released(timeout=5)
    assert sorted(str(p.relative_to(pulled.path)) for p in pulled.path.rglob("*") if p.is_file()) == [
        "overlays/gpu.yaml",
        "registry.yaml",
        "values.yaml",
    ]


# --- pack inputs refused before any step ------------------------------------------------------


def test_a_pack_ref_with_a_port_past_65535_is_bad_input_before_any_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = "127.0.0.1:99999/acme/aicr-pack:1.0.0"
    env = clean_env(tmp_path, AICR_RUNNER_PACK__REF=ref)
    code = main(["run", "--results-dir", str(tmp_path / "results")], environ=env)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"AICR_RUNNER_PACK__REF={ref!r}: port 99999 of '127.0.0.1:99999' is not a TCP port (1-65535)" in err
    assert not (tmp_path / "results").exists(), "no step ran"


def test_a_missing_pack_dir_is_bad_input_saying_it_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-pack"
    code = main(["plan", "--pack-dir", str(missing), "--output", str(tmp_path / "plan")], environ=clean_env(tmp_path))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--pack-dir={str(missing)!r}: the directory does not exist" in err
    assert "registry.yaml" in err  # what is wanted instead
    assert not (tmp_path / "plan").exists(), "no step ran"
