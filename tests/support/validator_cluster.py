"""A stand-in Kubernetes API for ``aicr validate``'s validator Jobs (tests only).

aicr validate runs each check as a Job whose container is a validator image
(``ghcr.io/nvidia/aicr-validators/<phase>``) that needs GPUs, NVIDIA's images and
a GPU operator: none can run here. What aicr makes of a validator's exit code
(0 passed, 1 failed, 2 skipped, anything else ``other``) and how it then exits is
aicr's own code, and that is what the contract test checks against the real
v0.11.1. So this server answers exactly the calls aicr v0.11.1's validate makes
(recorded from the real binary: create the namespace, apply the ServiceAccount,
the ClusterRoleBinding and each check's Job, create and delete the data
ConfigMaps, read the Job, list its pod, read the pod's log, delete the Job,
apply the per-phase CTRF ConfigMap) and reports every Job finished, its pod's
container terminated with the exit code the test chose for that check and its
``message`` as the termination message.

JSON only (aicr's client asks for protobuf or JSON and accepts JSON); request
bodies are not read: each answer is built from the path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.loopback import LoopbackServer

__all__ = ["Validators", "validator_cluster"]

_KINDS = {
    "namespaces": ("v1", "Namespace"),
    "serviceaccounts": ("v1", "ServiceAccount"),
    "configmaps": ("v1", "ConfigMap"),
    "clusterrolebindings": ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    "jobs": ("batch/v1", "Job"),
    "pods": ("v1", "Pod"),
}
#: aicr names a check's Job ``aicr-<check>-<8 hex>``.
_JOB = re.compile(r"^aicr-(?P<check>.+)-[0-9a-f]{8}$")


@dataclass
class Validators:
    """Each check's validator: its exit code (``default`` for the others) and its
    termination message."""

    exits: Mapping[str, int] = field(default_factory=dict)
    default: int = 0
    messages: Mapping[int, str] = field(default_factory=dict)
    #: Every request, ``METHOD path``, in order.
    requests: list[str] = field(default_factory=list)

    def exit_code(self, job: str) -> int:
        match = _JOB.match(job)
        return self.exits.get(match.group("check") if match else job, self.default)


def _resource(path: str) -> tuple[str, str | None, str | None]:
    """(resource, name, namespace) of an API path; ("", None, None) when unknown."""
    parts = [p for p in path.split("/") if p]
    namespace = None
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        namespace = parts[parts.index("namespaces") + 1]
        parts = parts[parts.index("namespaces") + 2 :]
    for i, part in enumerate(parts):
        if part in _KINDS:
            return part, parts[i + 1] if i + 1 < len(parts) else None, namespace
    return "", None, namespace


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    validators: Validators

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlparse(self.path)
        self.validators.requests.append(f"{self.command} {url.path}")
        resource, name, namespace = _resource(url.path)
        if not resource:
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}
            return self._send(404, json.dumps(status).encode())
        if self.command == "DELETE":
            return self._send(200, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success"}).encode())
        if resource == "pods" and url.path.endswith("/log"):
            return self._send(200, b"validator log\n", "text/plain")
        if resource == "pods":
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            pod = self._pod(selector.rpartition("=")[2], namespace)
            return self._send(200, json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [pod]}).encode())
        return self._send(
            201 if self.command == "POST" else 200, json.dumps(self._object(resource, name, namespace)).encode()
        )

    def _object(self, resource: str, name: str | None, namespace: str | None) -> dict[str, Any]:
        api, kind = _KINDS[resource]
        meta = {"name": name or "created", "uid": "0", "resourceVersion": "1"}
        body: dict[str, Any] = {
            "apiVersion": api,
            "kind": kind,
            "metadata": meta | ({"namespace": namespace} if namespace else {}),
        }
        if kind == "Job" and name:
            ended = "Complete" if self.validators.exit_code(name) == 0 else "Failed"
            body["status"] = {"conditions": [{"type": ended, "status": "True"}]}
        return body

    def _pod(self, job: str, namespace: str | None) -> dict[str, Any]:
        code = self.validators.exit_code(job)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        terminated["message"] = self.validators.messages.get(code, "")
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{job}-pod", "namespace": namespace},
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [{"name": "validator", "state": {"terminated": terminated}}],
            },
        }

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the requests are in ``Validators.requests``."""


@contextmanager
def validator_cluster(validators: Validators, directory: Path) -> Iterator[Path]:
    """Serve on a free loopback port; yields a kubeconfig (for ``KUBECONFIG``)."""
    handler = type("Handler", (_Handler,), {"validators": validators})
    server = LoopbackServer(handler).start()
    kubeconfig = directory / "kubeconfig.yaml"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "stand-in", "user": {"token": "stand-in"}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
        "current-context": "stand-in",
    }
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(json.dumps(config))
    try:
        yield kubeconfig
    finally:
        server.stop()
