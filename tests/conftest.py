"""Shared test setup."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """A test that runs the CLI configures logging onto its captured stream; the
    next test must not inherit a stream pytest has already closed."""
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()
