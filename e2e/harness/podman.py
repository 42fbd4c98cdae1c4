"""podman as the harness runs it (images derived for the node, saved into its
containerd): runc, not crun (crun fails on hybrid cgroup hosts); cgroupfs (no
systemd). The project's image tests run it the same way (tests/support/podman.py
takes this definition)."""

from __future__ import annotations

__all__ = ["PODMAN"]

PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
