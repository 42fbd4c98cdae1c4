"""The component charts rendered with the bundle's values: ``helm pull`` then
``helm template``, behind a small interface (tests and ``--charts-dir`` give local
archives; nothing else changes).

``helm template`` renders hooks too (Helm skips them only with ``--no-hooks``),
with default capabilities unless told: the recipe's Kubernetes version is given
(``--kube-version``) so charts that branch on it render what the cluster gets.
``lookup`` returns nothing offline; charts whose workloads hang on it are named
in the docs.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aicr_runner.errors import RunnerError
from aicr_runner.mirror.errors import ChartUnavailableError
from aicr_runner.mirror.tool_call import exit_status, last_line, run_tool

__all__ = ["ChartRef", "ChartRenderer", "HelmRenderer"]


def _never() -> bool:
    return False


#: Each helm call ends: a stalled repository is a failure, never a hang.
_HELM_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class ChartRef:
    #: The component (release) name, its namespace, and the chart aicr's deploy.sh installs.
    component: str
    namespace: str
    chart: str
    version: str
    #: ``https://...`` (a chart repository) or ``oci://host/path`` (the chart is ``<source>/<chart>``).
    source: str

    @property
    def oci(self) -> bool:
        return self.source.startswith("oci://")

    @property
    def pull_argv(self) -> list[str]:
        """``helm pull``'s arguments for this chart, as deploy.sh names it."""
        if self.oci:
            return [f"{self.source.rstrip('/')}/{self.chart}", "--version", self.version]
        return [self.chart, "--repo", self.source, "--version", self.version]


class ChartRenderer(Protocol):
    def render(self, chart: ChartRef, values: Sequence[Path], kube_version: str | None) -> str:
        """The chart's manifests (hooks included) as ``helm template`` prints them."""

    def archive_facts(self, chart: ChartRef) -> tuple[str, int] | None:
        """The sha256 digest and size of the chart archive pulled from its source to render it;
        None when it was not pulled (a charts directory's copy may not be byte-identical)."""


#: How much of helm's last line a failure quotes.
_SAID = 500


class HelmRenderer:
    """The real helm: charts pulled from their source (or found in ``charts_dir``
    as ``<chart>-<version>.tgz``, as ``helm package`` names them)."""

    def __init__(
        self, helm: str = "helm", charts_dir: Path | None = None, *, interrupted: Callable[[], bool] = _never
    ) -> None:
        self.helm = helm
        self.charts_dir = charts_dir
        #: True once SIGTERM/SIGINT arrived: the helm call in flight is stopped, no other starts.
        self.interrupted = interrupted
        self._facts: dict[ChartRef, tuple[str, int]] = {}

    def archive_facts(self, chart: ChartRef) -> tuple[str, int] | None:
        return self._facts.get(chart)

    def render(self, chart: ChartRef, values: Sequence[Path], kube_version: str | None) -> str:
        with tempfile.TemporaryDirectory(prefix="aicr-mirror-") as tmp:
            archive = self._archive(chart, Path(tmp))
            if archive.parent == Path(tmp):  # pulled from its source: what a copy will find there
                self._facts[chart] = (_sha256(archive), archive.stat().st_size)
            argv = [self.helm, "template", chart.component, str(archive), "--namespace", chart.namespace]
            for path in values:
                argv += ["-f", str(path)]
            if kube_version:
                argv += ["--kube-version", kube_version]
            result = self._run(argv, cwd=Path(tmp))
            if result.returncode != 0:
                raise RunnerError(
                    f"helm template of {chart.chart} {chart.version} (component {chart.component}) failed "
                    f"({exit_status(result.returncode)}): {last_line(result.stderr, _SAID)}"
                )
            return result.stdout

    def _archive(self, chart: ChartRef, tmp: Path) -> Path:
        if self.charts_dir is not None:
            local = self.charts_dir / f"{chart.chart}-{chart.version}.tgz"
            if local.is_file():
                return local
        result = self._run([self.helm, "pull", *chart.pull_argv, "--destination", str(tmp)], cwd=tmp)
        pulled = sorted(tmp.glob("*.tgz"))
        if result.returncode != 0 or not pulled:
            raise ChartUnavailableError(
                chart.component, chart.chart, chart.version, chart.source, last_line(result.stderr, _SAID)
            )
        return pulled[0]

    def _run(self, argv: list[str], *, cwd: Path) -> subprocess.CompletedProcess[str]:
        """One helm call, from an empty directory (a local folder named like the chart
        would shadow --repo): it ends by its deadline, and at once on SIGTERM."""
        try:
            return run_tool(
                argv,
                cwd=cwd,
                timeout=_HELM_TIMEOUT_SECONDS,
                interrupted=self.interrupted,
                timed_out=lambda: RunnerError(
                    f"helm did not answer within {_HELM_TIMEOUT_SECONDS:g}s: {' '.join(argv[:3])}"
                ),
            )
        except FileNotFoundError as exc:
            from aicr_runner.errors import ToolError

            raise ToolError(f"helm not found ({self.helm}): mirror renders the charts with helm template") from exc


def _sha256(path: Path) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
