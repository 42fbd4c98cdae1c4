"""The hosts.toml ``mirror --hosts-toml`` writes, read by a real containerd (Debian's):
an image pulled by its upstream name comes from the mirror, with the upstream
stopped; a name the mirror lacks fails (nothing to fall back to in an air gap).

containerd runs privately for the test (its own root, state and socket, no CRI);
``ctr content fetch --hosts-dir`` resolves and fetches through the file the runner wrote.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicr_runner.mirror.copy import copy_all
from aicr_runner.mirror.hosts_toml import write_hosts_toml
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import OrasCopier
from tests.integration.conftest import ORAS, ensure_tools
from tests.integration.test_mirror_copy import HELM, _serve_registry, _tool

CTR, CONTAINERD = shutil.which("ctr"), shutil.which("containerd")


@pytest.fixture
def containerd() -> Iterator[str]:
    """A private containerd; its socket (a short path: a unix socket path has at most 107 bytes)."""
    assert CTR, "ctr (Debian's containerd package) is needed"
    assert CONTAINERD, "containerd (Debian's containerd package) is needed"
    base = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    socket = base / "sock"
    config = base / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{base / "root"}"\nstate = "{base / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{socket}"\n'
    )
    with (base / "log").open("wb") as log:
        process = subprocess.Popen([CONTAINERD, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([CTR, "--address", str(socket), "version"], capture_output=True, check=False).returncode:
            assert process.poll() is None, (base / "log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer within 30 s"
            time.sleep(0.1)
        yield str(socket)
    finally:
        process.terminate()
        process.wait(timeout=20)
        shutil.rmtree(base, ignore_errors=True)


def test_containerd_pulls_the_upstream_name_from_the_mirror(tmp_path: Path, containerd: str) -> None:
    ensure_tools()
    home = tmp_path / "home"
    home.mkdir()
    upstream, up = _serve_registry(tmp_path / "upstream")
    try:
        target_process, target = _serve_registry(tmp_path / "target")
    except BaseException:
        upstream.kill()  # the first registry must not outlive a second that did not start
        raise
    try:
        (tmp_path / "driver.txt").write_text("a driver\n")
        _tool(str(ORAS), "push", "--plain-http", f"{up}/nvidia/driver:580", "driver.txt", home=home, cwd=tmp_path)
        item = Item(Kind.IMAGE, f"{up}/nvidia/driver:580")
        copier = OrasCopier(str(ORAS), str(HELM), plain_http=frozenset({up, target}), timeout_seconds=120)
        (copied,) = copy_all([item], f"oci://{target}/air", copier).copied
        write_hosts_toml([item], f"oci://{target}/air", tmp_path / "certs.d", plain_http=True)
        upstream.terminate()
        upstream.wait(timeout=10)

        def fetch(reference: str) -> subprocess.CompletedProcess[str]:
            argv = [str(CTR), "--address", containerd, "content", "fetch", "--hosts-dir", str(tmp_path / "certs.d")]
            return subprocess.run([*argv, reference], capture_output=True, text=True, timeout=60, check=False)

        pulled = fetch(item.reference)
        assert pulled.returncode == 0, pulled.stderr
        listed = subprocess.run([str(CTR), "--address", containerd, "content", "ls", "-q"], capture_output=True,
                                text=True, check=True).stdout  # fmt: skip
        assert copied.digest in listed.split()
        missing = fetch(f"{up}/nvidia/driver:999")
        assert missing.returncode != 0
    finally:
        upstream.kill()
        target_process.terminate()
        target_process.wait(timeout=10)
