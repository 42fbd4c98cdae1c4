"""The documentation's commands for following a run name what the chart renders.

A reader copies them after `helm install aicr ... -n aicr` with the defaults. Every
`kubectl ... -n aicr` line in a bash block of the README, docs/ and chart/README.md
that selects by label selects what it means to (the Job for `get job`, the installer
pod for `logs -l`), and every `kubectl get cm -n aicr NAME -o jsonpath=...` names a
result ConfigMap the chart's defaults give the runtime and a key the runtime writes
into it (`binaryData` for what it stores compressed).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.chart.helm import ROOT, Rendered, renders

PAGES = (ROOT / "README.md", ROOT / "chart" / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: The keys the runtime writes per result ConfigMap (src/aicr_runner/steps/table.py, wiring.py), by setting.
KEYS = {
    "AICR_RUNNER_STATUS_CONFIGMAP": {"data": {"phase", "report.json", "summary.txt"}},
    "AICR_RUNNER_RECIPE__CONFIGMAP": {"data": {"summary.txt", "recipe.yaml"}, "binaryData": {"recipe.yaml.gz"}},
    "AICR_RUNNER_VALIDATE__RESULT_CONFIGMAP": {"data": {"ctrf.json"}},
    "AICR_RUNNER_VALIDATE__EVIDENCE_CONFIGMAP": {"data": {"pointer.yaml"}, "binaryData": {"evidence.tgz"}},
}
#: Labels the Job controller puts on a Job's pods (not the chart).
JOB_CONTROLLER_LABELS = {"job-name", "batch.kubernetes.io/job-name"}


def kubectl_commands(page: Path) -> list[list[str]]:
    """argv of every `kubectl ... -n aicr` command in the page's bash blocks (also inside `$(...)`)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for command in re.findall(r"kubectl [^|)#]*", line):
                argv = shlex.split(command)
                if "-n" in argv and argv[argv.index("-n") + 1] == "aicr":
                    found.append(argv)
    return found


COMMANDS = [(page, argv) for page in PAGES for argv in kubectl_commands(page)]


@pytest.fixture(scope="module")
def chart() -> Rendered:
    return renders({"accelerator": "h100"}, raw=True, release="aicr", namespace="aicr")


def selects(selector: str, labels: dict[str, str]) -> bool:
    pairs = [term.split("=", 1) for term in selector.split(",")]
    return all(key in JOB_CONTROLLER_LABELS or labels.get(key) == value for key, value in pairs)


def test_the_pages_show_commands_to_follow_a_run() -> None:
    readme = [argv for page, argv in COMMANDS if page.name == "README.md" and page.parent == ROOT]
    assert any(argv[1] == "logs" for argv in readme)
    assert any(argv[1:3] == ["get", "cm"] for argv in readme)


@pytest.mark.parametrize(
    ("page", "argv"), COMMANDS, ids=[f"{p.relative_to(ROOT)}: {' '.join(a[1:])}" for p, a in COMMANDS]
)
def test_each_command_names_what_the_chart_renders(chart: Rendered, page: Path, argv: list[str]) -> None:
    job = chart.job
    if "-l" in argv:
        selector = argv[argv.index("-l") + 1]
        pod = job["spec"]["template"]["metadata"]["labels"]
        target = job["metadata"]["labels"] if argv[1:3] == ["get", "job"] else pod
        assert selects(selector, target), f"{selector} selects nothing the chart renders: {target}"
    if argv[1:3] == ["get", "cm"]:
        name = argv[5] if argv[3] == "-n" else argv[3]
        settings = {setting: chart.env[setting] for setting in KEYS}
        [setting] = [s for s, value in settings.items() if value == name] or [""]
        assert setting, f"{name} is not a result ConfigMap of the chart's defaults: {settings}"
        output = next((a for a in argv if a.startswith("jsonpath=")), None)
        output = output or argv[argv.index("-o") + 1]
        field = re.fullmatch(r"jsonpath=\{\.(data|binaryData)\.(.+)\}", output)
        assert field, output
        key = field.group(2).replace("\\.", ".")
        assert key in KEYS[setting].get(field.group(1), set()), f"{name} has no {field.group(1)} key {key}"
    if argv[1:3] == ["get", "lease"]:
        assert argv[5] == chart.env["AICR_RUNNER_LEASE__NAME"]
