"""A failed run tells the Flux HelmRelease that rendered its Job why (a Warning Event)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from aicr_runner import logs
from aicr_runner.kube.events import EVENT_REASON, MESSAGE_LIMIT, HelmReleaseRef, report_failure
from tests.support.fakes import FakeKubeApi

JOB = ("aicr", "nvidia-aicr-3f2a9c0d1e")
FLUX_LABELS = {"helm.toolkit.fluxcd.io/name": "aicr", "helm.toolkit.fluxcd.io/namespace": "flux-system"}
MESSAGE = "Failed (exit 23): pack failed: the credential was rejected [aicr v1.2.0]"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def report(api: FakeKubeApi, message: str = MESSAGE) -> HelmReleaseRef | None:
    return report_failure(
        api, job_namespace=JOB[0], job=JOB[1], pod=f"{JOB[1]}-x7k2p", message=message, now=lambda: NOW
    )


def test_a_job_rendered_by_flux_gets_a_warning_event_on_its_helmrelease() -> None:
    api = FakeKubeApi(job_labels={JOB: {"app.kubernetes.io/name": "nvidia-aicr", **FLUX_LABELS}})
    api.helmrelease_uids[("flux-system", "aicr")] = "0b7e-uid"

    assert report(api) == HelmReleaseRef("flux-system", "aicr", "0b7e-uid")

    [(namespace, event)] = api.events
    assert namespace == "flux-system"  # an Event lives in its object's namespace
    assert event["metadata"] == {"generateName": "aicr.", "namespace": "flux-system"}
    assert event["involvedObject"] == {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "name": "aicr",
        "namespace": "flux-system",
        "uid": "0b7e-uid",
    }
    assert (event["type"], event["reason"], event["message"]) == ("Warning", EVENT_REASON, MESSAGE)
    assert event["related"] == {"apiVersion": "batch/v1", "kind": "Job", "name": JOB[1], "namespace": "aicr"}
    assert event["reportingInstance"] == f"{JOB[1]}-x7k2p"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-02T03:04:05Z"


def test_the_message_is_redacted_and_bounded() -> None:
    api = FakeKubeApi(job_labels={JOB: FLUX_LABELS})
    logs.register_secret("hunter2-token")
    report(api, "Failed (exit 23): password hunter2-token refused " + "x" * 5000)
    [(_, event)] = api.events
    assert "hunter2-token" not in event["message"]
    assert "password *** refused" in event["message"]
    assert len(event["message"]) == MESSAGE_LIMIT
    assert event["message"].endswith("...")


@pytest.mark.parametrize(
    "labels",
    [None, {}, {"helm.toolkit.fluxcd.io/name": "aicr"}, {"app.kubernetes.io/managed-by": "Helm"}],
    ids=["job gone", "no labels", "name without namespace", "plain helm"],
)
def test_a_job_not_rendered_by_flux_records_nothing(labels: dict[str, str] | None) -> None:
    api = FakeKubeApi(job_labels={} if labels is None else {JOB: labels})
    assert report(api) is None
    assert api.events == []


def test_without_the_helmreleases_uid_the_event_still_names_it() -> None:
    api = FakeKubeApi(job_labels={JOB: FLUX_LABELS})  # no read access to HelmReleases, or it is gone
    assert report(api) == HelmReleaseRef("flux-system", "aicr", None)
    [(_, event)] = api.events
    assert "uid" not in event["involvedObject"]


def test_a_refused_event_is_logged_and_ignored(log_events: list[dict[str, Any]]) -> None:
    api = FakeKubeApi(job_labels={JOB: FLUX_LABELS}, event_error="HTTP 403 Forbidden")
    assert report(api) is None  # no exception: the run's own failure stands
    assert api.events == []
    [logged] = log_events
    assert (logged["event"], logged["log_level"]) == ("failure not recorded as an Event on the HelmRelease", "warning")
    assert "HTTP 403 Forbidden" in logged["reason"]
