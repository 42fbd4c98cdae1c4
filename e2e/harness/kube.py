"""A small JSON client for the Kubernetes API: plain dicts in and out.

The harness reads objects exactly as the API server returns them (camelCase keys),
which is what a kubelet sees; it authenticates either with a client certificate
(the admin) or a bearer token (a ServiceAccount).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

__all__ = ["Kube", "KubeError"]


class KubeError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            self.reason = str(json.loads(body).get("reason", ""))
            message = str(json.loads(body).get("message", body))
        except ValueError:
            self.reason = ""
            message = body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


class Kube:
    def __init__(
        self,
        server: str,
        ca_file: Path,
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        ctx = ssl.create_default_context(cafile=str(ca_file))
        if cert_file is not None:
            ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._http = urllib3.PoolManager(ssl_context=ctx, retries=False, timeout=urllib3.Timeout(30), maxsize=8)

    def with_token(self, token: str, ca_file: Path) -> Kube:
        return Kube(self.server, ca_file, token=token)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        resp = self._http.request(method, url, body=data, headers=headers)
        text = resp.data.decode(errors="replace")
        if resp.status >= 400:
            raise KubeError(method, path, resp.status, text)
        return json.loads(text) if text.strip() else {}

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def watch(self, path: str, **query: str) -> Iterator[dict[str, Any]]:
        """The events of a watch (``?watch=true``) as they come: dicts with ``type``
        and ``object``. Ends when the server closes the stream (its timeout)."""
        url = self.server + path + "?" + urlencode({**query, "watch": "true"})
        resp = self._http.request(
            "GET", url, headers=self._headers, preload_content=False, timeout=urllib3.Timeout(connect=10, read=None)
        )
        try:
            if resp.status >= 400:
                raise KubeError("GET", path, resp.status, resp.read().decode(errors="replace"))
            buffered = b""
            for chunk in resp.stream(65536, decode_content=True):
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()

    def raw_get(self, path: str) -> tuple[int, str]:
        """Status and body of a GET, without raising (health endpoints)."""
        resp = self._http.request("GET", self.server + path, headers=self._headers)
        return resp.status, resp.data.decode(errors="replace")
