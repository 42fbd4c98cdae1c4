"""Where the fetch step takes the aicr release from: the registry artifact when
``aicr.release_ref`` is set (the HTTP folder never asked), the HTTP folder otherwise;
a failure from the registry is the download's failure (exit 20)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aicr_runner.errors import DownloadError, ExitCode
from aicr_runner.run.machine import State
from aicr_runner.run.report import StepStatus
from tests.unit.steps.test_steps import StubProcesses, context, rewired, step

REF = "mirror.example.test:5000/site/nvidia/aicr/release:v1.2.0"


def test_a_release_ref_takes_aicr_from_the_registry_with_the_packs_transport(tmp_path: Path) -> None:
    asked: list[tuple[str, str, bool]] = []

    def over_http(settings: Any, dest: Path, *, cancelled: object = None) -> Any:
        asked.append(("http", settings.release_base_url, False))
        raise DownloadError("not this way")

    def from_registry(settings: Any, transport: Any, dest: Path, *, cancelled: object = None) -> Any:
        asked.append(("registry", settings.release_ref, transport.plain_http))
        raise DownloadError(f"aicr release {settings.release_ref}: registry unreachable")

    env = {"AICR_RUNNER_AICR__RELEASE_REF": REF, "AICR_RUNNER_PACK__PLAIN_HTTP": "true"}
    ctx = rewired(context(tmp_path, StubProcesses(), **env), fetch=over_http, fetch_from_registry=from_registry)
    status, code, reason = step(ctx, State.FETCH)
    assert asked == [("registry", REF, True)]
    assert (status, code) == (StepStatus.FAILED, ExitCode.DOWNLOAD_FAILED)
    assert reason.startswith(f"aicr release {REF}: registry unreachable")

    asked.clear()
    http = rewired(context(tmp_path, StubProcesses()), fetch=over_http, fetch_from_registry=from_registry)
    step(http, State.FETCH)
    assert [kind for kind, _, _ in asked] == ["http"]
