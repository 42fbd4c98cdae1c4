"""``aicr-runner mirror --list`` end to end with the real aicr v0.11.1 (recipe
eks/h100/training/ubuntu), the pinned helm and the real component charts.

skyhook-operator's pinned v0.14.0 is not in the shared test data: its stand-in
(v0.13.1, ``not-pinned/``) is given under the pinned file name, as is nvsentinel's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from aicr_runner.cli import main
from tests.support.real_aicr import FolderMirror, RealAicr, RealAicrMissing, recipe_charts_dir, release_dir

pytestmark = pytest.mark.helm

CRITERIA = ["--service", "eks", "--accelerator", "h100", "--intent", "training", "--os", "ubuntu"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        # Stand-ins, labelled: the pinned versions were not buildable from public source here.
        return recipe_charts_dir(tmp_path_factory.mktemp("charts"))
    except RealAicrMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AICR_RUNNER_", "FAKE_AICR_", "KUBERNETES_"))}
    tools = str(ROOT / ".tools" / "bin")
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "PATH": f"{tools}:{env.get('PATH', '/usr/bin:/bin')}",
            "AICR_RUNNER_LOG_FORMAT": "json",
            "AICR_RUNNER_AICR__PROVENANCE__MODE": "off",  # no NVIDIA attestation in this release
            "AICR_RUNNER_AICR__ARCH": "amd64",
        }
    )
    return env


def _mirror(
    tmp_path: Path,
    binary: Path,
    charts: Path | None,
    *extra: str,
    capsys: pytest.CaptureFixture[str],
    action: tuple[str, ...] = ("--list",),
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    argv = ["mirror", *action, "--aicr-binary", str(binary), "--work-dir", str(tmp_path / "m"), *CRITERIA, *extra]
    if charts is not None:
        argv += ["--charts-dir", str(charts)]
    capsys.readouterr()
    code = main(argv, environ={**_env(tmp_path), **(env or {})})
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_json_list_names_every_piece_of_the_install(
    real_aicr: RealAicr, charts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"validate": {"enabled": True, "phases": ["deployment", "conformance"]}, "snapshot": {"enabled": True}}
        )
    )
    code, out, err = _mirror(tmp_path, real_aicr.binary, charts, "-o", "json", "--values", str(values), capsys=capsys)
    assert code == 0, err[-3000:]
    items = json.loads(out)["items"]  # stdout is the list alone: the plan's summary went to stderr
    by_kind: dict[str, list[str]] = {}
    for item in items:
        by_kind.setdefault(item["kind"], []).append(item["reference"])
    assert len(by_kind["chart"]) == 12  # 11 components' charts and this project's
    # The release of the aicr that resolved the recipe (here the real v0.11.1, not the pin).
    assert by_kind["file"] == [
        "https://github.com/NVIDIA/aicr/releases/download/v0.11.1/aicr_0.11.1_linux_amd64.tar.gz",
        "https://github.com/NVIDIA/aicr/releases/download/v0.11.1/aicr_checksums.txt",
    ]
    images = set(by_kind["image"])
    assert {
        "ghcr.io/nvidia-aicr/aicr-runner:0.1.0",
        "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04",
        "ghcr.io/nvidia/kai-scheduler/scheduler:v0.13.0",
        "quay.io/prometheus/prometheus:v3.10.0",
        # aicr's own, for the phases enabled and the checks the recipe declares for them
        "ghcr.io/nvidia/aicr-validators/deployment:v0.11.1",
        "ghcr.io/nvidia/aicr-validators/conformance:v0.11.1",
        "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu22.04",
        "docker.io/library/busybox:1.37",
        "ghcr.io/nvidia/aicr:v0.11.1",
    } <= images
    assert "ghcr.io/nvidia/aicr-validators/performance:v0.11.1" not in images  # phase not enabled
    # the runner, 54 the charts and operators start, 2 validators, 4 images their checks start, the agent
    assert len(images) == 62
    driver = next(i for i in items if i["reference"] == "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04")
    assert driver["neededBy"] == ["gpu-operator (ClusterPolicy spec.driver)"]
    assert (driver["digest"], driver["size"]) == (None, None)


@pytest.mark.parametrize("fmt", ["hauler", "zarf"])
def test_hauler_and_zarf_manifests_from_the_same_run(
    fmt: str, real_aicr: RealAicr, charts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _mirror(tmp_path, real_aicr.binary, charts, "-o", fmt, capsys=capsys)
    assert code == 0, err[-3000:]
    docs = list(yaml.safe_load_all(out))
    if fmt == "hauler":
        assert [d["kind"] for d in docs] == ["Files", "Images", "Charts"]
        charts_doc = {c["name"]: c for c in docs[2]["spec"]["charts"]}
        assert charts_doc["kai-scheduler"]["repoURL"] == "oci://ghcr.io/nvidia/kai-scheduler"
        assert len(docs[1]["spec"]["images"]) == 55  # the runner and 54 the charts and operators start
    else:
        (component,) = docs[0]["components"]
        zarf_charts = {c["name"]: c for c in component["charts"]}
        assert zarf_charts["gpu-operator"]["repoName"] == "gpu-operator"
        assert zarf_charts["nvsentinel"]["url"] == "oci://ghcr.io/nvidia/nvsentinel"
        assert all(c["namespace"] for c in component["charts"])


def test_a_chart_its_source_cannot_give_is_named_with_its_exit_code(
    real_aicr: RealAicr, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "no-charts"
    empty.mkdir()
    code, out, err = _mirror(tmp_path, real_aicr.binary, empty, capsys=capsys)
    assert code == 40, err[-2000:]
    assert out == ""
    (line,) = [line for line in err.splitlines() if line.startswith("aicr-runner mirror:")]
    assert line.startswith(
        "aicr-runner mirror: source unreachable: chart aws-ebs-csi-driver 2.55.0 of component aws-ebs-csi-driver "
        "from https://kubernetes-sigs.github.io/aws-ebs-csi-driver: "
    )
    assert "Traceback" not in err


def test_to_a_registry_names_the_first_item_its_source_cannot_give(
    real_aicr: RealAicr, charts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command with --to: the plan, the list, then the copy; this machine reaches no
    public registry, so the first item of the list (the runner's image) fails, named, exit 40.
    The aicr release, pushed into an artifact before the copy, comes from a folder on loopback."""
    to = ("--to", "oci://127.0.0.1:9/air", "--plain-http", "127.0.0.1:9")
    with FolderMirror(release_dir().parent) as releases:
        env = {"AICR_RUNNER_AICR__RELEASE_BASE_URL": releases.base_url}
        code, out, err = _mirror(tmp_path, real_aicr.binary, charts, capsys=capsys, action=to, env=env)
    assert sorted(releases.requests) == ["/v0.11.1/aicr_0.11.1_linux_amd64.tar.gz", "/v0.11.1/aicr_checksums.txt"]
    assert code == 40, err[-2000:]
    (line,) = [line for line in err.splitlines() if line.startswith("aicr-runner mirror:")]
    assert line.startswith("aicr-runner mirror: source unreachable: ghcr.io/nvidia-aicr/aicr-runner:0.1.0: ")
    assert "items in" not in out  # no tally: the copy did not end
