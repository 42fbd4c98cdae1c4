"""Shared test setup."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from structlog.testing import capture_logs

from aicr_runner import logs
from tests.support.real_aicr import RealAicr, RealAicrMissing, extract_binary, release_dir

# No per-example deadline: CI's two cores are shared by the API server, the node and
# image builds, so an example's time says nothing about the code (a first example
# that builds a scan database once took 289 ms against the default 200 ms).
settings.register_profile("aicr-runner", deadline=None)
settings.load_profile("aicr-runner")


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """A test that runs the CLI configures logging onto its captured stream; the
    next test must not inherit a stream pytest has already closed: events and
    the standard library's records go back to whatever stderr is at write time."""
    yield
    logs.configure()


@pytest.fixture
def log_events() -> Iterator[list[MutableMapping[str, Any]]]:
    """The events logged while the test runs, as structlog hands them to the
    renderer (``capture_logs``): the event, its fields, ``log_level``, and the
    context bound in context variables (the step) merged in as the pod log
    merges it. Nothing is rendered meanwhile; relayed child output still is.

    Logging is configured first: ``capture_logs`` swaps the configured
    processor chain in place (cached loggers keep that list), and a
    configuration made after it (by the first event) would swap it back. A
    test that configures logging itself (a run through ``cli.main``) reads
    the JSON lines instead."""
    logs.configure()
    with capture_logs(processors=[logs.merge_context]) as captured:
        yield captured


@pytest.fixture(autouse=True)
def _isolated_secrets() -> Iterator[None]:
    """What a test registers for redaction is forgotten when it ends."""
    with logs.SECRETS.isolated():
        yield


@pytest.fixture(scope="session")
def real_aicr(tmp_path_factory: pytest.TempPathFactory) -> RealAicr:
    """The real aicr v0.11.1 from ``AICR_TEST_RELEASES_DIR``, extracted once per
    session after its archive matched the release's checksums. Missing: the test
    fails with the reason (never skips)."""
    workdir = tmp_path_factory.mktemp("real-aicr")
    try:
        binary = extract_binary(workdir / "bin")
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    return RealAicr(binary, workdir)


@pytest.fixture(scope="session")
def real_aicr_release() -> Path:
    """The folder of the real release (``<AICR_TEST_RELEASES_DIR>/v0.11.1``), checked;
    missing: the test fails with the reason."""
    try:
        return release_dir()
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)
