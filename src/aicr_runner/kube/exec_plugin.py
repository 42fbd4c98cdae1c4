"""A kubeconfig's exec credential plugin, run under a deadline.

The official client runs the plugin with no timeout (a plugin waiting on a
browser login or a dead token endpoint holds ``fleet`` forever) and puts its
stderr, which often holds the refresh token it failed with, into the error it
logs. Here the plugin runs non-interactively (stdin closed), in a session of
its own so that the plugin and everything it started are killed at the
deadline, and its stderr is never shown: the message says how it ended.
What it prints on stdout is the ``ExecCredential`` of the client-go contract
(``status.token``, or ``status.clientCertificateData`` and ``clientKeyData``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["ExecPluginError", "credential_user"]

#: An ExecCredential is a few KB; more is not one.
_MAX_OUTPUT_BYTES = 1024 * 1024


class ExecPluginError(Exception):
    """The plugin gave no credential; the message names the plugin and how it ended.
    ``timed_out``: it was still running at the deadline."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def credential_user(plugin: Mapping[str, Any], cluster: Mapping[str, Any], *, deadline: float) -> dict[str, str]:
    """The kubeconfig ``user`` the plugin's credential makes (a token, or a client
    certificate and key as base64 data), or ``ExecPluginError`` by ``deadline``
    (a ``time.monotonic`` value)."""
    command = plugin.get("command")
    if not isinstance(command, str) or not command:
        raise ExecPluginError("exec credential plugin: no command")
    name = os.path.basename(command)[:100]
    status = _status(_run(plugin, command, cluster, deadline), name)
    if isinstance(status.get("token"), str) and status["token"]:
        return {"token": status["token"]}
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if isinstance(cert, str) and isinstance(key, str) and cert and key:
        return {
            "client-certificate-data": base64.b64encode(cert.encode()).decode(),
            "client-key-data": base64.b64encode(key.encode()).decode(),
        }
    raise ExecPluginError(f"exec credential plugin {name}: its ExecCredential holds no token and no client certificate")


def _argv(plugin: Mapping[str, Any], command: str) -> list[str]:
    args = plugin.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ExecPluginError(f"exec credential plugin {os.path.basename(command)}: args is not a list of strings")
    return [command, *args]


def _environment(plugin: Mapping[str, Any], cluster: Mapping[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    for item in plugin.get("env") or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str):
            env[item["name"]] = item["value"]
    spec: dict[str, Any] = {"interactive": False}
    if plugin.get("provideClusterInfo"):
        spec["cluster"] = {k: v for k, v in cluster.items() if isinstance(v, str | bool)}
    api_version = str(plugin.get("apiVersion") or "client.authentication.k8s.io/v1")
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec})
    return env


def _run(plugin: Mapping[str, Any], command: str, cluster: Mapping[str, Any], deadline: float) -> bytes:
    """The plugin's stdout; it and its children killed at ``deadline``."""
    name = os.path.basename(command)[:100]
    try:
        process = subprocess.Popen(  # the kubeconfig's own plugin, as kubectl runs it
            _argv(plugin, command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_environment(plugin, cluster),
            start_new_session=True,
        )
    except OSError as exc:
        raise ExecPluginError(f"exec credential plugin {name} could not start ({exc.strerror or exc})") from exc
    try:
        out, _ = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(process)
        raise ExecPluginError(
            f"exec credential plugin {name} gave no credential within the --timeout", timed_out=True
        ) from None
    if process.returncode != 0:
        # Its stderr is not shown: a failing plugin prints the token or refresh token it failed with.
        raise ExecPluginError(f"exec credential plugin {name} exited {process.returncode} (its output is not shown)")
    return out


def _kill(process: subprocess.Popen[bytes]) -> None:
    """The plugin's whole session: a child it started may hold its pipes open."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        process.communicate(timeout=1)


def _status(out: bytes, name: str) -> Mapping[str, Any]:
    if len(out) > _MAX_OUTPUT_BYTES:
        raise ExecPluginError(f"exec credential plugin {name}: over {_MAX_OUTPUT_BYTES} bytes of output")
    try:
        document = json.loads(out)
    except ValueError:
        raise ExecPluginError(f"exec credential plugin {name}: its output is not an ExecCredential (JSON)") from None
    status = document.get("status") if isinstance(document, Mapping) else None
    if not isinstance(status, Mapping):
        raise ExecPluginError(f"exec credential plugin {name}: its ExecCredential has no status")
    return status
