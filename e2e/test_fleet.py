"""``aicr-runner fleet`` over three clusters of one kubeconfig, against the real
API server after a real run wrote its ``Report``:

- ``real``: the harness's admin credentials: the release's row, green, with the
  report's counts, aicr version and last run;
- ``locked``: the same API server with a ServiceAccount token that has no RBAC:
  a ``forbidden`` row;
- ``gone``: an address that refuses connections: an ``unreachable`` row.

The command runs as a user would run it (the installed entry point, a
subprocess); its exit code is 34 (not all green), and 0 with ``real`` alone.
How long it took is printed for the docs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.apiserver import ControlPlane
from e2e.harness.node import Kubelet
from e2e.reports import Release, ran, report_apis
from e2e.scenarios import RELEASE

pytestmark = pytest.mark.e2e

FLEET_TIMEOUT = "5"


def refused_server() -> str:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{sock.getsockname()[1]}"


def fleet_kubeconfig(plane: ControlPlane, namespace: str, path: Path) -> Path:
    """One file, three contexts: the admin's, a ServiceAccount's without RBAC, a dead address."""
    admin = yaml.safe_load(plane.kubeconfig.read_text())
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "fleet-reader"}},
    )
    token = plane.token(namespace, "fleet-reader")
    cluster = dict(admin["clusters"][0]["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "real", "cluster": cluster},
            {"name": "gone", "cluster": {**cluster, "server": refused_server()}},
        ],
        "users": [
            {"name": "admin", "user": admin["users"][0]["user"]},
            {"name": "no-rbac", "user": {"token": token}},
        ],
        "contexts": [
            {"name": "real", "context": {"cluster": "real", "user": "admin"}},
            {"name": "locked", "context": {"cluster": "real", "user": "no-rbac"}},
            {"name": "gone", "context": {"cluster": "gone", "user": "admin"}},
        ],
        "current-context": "real",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def fleet(kubeconfig: Path, *args: str) -> tuple[int, dict[str, Any], str, float]:
    argv = [sys.executable, "-m", "aicr_runner", "fleet", "--kubeconfig", str(kubeconfig), "-o", "json", *args]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    took = time.monotonic() - started
    return done.returncode, json.loads(done.stdout), done.stderr, took


def test_fleet_over_a_real_cluster_a_forbidden_one_and_an_unreachable_one(
    release: Release, control_plane: ControlPlane, aicr_kubelet: Kubelet, tmp_path: Path
) -> None:
    report_apis(control_plane, ["openreports", "wgpolicy"])
    release.install("pass")
    ran(aicr_kubelet.run_job(RELEASE, release.namespace))
    report = release.report("openreports")
    assert report is not None
    config = fleet_kubeconfig(control_plane, release.namespace, tmp_path / "fleet.kubeconfig")

    code, out, err, took = fleet(config, "--all-contexts", "--timeout", FLEET_TIMEOUT)
    print(f"fleet over 3 contexts (real, forbidden, unreachable): {took:.2f}s", file=sys.stderr)
    assert code == 34, err
    assert "Traceback" not in err
    rows = {(row["context"], row["namespace"]): row for row in out["rows"]}
    mine = rows[("real", release.namespace)]
    assert (mine["release"], mine["phase"], mine["source"], mine["green"]) == (RELEASE, "Succeeded", "Report", True)
    assert mine["passed"] == report["summary"]["pass"]
    assert (mine["failed"], mine["other"]) == (0, 0)
    assert mine["last_run"] == report["metadata"]["annotations"]["aicr.nvidia.com/last-run"]
    [locked] = [row for row in out["rows"] if row["context"] == "locked"]
    assert locked["problem"].startswith("forbidden: listing Reports failed: HTTP 403")
    [gone] = [row for row in out["rows"] if row["context"] == "gone"]
    assert gone["problem"].startswith("unreachable:")
    assert "Connection refused" in gone["problem"]

    code, out, err, took = fleet(config, "--context", "real", "--timeout", FLEET_TIMEOUT)
    print(f"fleet over the real context alone: {took:.2f}s", file=sys.stderr)
    others = [row for row in out["rows"] if row["namespace"] != release.namespace]
    # Other tests' releases in this session's cluster may be red; ours is green.
    assert code == (0 if all(row["green"] for row in others) else 34), out
