"""The image stays within its size budget (tests/support/image_metrics.py): every node that
runs the Job pulls it, at every chart upgrade. Uncompressed is the image on
disk; compressed is what a registry serves (the layers pushed to a local
docker-registry, gzip as podman pushes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.image_metrics import (
    COMPRESSED_BUDGET_BYTES,
    UNCOMPRESSED_BUDGET_BYTES,
    compressed_bytes,
    local_registry,
    push,
    uncompressed_bytes,
)
from tests.support.podman import built_image

pytestmark = pytest.mark.image


def test_the_image_is_within_its_uncompressed_budget() -> None:
    size = uncompressed_bytes(built_image())
    assert 0 < size <= UNCOMPRESSED_BUDGET_BYTES, (
        f"the image is {size / 1e6:.1f} MB uncompressed; the budget is {UNCOMPRESSED_BUDGET_BYTES / 1e6:.0f} MB"
    )


def test_the_image_is_within_its_compressed_budget(tmp_path: Path) -> None:
    image = built_image()
    with local_registry(tmp_path) as host:
        size = compressed_bytes(push(image, host, tag="size"))
    assert 0 < size <= COMPRESSED_BUDGET_BYTES, (
        f"the image is {size / 1e6:.1f} MB compressed; the budget is {COMPRESSED_BUDGET_BYTES / 1e6:.0f} MB"
    )
    # Compression cannot make the layers larger than the files they hold.
    assert size < uncompressed_bytes(image)
