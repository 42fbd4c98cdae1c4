"""The release path's inputs for the architecture CI does not build an image for:
scripts/image-inputs.sh downloads requirements.lock's wheels for linux/arm64 with
--require-hashes, and every compiled one is an aarch64 wheel for the base's
Python. (linux/amd64 runs the whole path in CI: scripts/build-image.sh.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.podman import ROOT

pytestmark = pytest.mark.image


def test_the_arm64_wheels_of_the_lock_download_with_their_hashes(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "image-inputs.sh"), "--arch", "arm64", "--out", str(tmp_path), "wheels"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = sorted(path.name for path in (tmp_path / "wheels" / "arm64").glob("*.whl"))
    locked = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (ROOT / "requirements.lock").read_text(), re.M)
    names = {re.sub(r"[-_.]+", "_", name).lower() for name in locked}
    assert {wheel.split("-")[0].lower() for wheel in wheels} == names | {"aicr_runner"}
    pins = dict(re.findall(r"^([A-Z0-9_]+)=\"?([^\"\n]*)\"?$", (ROOT / "tools" / "versions.env").read_text(), re.M))
    abi = "cp" + pins["IMAGE_PYTHON"].replace(".", "")
    compiled = [wheel for wheel in wheels if not wheel.endswith("-none-any.whl")]
    assert compiled, "pydantic-core, PyYAML and rpds-py ship compiled wheels"
    for wheel in compiled:
        assert f"-{abi}-" in wheel, wheel
        assert "aarch64" in wheel, wheel
    assert (tmp_path / "requirements.lock").read_text() == (ROOT / "requirements.lock").read_text()
