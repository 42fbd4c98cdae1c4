"""The image this project's scenarios run on the harness's node: the aicr-runner
image scripts/build-image.sh builds, plus the test material pods need (a layer on
top; the image's own files are untouched): the contract-faithful fake aicr and
the pinned Go oras. The harness (e2e/harness) knows nothing of either; it loads
whatever image it is given.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from e2e.harness.node import derive_image
from e2e.tools import REPO_ROOT

__all__ = [
    "CHART_DEFAULT_IMAGE",
    "E2E_ORAS",
    "FAKE_AICR_PACKAGE",
    "FAKE_AICR_PATH",
    "pod_fake_aicr_launcher",
    "test_image",
]

#: Where the e2e image has the contract-faithful fake aicr (chart value aicrBinary.path)...
FAKE_AICR_PATH = "/usr/local/bin/aicr"
#: ...its package (the launcher runs it with the image's Python)...
FAKE_AICR_PACKAGE = "/opt/fake-aicr/fake_aicr"
#: ...and the pinned Go oras (the fake's evidence publish pushes with it: FAKE_AICR_ORAS):
#: the image's own (a name of its tools binary, as the mirror runs it).
E2E_ORAS = "/usr/local/bin/oras"


def _chart_default_image() -> str:
    chart = yaml.safe_load((REPO_ROOT / "chart" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO_ROOT / "chart" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"


#: The image a release's pods ask for when the chart's image values are left alone.
CHART_DEFAULT_IMAGE = _chart_default_image()


def pod_fake_aicr_launcher(directory: Path) -> Path:
    """The fake aicr's launcher as the pods run it (the image's Python)."""
    from tests.fake_aicr import install_fake_aicr
    from tests.support.podman import IMAGE_PYTHON

    return install_fake_aicr(directory, python=IMAGE_PYTHON, package_dir=FAKE_AICR_PACKAGE)


@functools.cache
def test_image() -> str:
    """The built aicr-runner image plus the test material pods need (a layer on
    top; the image's own files are untouched)."""
    import tempfile

    from tests.fake_aicr import PACKAGE_DIR
    from tests.support.podman import built_image

    launcher = pod_fake_aicr_launcher(Path(tempfile.mkdtemp(prefix="e2e-fake-aicr-")))
    return derive_image(
        built_image(),
        {FAKE_AICR_PATH: launcher, FAKE_AICR_PACKAGE: PACKAGE_DIR},
    )
