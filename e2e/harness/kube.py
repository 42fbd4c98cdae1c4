"""A small JSON client for the Kubernetes API: plain dicts in and out.

The harness reads objects exactly as the API server returns them (camelCase keys),
which is what a kubelet sees; it authenticates either with a client certificate
(the admin) or a bearer token (a ServiceAccount).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

__all__ = ["Kube", "KubeError", "ObjectWatch"]


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
        # Room for the load scenario's ten pods followed at once (each a watch and
        # reads): beyond it urllib3 still connects, but warns on every surplus one.
        self._http = urllib3.PoolManager(ssl_context=ctx, retries=False, timeout=urllib3.Timeout(30), maxsize=32)

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

    def watch(self, path: str, **query: str) -> Generator[dict[str, Any], None, None]:
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

    def drop_connections(self) -> None:
        """Close every pooled connection: after the API server was stopped, its
        idle-connection timers fire as it resumes and close the kept-alive ones,
        which the next request would otherwise reuse (``RemoteDisconnected``)."""
        self._http.clear()

    def raw_get(self, path: str) -> tuple[int, str]:
        """Status and body of a GET, without raising (health endpoints)."""
        resp = self._http.request("GET", self.server + path, headers=self._headers)
        return resp.status, resp.data.decode(errors="replace")


class ObjectWatch:
    """Every change of one named object, from a watch in a background thread.

    After the server ends the stream (its timeout) or the API server is away for
    a while, the watch starts again from the last version it saw; when the server
    says that version is too old, from the current state. ``on_event(type,
    object)`` runs on the watch's thread.
    """

    def __init__(
        self,
        client: Kube,
        collection: str,
        name: str,
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        resource_version: str = "",
    ) -> None:
        self._client = client
        self._collection = collection
        self._name = name
        self._on_event = on_event
        self._version = resource_version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{name}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch_once()
            except Exception:  # noqa: BLE001 - an API outage: watch again once it is back
                self._stop.wait(0.5)

    def _watch_once(self) -> None:
        for event in self._client.watch(
            self._collection,
            fieldSelector=f"metadata.name={self._name}",
            resourceVersion=self._version,
            timeoutSeconds="30",
        ):
            if self._stop.is_set():
                return
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                self._version = ""  # too old: start from the current state
                return
            self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
            self._on_event(str(event["type"]), obj)

    def stop(self) -> None:
        self._stop.set()
