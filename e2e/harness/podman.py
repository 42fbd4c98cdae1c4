"""podman as the harness runs it (images derived for the node, saved into its
containerd): runc, not crun (crun fails on hybrid cgroup hosts); cgroupfs (no
systemd). The project's image tests run it the same way (tests/support/podman.py
takes this definition). Every call has a deadline: a podman wedged on its store
lock must fail the test that waits on it, not hold the whole e2e run."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["BUILD_SECONDS", "CALL_SECONDS", "PODMAN", "content_tag", "image_exists", "podman", "podman_build"]

PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")

#: A build from a local context (no pulls: every base is built here) on a loaded 2-core machine.
BUILD_SECONDS = 900.0
#: Any other call (inspect, save, exists, tag).
CALL_SECONDS = 300.0


def podman(*args: str, timeout: float = CALL_SECONDS) -> subprocess.CompletedProcess[str]:
    """``podman ARGS`` within ``timeout``; a failure or an overrun raises ``RuntimeError`` naming the call."""
    call = f"podman {' '.join(args)}"
    try:
        proc = subprocess.run([*PODMAN, *args], capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{call} did not end within {timeout:g}s") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{call} (exit {proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return proc


def podman_build(context: Path, tag: str, containerfile: Path | None = None) -> None:
    """Build ``context`` (its ``Containerfile`` unless given) as ``tag`` within ``BUILD_SECONDS``."""
    file = containerfile or context / "Containerfile"
    podman("build", "--quiet", "--tag", tag, "--file", str(file), str(context), timeout=BUILD_SECONDS)


def content_tag(name: str, layout: str, *files: Path) -> str:
    """``localhost/<name>:<16 hex>``, a hash of ``layout`` and of each file's bytes: an
    image tagged so is built once per content (``image_exists`` first)."""
    import hashlib

    digest = hashlib.sha256(layout.encode())
    for part in files:
        digest.update(hashlib.sha256(part.read_bytes()).digest())
    return f"localhost/{name}:{digest.hexdigest()[:16]}"


def image_exists(tag: str) -> bool:
    """Whether podman's store holds ``tag`` (a wedged store fails the caller, as every call does)."""
    try:
        return subprocess.run([*PODMAN, "image", "exists", tag], check=False, timeout=CALL_SECONDS).returncode == 0
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"podman image exists {tag} did not end within {CALL_SECONDS:g}s") from exc
