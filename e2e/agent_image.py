"""aicr v0.11.1's snapshot agent image on the e2e node.

``aicr snapshot`` (and ``aicr validate`` without ``--snapshot``) starts its agent
Job with the image ``ghcr.io/nvidia/aicr:v0.11.1``, no pull policy (so a loaded
``:v0.11.1`` tag is not pulled) and the command ``["aicr"]``, resolved through
``PATH``. NVIDIA publishes that image built by ko on
``nvcr.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04``; public images cannot be pulled
here, so this one is built the way the project builds its own base: the
mmdebstrap Debian base of ``scripts/image-inputs.sh base`` (bash, for the
stand-in ``nvidia-smi``), with

- the real aicr v0.11.1 release binary (the archive checked against its
  checksums file) at ``/usr/local/bin/aicr``, as upstream's own test image has it;
- a stand-in ``nvidia-smi`` on ``PATH`` (``NVIDIA_SMI``): the published image has
  none (the NVIDIA container runtime injects it on a GPU node); the v0.11.1 GPU
  collector runs only ``nvidia-smi -q -x`` and reads the driver, CUDA version,
  GPU count and the first GPU's details from its XML. This one answers that call
  with 8 H100s and fails any other;
- the published image's OS release (Ubuntu 24.04, its base's ``os-release``),
  which is what a restricted agent (``--privileged=false``, no host mounts)
  reports as the OS; a privileged agent mounts the node's ``/etc/os-release``
  over it.

The image is built once per content (the tag hashes the inputs) and loaded into
the node's containerd under the published name.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from e2e.harness.podman import content_tag, image_exists, podman_build
from e2e.tools import REPO_ROOT
from tests.support.real_aicr import extract_binary

__all__ = ["AGENT_IMAGE", "GPU", "NVIDIA_SMI", "OS_RELEASE", "agent_image", "base_image_tar"]

#: The agent image aicr v0.11.1 starts (``--image``'s default).
AGENT_IMAGE = "ghcr.io/nvidia/aicr:v0.11.1"
#: What the stand-in nvidia-smi reports: eight of these.
GPU: dict[str, Any] = {
    "count": 8,
    "model": "NVIDIA H100 80GB HBM3",
    "architecture": "Hopper",
    "driver": "570.124.06",
    "cuda": "12.8",
}
NVIDIA_SMI = f"""#!/bin/bash
# A stand-in nvidia-smi for aicr's GPU collector: it answers `nvidia-smi -q -x`
# (the only call aicr v0.11.1 makes) with {GPU["count"]} {GPU["model"]} GPUs.
if [[ "$*" != "-q -x" ]]; then
  echo "stand-in nvidia-smi: only '-q -x' is answered, not '$*'" >&2
  exit 2
fi
cat <<'HEAD'
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <timestamp>Sat Dec  5 00:00:00 2026</timestamp>
  <driver_version>{GPU["driver"]}</driver_version>
  <cuda_version>{GPU["cuda"]}</cuda_version>
  <attached_gpus>{GPU["count"]}</attached_gpus>
HEAD
for i in $(seq 0 {GPU["count"] - 1}); do
  cat <<GPU
  <gpu id="00000000:$(printf '%02X' $((0x18 + i))):00.0">
    <product_name>{GPU["model"]}</product_name>
    <product_brand>NVIDIA</product_brand>
    <product_architecture>{GPU["architecture"]}</product_architecture>
    <display_mode>Disabled</display_mode>
    <display_active>Disabled</display_active>
    <persistence_mode>Enabled</persistence_mode>
    <addressing_mode>None</addressing_mode>
    <minor_number>$i</minor_number>
    <uuid>GPU-0000000$i-e2e0-4000-8000-00000000000$i</uuid>
    <vbios_version>96.00.99.00.01</vbios_version>
    <gsp_firmware_version>{GPU["driver"]}</gsp_firmware_version>
  </gpu>
GPU
done
echo "</nvidia_smi_log>"
"""
#: The published image's base's ``/etc/os-release`` (Ubuntu 24.04).
OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
"""
LAYOUT = """FROM scratch
ADD base.tar /
COPY aicr /usr/local/bin/aicr
COPY nvidia-smi /usr/local/bin/nvidia-smi
COPY os-release /usr/lib/os-release
ENTRYPOINT ["/usr/local/bin/aicr"]
"""


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def base_image_tar(out: Path) -> Path:
    """The project's mmdebstrap base (cached by recipe in the image cache)."""
    arch = _arch()
    script = REPO_ROOT / "scripts" / "image-inputs.sh"
    proc = subprocess.run(
        ["bash", str(script), "--arch", arch, "--out", str(out), "base"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/image-inputs.sh base (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return out / f"base-{arch}.tar"


def agent_image(releases_dir: Path) -> str:
    """The agent image, built with podman from the release in ``releases_dir``
    (``AICR_TEST_RELEASES_DIR``); the tag is a hash of every input."""
    with tempfile.TemporaryDirectory(prefix="e2e-agent-") as scratch:
        context = Path(scratch)
        binary = extract_binary(context, {"AICR_TEST_RELEASES_DIR": str(releases_dir)})
        base = base_image_tar(context / "inputs")
        base.rename(context / "base.tar")
        smi = context / "nvidia-smi"
        smi.write_text(NVIDIA_SMI)
        smi.chmod(0o755)
        (context / "os-release").write_text(OS_RELEASE)
        tag = content_tag("aicr-snapshot-agent", LAYOUT + NVIDIA_SMI + OS_RELEASE, binary, context / "base.tar")
        if image_exists(tag):
            return tag
        (context / "Containerfile").write_text(LAYOUT)
        shutil.rmtree(context / "inputs")
        podman_build(context, tag)
    return tag
