"""Finding a Helm release's Job, its status and events, and claiming (binding) its next pod."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from e2e.harness.kube import KubeError
from e2e.harness.kubelet.model import NODE_NAME


class _JobsMixin:
    """The Job and its pods as the API server has them; binds a pod to the Node like the scheduler."""

    def find_job(self, release: str, namespace: str) -> dict[str, Any]:
        """The newest Job of a Helm release (by Helm's release annotation, else the
        app.kubernetes.io/instance label)."""
        jobs = self.plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        mine = [
            j
            for j in jobs
            if (j["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name") == release
            or (j["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == release
        ]
        if not mine:
            names = ", ".join(j["metadata"]["name"] for j in jobs) or "none"
            raise LookupError(f"no Job of release {release!r} in namespace {namespace!r} (Jobs there: {names})")
        mine.sort(key=lambda j: (j["metadata"]["creationTimestamp"], j["metadata"]["name"]))
        return dict(mine[-1])

    def _job(self, release: str, namespace: str, job_name: str | None) -> dict[str, Any]:
        if job_name:
            return self.plane.admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job_name}")
        return self.find_job(release, namespace)

    def job_status(self, job: Mapping[str, Any]) -> tuple[str, str]:
        """("Complete" | "Failed", reason) once the Job controller has finished the
        Job, else ("", "")."""
        meta = job["metadata"]
        current = self.plane.admin.get(f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}")
        for condition in (current.get("status") or {}).get("conditions") or []:
            if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                return str(condition["type"]), str(condition.get("reason", ""))
        return "", ""

    def _job_events(self, job: Mapping[str, Any]) -> str:
        meta = job["metadata"]
        events = self.plane.admin.get(
            f"/api/v1/namespaces/{meta['namespace']}/events", fieldSelector=f"involvedObject.uid={meta['uid']}"
        )["items"]
        return "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events) or "none"

    def _pods_to_run(self, namespace: str, selector: str | None) -> list[dict[str, Any]]:
        """Pods no node has taken yet, oldest first."""
        query = {"fieldSelector": "spec.nodeName="}
        if selector:
            query["labelSelector"] = selector
        pods = self.plane.admin.get(f"/api/v1/namespaces/{namespace}/pods", **query)["items"]
        waiting = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        waiting.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        return waiting

    def _bind(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """Bind the pod to this node (what the scheduler does); None if another
        runner took it first."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        try:
            self.plane.admin.create(
                f"{path}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": meta["name"], "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
                },
            )
        except KubeError as exc:
            if exc.status in (404, 409):
                return None
            raise
        return self.plane.admin.get(path)

    def claim_pod(self, job: Mapping[str, Any], *, timeout: float = 60.0) -> dict[str, Any] | None:
        """Wait for the Job controller's next pod of ``job`` and bind it here.
        None when the Job finished instead."""
        meta = job["metadata"]
        selector = f"batch.kubernetes.io/controller-uid={meta['uid']}"
        deadline = time.monotonic() + timeout
        while True:
            for candidate in self._pods_to_run(meta["namespace"], selector):
                pod = self._bind(candidate)
                if pod is not None:
                    return pod
            if self.job_status(job)[0]:
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Job {meta['namespace']}/{meta['name']}: no pod to run after {timeout:.0f}s "
                    f"(the Job's events: {self._job_events(job)})"
                )
            time.sleep(0.1)

    # -- running Jobs ---------------------------------------------------------
