"""A whole failed ``aicr-runner run`` in a Job rendered by Flux: the run status is
captured first, the termination message written, then the same text goes to the
HelmRelease as a Warning Event; the exit code is the run's own either way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aicr_runner import wiring
from aicr_runner.cli import main
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import clean_env
from tests.support.fakes import FakeKubeApi

JOB = "nvidia-aicr-0123456789"
FLUX = {"helm.toolkit.fluxcd.io/name": "aicr", "helm.toolkit.fluxcd.io/namespace": "flux-system"}


class RecordingApi(FakeKubeApi):
    """Remembers the run status the ConfigMaps held when the Event was created."""

    status_at_event: dict[str, Any] | None = None

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        stored = self.objects.get(("aicr", "aicr-run-status"), {})
        self.status_at_event = json.loads(stored["data"]["report.json"]) if stored else None  # type: ignore[index]
        super().create_event(namespace, body)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


def run_in_job(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: FakeKubeApi, **extra: str
) -> tuple[int, str]:
    monkeypatch.setattr(wiring, "_make_api", lambda *_: api)
    env = clean_env(
        tmp_path,
        AICR_RUNNER_NAMESPACE="aicr",
        AICR_RUNNER_LEASE__JOB_NAME=JOB,
        AICR_RUNNER_LEASE__POD_NAME=f"{JOB}-abcde",
        **extra,
    )
    code = main(["run", "--aicr-binary", str(fake)], environ=env)
    return code, (tmp_path / "termination-log").read_text()


def test_a_failed_run_tells_the_helmrelease_after_capturing_and_keeps_its_exit_code(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = RecordingApi(job_labels={("aicr", JOB): FLUX}, helmrelease_uids={("flux-system", "aicr"): "uid-1"})
    code, termination = run_in_job(
        fake, tmp_path, monkeypatch, api, AICR_RUNNER_DEPLOY__FLAGS="--retries 0", FAKE_AICR_DEPLOY_FAIL="gpu-operator"
    )
    assert code == 1
    assert termination.startswith("Failed (exit 1): deploy failed")
    [(namespace, event)] = api.events
    assert namespace == "flux-system"
    assert event["message"] == termination
    assert event["involvedObject"]["uid"] == "uid-1"
    assert api.status_at_event is not None
    assert (api.status_at_event["phase"], api.status_at_event["exitCode"]) == ("Failed", 1)
    # Every run of the release writes this ConfigMap: the report names the one that wrote it.
    assert api.status_at_event["runBy"] == f"{JOB}/{JOB}-abcde"
    summary = api.objects[("aicr", "aicr-run-status")]["data"]["summary.txt"]  # type: ignore[index]
    assert f"\nrun by: {JOB}/{JOB}-abcde\n" in summary


def test_a_refused_event_changes_nothing(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeKubeApi(job_labels={("aicr", JOB): FLUX}, event_error="HTTP 403 Forbidden")
    code, termination = run_in_job(
        fake, tmp_path, monkeypatch, api, AICR_RUNNER_DEPLOY__FLAGS="--retries 0", FAKE_AICR_DEPLOY_FAIL="gpu-operator"
    )
    assert code == 1
    assert termination.startswith("Failed (exit 1): deploy failed")
    assert api.events == []
    assert ("aicr", "aicr-run-status") in api.objects


def test_a_successful_run_records_no_event(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeKubeApi(job_labels={("aicr", JOB): FLUX})
    code, termination = run_in_job(fake, tmp_path, monkeypatch, api)
    assert code == 0, termination
    assert api.events == []


def test_a_run_whose_validation_ran_no_check_tells_the_helmrelease_although_it_exits_0(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flux shows a completed Job Ready: the HelmRelease gets a Warning saying no check ran."""
    api = RecordingApi(job_labels={("aicr", JOB): FLUX}, helmrelease_uids={("flux-system", "aicr"): "uid-1"})
    code, termination = run_in_job(
        fake, tmp_path, monkeypatch, api, AICR_RUNNER_VALIDATE__ENABLED="true", FAKE_AICR_VALIDATE_RESULT="skip"
    )
    assert code == 0, termination
    assert termination.startswith("SucceededInconclusive (exit 0): AICR Job complete, but validation inconclusive")
    [(_, event)] = api.events
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "AicrRunSucceededInconclusive",
        termination,
    )
    assert api.status_at_event is not None
    assert api.status_at_event["phase"] == "SucceededInconclusive"
