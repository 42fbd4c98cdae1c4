"""Where the shared test data is: a folder named by its own variable, else the one
beside ``AICR_TEST_RELEASES_DIR`` (the shared test data's layout, which
scripts/test.sh sets up)."""

from __future__ import annotations

import os
from pathlib import Path


def shared_folder(env: str, name: str, needed: str, missing: type[Exception]) -> Path:
    """``$env``; unset, ``<AICR_TEST_RELEASES_DIR>/../<name>``; neither set: ``missing``
    saying what the tests need (``needed``) and how scripts/test.sh sets it."""
    value = os.environ.get(env, "")
    if value:
        return Path(value)
    releases = os.environ.get("AICR_TEST_RELEASES_DIR", "")
    if not releases:
        raise missing(
            f"neither {env} nor AICR_TEST_RELEASES_DIR is set: the tests need {needed}; scripts/test.sh sets "
            f"{env} to <repo>/../shared/testdata/{name}"
        )
    return Path(releases).parent / name
