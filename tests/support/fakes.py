"""Test doubles for the runtime's externals (the Kubernetes API)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aicr_runner.errors import ApiConflictError, CaptureError, LeaseError
from aicr_runner.kube.api import LeaseRecord


@dataclass
class FakeKubeApi:
    """Records server-side applies; ``fail_names`` makes those ConfigMaps fail."""

    objects: dict[tuple[str, str], dict[str, object]] = field(default_factory=dict)
    applies: list[tuple[str, str]] = field(default_factory=list)
    fail_names: set[str] = field(default_factory=set)
    leases: dict[tuple[str, str], LeaseRecord] = field(default_factory=dict)
    #: Every Lease write, in order: ("create" | "replace", LeaseRecord as stored).
    lease_writes: list[tuple[str, LeaseRecord]] = field(default_factory=list)
    #: Lease calls fail with an API error while set.
    lease_api_down: bool = False
    #: Jobs' labels and HelmReleases' uids by (namespace, name); every Event created.
    job_labels: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    helmrelease_uids: dict[tuple[str, str], str] = field(default_factory=dict)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Event creation fails with this API error while set.
    event_error: str = ""
    #: Jobs' uids and annotations by (namespace, name); events.k8s.io Events created on them.
    job_uids: dict[tuple[str, str], str] = field(default_factory=dict)
    job_annotations: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    job_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: The CronJob (name, uid) owning a Job, by the Job's (namespace, name).
    job_owners: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    #: events.k8s.io writes and Job annotations fail with this API error while set.
    job_event_error: str = ""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _check_up(self, namespace: str, name: str) -> None:
        if self.lease_api_down:
            raise LeaseError(f"PUT Lease {namespace}/{name} failed: HTTP 503 Service Unavailable")

    def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        self._check_up(namespace, name)
        return self.leases.get((namespace, name))

    def create_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        self._check_up(namespace, lease.name)
        if (namespace, lease.name) in self.leases:
            raise ApiConflictError(f"Lease {namespace}/{lease.name}")
        return self._store("create", namespace, lease)

    def replace_lease(self, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        self._check_up(namespace, lease.name)
        current = self.leases.get((namespace, lease.name))
        if current is None or current.resource_version != lease.resource_version:
            raise ApiConflictError(f"Lease {namespace}/{lease.name}")
        return self._store("replace", namespace, lease)

    def _store(self, how: str, namespace: str, lease: LeaseRecord) -> LeaseRecord:
        stored = replace(lease, resource_version=str(next(self._versions)))
        self.leases[(namespace, lease.name)] = stored
        self.lease_writes.append((how, stored))
        return stored

    def apply_configmap(
        self,
        namespace: str,
        name: str,
        *,
        data: Mapping[str, str],
        binary_data: Mapping[str, bytes] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if name in self.fail_names:
            raise CaptureError(f"writing ConfigMap {namespace}/{name} failed: HTTP 403 Forbidden")
        self.applies.append((namespace, name))
        self.objects[(namespace, name)] = {
            "data": dict(data),
            "binaryData": dict(binary_data or {}),
            "labels": dict(labels or {}),
        }

    def get_configmap_data(self, namespace: str, name: str) -> Mapping[str, str] | None:
        stored = self.objects.get((namespace, name))
        return None if stored is None else dict(stored["data"])  # type: ignore[call-overload]

    def get_configmap_payload(self, namespace: str, name: str) -> tuple[Mapping[str, str], Mapping[str, bytes]] | None:
        stored = self.objects.get((namespace, name))
        if stored is None:
            return None
        return dict(stored["data"]), dict(stored["binaryData"])  # type: ignore[call-overload]

    def get_job_labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.job_labels.get((namespace, name))

    def get_helmrelease_uid(self, namespace: str, name: str) -> str | None:
        return self.helmrelease_uids.get((namespace, name))

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        if self.event_error:
            raise CaptureError(f"creating Event in {namespace} failed: {self.event_error}")
        self.events.append((namespace, dict(body)))

    def get_job_owner(self, namespace: str, name: str) -> tuple[str, str] | None:
        return self.job_owners.get((namespace, name))

    def get_job_uid(self, namespace: str, name: str) -> str | None:
        return self.job_uids.get((namespace, name))

    def create_job_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        if self.job_event_error:
            raise CaptureError(f"creating Event in {namespace} failed: {self.job_event_error}")
        self.job_events.append((namespace, dict(body)))

    def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        if self.job_event_error:
            raise CaptureError(f"annotating Job {namespace}/{name} failed: {self.job_event_error}")
        self.job_annotations.setdefault((namespace, name), {}).update(annotations)
