"""The aicr fetch against a loopback release server: the node's architecture,
and a wall-clock budget that holds whatever the server does."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.hostile_server import ReleaseServer, StalledListener, release_archive
from tests.integration.test_runs import clean_env

ARM64 = "aicr_1.2.0_linux_arm64.tar.gz"
AMD64 = "aicr_1.2.0_linux_amd64.tar.gz"


@pytest.fixture
def server(tmp_path: Path) -> ReleaseServer:
    with ReleaseServer(tmp_path / "releases") as srv:
        yield srv  # type: ignore[misc]


def fake_binary(tmp_path: Path, arch: str) -> bytes:
    launcher = install_fake_aicr(tmp_path / f"fake-{arch}").read_bytes()
    return launcher + f"# built for linux/{arch}\n".encode()


def test_an_arm64_node_fetches_the_arm64_release_with_its_pin_and_checksum_line(
    server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart renders AICR__ARCH="" by default: the runtime asks the machine."""
    monkeypatch.setattr("aicr_runner.config.platform.machine", lambda: "aarch64")
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
    monkeypatch.setattr("aicr_runner.config.platform.machine", lambda: "aarch64")
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


def pack_env(tmp_path: Path, server: ReleaseServer, **extra: str) -> dict[str, str]:
    server.drip_everything = True
    host = server.url.removeprefix("http://")
    return clean_env(
        tmp_path,
        AICR_RUNNER_PACK__REF=f"{host}/acme/aicr-pack:1.0.0",
        AICR_RUNNER_PACK__PLAIN_HTTP="true",
        **extra,
    )


def test_the_pack_pull_budget_bounds_a_registry_that_drips(
    server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = install_fake_aicr(tmp_path / "bin")
    env = pack_env(tmp_path, server, AICR_RUNNER_PACK__PULL_BUDGET_SECONDS=str(BUDGET))
    started = time.monotonic()
    code = main(["run", "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "results")], environ=env)
    elapsed = time.monotonic() - started
    assert code == 22, capsys.readouterr().err[-3000:]
    assert elapsed < BUDGET + SLACK, f"the run took {elapsed:.1f}s"
    assert any(path.startswith("/v2/") for path in server.requests), "the pull reached the registry"
    termination = (tmp_path / "termination-log").read_text()
    assert termination.startswith("Failed (exit 22): pack failed:")
    assert "3s pull budget (AICR_RUNNER_PACK__PULL_BUDGET_SECONDS)" in termination


def test_sigterm_during_a_pack_pull_stops_it_and_exits_143(server: ReleaseServer, tmp_path: Path) -> None:
    fake = install_fake_aicr(tmp_path / "bin")
    env = pack_env(tmp_path, server)
    results = tmp_path / "results"
    runner = Path(sys.executable).parent / "aicr-runner"
    pod_log = tmp_path / "pod.log"
    with pod_log.open("wb") as out_file:
        proc = subprocess.Popen(
            [str(runner), "run", "--aicr-binary", str(fake), "--results-dir", str(results)],
            env=env,
            stdout=out_file,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while not any(path.startswith("/v2/") for path in server.requests):
        assert time.monotonic() < deadline, pod_log.read_text()
        time.sleep(0.05)
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    stopped_after = time.monotonic() - sent
    assert proc.returncode == 143, pod_log.read_text()[-3000:]
    assert stopped_after < 2.5, f"stopped {stopped_after:.1f}s after SIGTERM"
    report = json.loads((results / "aicr-run-status" / "report.json").read_text())
    pack = next(s for s in report["steps"] if s["state"] == "pack")
    assert pack["status"] == "interrupted"
    assert "during the data pack pull" in pack["message"]
