"""Shared test setup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

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
