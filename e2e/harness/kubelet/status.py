"""Status reporting to the API server: the pod's status patches and its lifecycle (deletion, grace)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from e2e.harness.apiserver import ControlPlane
from e2e.harness.kube import KubeError
from e2e.harness.kubelet.model import ContainerRun, PodDeletion


class _StatusMixin:
    """Writes pod status back to the API server, like the kubelet's status manager."""

    def _patch_status(self, pod_path: str, status: Mapping[str, Any]) -> None:
        # A strategic merge, as the kubelet's status manager does: conditions merge
        # by type, so the API server's DisruptionTarget stays next to ours.
        self.plane.admin.request(
            "PATCH",
            f"{pod_path}/status",
            {"status": dict(status)},
            content_type="application/strategic-merge-patch+json",
        )

    @staticmethod
    def _final_status(
        pod: Mapping[str, Any], runs: Sequence[ContainerRun], phase: str, image_id: str = ""
    ) -> dict[str, Any]:
        images = {
            c["name"]: c.get("image", "") for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
        }

        def status(run: ContainerRun) -> dict[str, Any]:
            state: dict[str, Any]
            if run.exit_code is None:
                state = {"waiting": {"reason": run.reason, "message": run.detail}}
            else:
                state = {
                    "terminated": {
                        "exitCode": run.exit_code,
                        "reason": run.reason,
                        **({"message": run.termination_message} if run.termination_message else {}),
                    }
                }
            return {
                "name": run.name,
                "image": images.get(run.name, ""),
                "imageID": image_id,
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": state,
            }

        return {
            "phase": phase,
            "initContainerStatuses": [status(r) for r in runs if r.init],
            "containerStatuses": [status(r) for r in runs if not r.init],
        }


class _PodLifecycle:
    """The Pod object while its containers run: ends it through the API when a
    test asks, and notices its deletion (polled: one GET every POLL seconds)."""

    POLL = 0.2

    def __init__(self, plane: ControlPlane, pod_path: str, end_by: str, cancel: threading.Event | None) -> None:
        self.plane = plane
        self.pod_path = pod_path
        self.end_by = end_by
        self._cancel = cancel
        self._next_poll = 0.0
        self.deletion: PodDeletion | None = None

    @property
    def cancelled(self) -> bool:
        """The harness is shutting down: kill without a grace period."""
        return self._cancel is not None and self._cancel.is_set()

    def request_end(self) -> None:
        """Delete the pod (its own grace period) or evict it, through the API."""
        if self.end_by == "evict":
            name = self.pod_path.rsplit("/", 1)[1]
            self.plane.admin.create(
                f"{self.pod_path}/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}},
            )
        else:
            self.plane.admin.delete(self.pod_path)

    def poll(self) -> PodDeletion | None:
        """The deletion, once the Pod object carries a deletionTimestamp."""
        if self.deletion is not None:
            return self.deletion
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + self.POLL
        try:
            pod = self.plane.admin.get(self.pod_path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            self.deletion = PodDeletion(grace_seconds=0.0)
            return self.deletion
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return None
        disruption = next(
            (
                str(c.get("reason", ""))
                for c in (pod.get("status") or {}).get("conditions") or []
                if c["type"] == "DisruptionTarget" and c["status"] == "True"
            ),
            "",
        )
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        self.deletion = PodDeletion(grace_seconds=grace, disruption=disruption)
        return self.deletion

    def finish_deletion(self) -> None:
        """The containers are gone: remove the Pod object (grace 0), as the kubelet
        does; finalizers (the Job controller's) keep it until they are lifted."""
        with contextlib.suppress(KubeError):
            self.plane.admin.request("DELETE", self.pod_path, {"gracePeriodSeconds": 0})
