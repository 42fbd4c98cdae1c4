"""What the steps of one run share: its dependencies, frozen, and what each step found.

``RunContext`` is built once, by ``wiring``, from three frozen, typed parts: what
was asked (``RunConfig``: the settings and the command line), what the steps call
(``RunExternals``: the sink, the child runner, the seams to fetch aicr and pull a
pack, the Lease, the cluster's reader and report target) and whom they tell
(``RunHandlers``: the status writer, the Job's Events, the run's stop; each a no-op
until wired, its default written here once). None of it changes during the run. What the
steps find as the run goes (the aicr binary, the pack, the resolved recipe, the
detected aicr version) is ``ctx.findings``, the run's one mutable record besides
its report. ``run_child`` runs each step's children: output to the state's log
file and the pod log, a child a shutdown stopped turned into ``InterruptedRun``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aicr_runner.aicr import capabilities, recipe, upgrade_check
from aicr_runner.aicr.relays import aicr_relay
from aicr_runner.children.process import ProcessResult, ProcessRunner, child_env
from aicr_runner.errors import InterruptedRun, RunnerError
from aicr_runner.kube.sink import Sink
from aicr_runner.run.invocation import Mode
from aicr_runner.run.machine import State
from aicr_runner.run.report import RunReport, utcnow
from aicr_runner.settings.config import RunnerSettings

if TYPE_CHECKING:
    from aicr_runner.aicr.binary import AicrBinary
    from aicr_runner.aicr.provenance import SignatureVerifier
    from aicr_runner.helm.guard import HelmGuard
    from aicr_runner.kube.lease import InstallLease
    from aicr_runner.kube.report_writer import ReportTarget
    from aicr_runner.net.deadline import Cancellation
    from aicr_runner.pack.pull import PulledPack
    from aicr_runner.settings.config import AicrSettings, PackSettings

__all__ = [
    "AicrFetcher",
    "AicrRegistryFetcher",
    "Mode",
    "PackPuller",
    "RunConfig",
    "RunContext",
    "RunExternals",
    "RunFindings",
    "RunHandlers",
    "fetch_aicr",
    "fetch_aicr_from_registry",
    "pull_pack",
]


class PackPuller(Protocol):
    """Pulls ``settings.ref`` into ``dest`` (``pack.pull.pull_pack``'s shape)."""

    def __call__(self, settings: PackSettings, dest: Path, *, cancelled: Cancellation | None = None) -> PulledPack: ...


class AicrFetcher(Protocol):
    """Downloads and verifies the aicr release into ``dest_dir`` (``aicr.release.fetch_aicr``'s shape)."""

    def __call__(
        self, settings: AicrSettings, dest_dir: Path, *, cancelled: Cancellation | None = None
    ) -> AicrBinary: ...


class AicrRegistryFetcher(Protocol):
    """Pulls and verifies the release artifact ``settings.release_ref`` into ``dest_dir``
    over the pack's registry settings (``aicr.release_oci.fetch_aicr_from_registry``'s shape)."""

    def __call__(
        self, settings: AicrSettings, transport: PackSettings, dest_dir: Path, *, cancelled: Cancellation | None = None
    ) -> AicrBinary: ...


def pull_pack(settings: PackSettings, dest: Path, *, cancelled: Cancellation | None = None) -> PulledPack:
    """``pack.pull.pull_pack``, imported when a pack is pulled: oras and requests
    are heavy, and a run with a local pack or none never needs them."""
    from aicr_runner.pack.pull import pull_pack as pull

    return pull(settings, dest, cancelled=cancelled)


def fetch_aicr(settings: AicrSettings, dest_dir: Path, *, cancelled: Cancellation | None = None) -> AicrBinary:
    """``aicr.release.fetch_aicr``, imported when aicr is downloaded (httpx is heavy)."""
    from aicr_runner.aicr.release import fetch_aicr as fetch

    return fetch(settings, dest_dir, cancelled=cancelled)


def fetch_aicr_from_registry(
    settings: AicrSettings, transport: PackSettings, dest_dir: Path, *, cancelled: Cancellation | None = None
) -> AicrBinary:
    """``aicr.release_oci.fetch_aicr_from_registry``, imported when aicr comes from a registry."""
    from aicr_runner.aicr.release_oci import fetch_aicr_from_registry as fetch

    return fetch(settings, transport, dest_dir, cancelled=cancelled)


@dataclass
class RunFindings:
    """What the steps found, filled in as the run goes."""

    aicr: Path | None = None
    pack: Path | None = None
    recipe_summary: recipe.RecipeSummary | None = None
    completion_line: str = ""
    #: What the binary said it is (``aicr --version``), once fetched.
    aicr_version: capabilities.AicrVersion | None = None
    #: ``sha256:<hex>`` of the recipe a validation-only run validates against.
    recipe_digest: str = ""
    #: The run's snapshot for ``validate --snapshot`` (``cm://ns/name`` or a file); "": none.
    snapshot: str = ""
    #: That snapshot's document, put into the evidence directory after validate.
    snapshot_document: str = ""
    #: Checks that passed in the previous verdict of the same recipe and fail now.
    regressed: tuple[str, ...] = ()
    #: A validation-only run whose install Lease an install took over while it validated.
    preempted: bool = False
    #: The recipe the release installed last, read before the recipe capture replaced it
    #: (None: nothing recorded, a first install); what the upgrade check crosses from.
    installed_recipe: bytes | None = None
    #: Why the installed recipe could not be read: damaged (a RecipeFormatError) or the API did not give it.
    installed_unread: RunnerError | None = None
    #: What the recipe capture wrote (data, binaryData): rewritten once the deploy ran.
    recipe_capture: tuple[dict[str, str], dict[str, bytes]] | None = None
    #: The upgrade check's outcome, once a crossing was detected.
    upgrade: upgrade_check.Assessment | None = None
    #: The evidence capture wrote the evidence ConfigMap (the verdict report points to it).
    evidence_stored: bool = False


#: Told the deploy step's progress (``ComponentTable.snapshot``: JSON values) after each write.
DeployProgress = Callable[[Mapping[str, object]], None]
#: Told a regression or recovery against the previous verdict (regressed, recovered, since).
VerdictChanged = Callable[[Sequence[str], Sequence[str], str], None]
#: Told what changed in the cluster since the previous snapshot (changes, since).
ClusterChanged = Callable[[Sequence[str], str], None]
#: Told an upgrade check that stops or cannot assess an install (Event reason, note).
UpgradeChecked = Callable[[str, str], None]
#: Reads a ConfigMap's data in any namespace (namespace, name); None when there is none.
ConfigMapReader = Callable[[str, str], Mapping[str, str] | None]


def _never() -> bool:
    return False


def _nothing() -> None:
    """A handler no one listens to: outside a Job nothing records what it is told."""


def _told_nothing(*_told: object) -> None:
    """A handler no one listens to: outside a Job nothing records what it is told."""


@dataclass(frozen=True)
class RunConfig:
    """What the run was asked to do: the settings and the command line, resolved."""

    settings: RunnerSettings
    mode: Mode
    #: The runner's environment (children get a curated copy).
    environ: Mapping[str, str]
    #: ``--aicr-binary``: a local aicr instead of the download.
    aicr_binary: Path | None = None
    #: ``--pack-dir``: a local data pack instead of the pull.
    pack_dir: Path | None = None
    #: ``validate --recipe``: the recipe recorded at install (validation-only runs).
    recipe_file: Path | None = None
    #: ``plan --upgrade-from``: the recipe to cross from (a file, or ``cm://ns/name`` for aicr to read).
    upgrade_from: str = ""
    #: What a preinstalled aicr printed for --version before the start line (not asked twice).
    version_output: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RunExternals:
    """What the steps call outside the runner: each behind a small interface with a fake."""

    #: Where results land (ConfigMaps, or a results directory).
    sink: Sink
    #: Runs children (aicr, deploy.sh, cosign).
    processes: ProcessRunner
    #: True once SIGTERM/SIGINT arrived: network steps stop at once.
    interrupted: Callable[[], bool] = _never
    pull: PackPuller = pull_pack
    fetch: AicrFetcher = fetch_aicr
    #: The release from a registry (``aicr.release_ref``) instead of an HTTP folder.
    fetch_from_registry: AicrRegistryFetcher = fetch_aicr_from_registry
    #: Verifies aicr's Sigstore provenance; None: cosign through ``processes``.
    verifier: SignatureVerifier | None = None
    #: The install Lease (None: runs are not serialised, e.g. outside a cluster).
    lease: InstallLease | None = None
    #: Where the verdict report goes (``steps.verdict_report``); None: no report (plan, a results directory).
    report_target: ReportTarget | None = None
    #: The snapshot agent's ConfigMap reader; None outside a cluster.
    read_configmap: ConfigMapReader | None = None
    #: The time the steps record (the verdict history, the verdict report, the snapshot).
    clock: Callable[[], datetime] = utcnow


@dataclass(frozen=True)
class RunHandlers:
    """What the steps tell as the run goes (the status ConfigMap, the Job's Events,
    the run's stop); each does nothing unless the run is wired to listen."""

    #: Writes the run report now (the status ConfigMap), e.g. while waiting.
    progress: Callable[[], None] = _nothing
    on_deploy_progress: DeployProgress = _told_nothing
    #: Called by the renewal thread when the Lease is lost (the run must stop).
    on_lease_lost: Callable[[str], None] = _told_nothing
    on_verdict_change: VerdictChanged = _told_nothing
    on_cluster_change: ClusterChanged = _told_nothing
    on_upgrade_check: UpgradeChecked = _told_nothing


@dataclass(frozen=True)
class RunContext:
    """One run: what was asked (``config``), what it calls (``externals``), whom it
    tells (``handlers``), its report and what its steps found. ``settings``, ``mode``
    and ``sink`` are shortcuts: nearly every step reads them."""

    config: RunConfig
    externals: RunExternals
    #: The run report (the machine and the steps write into it).
    report: RunReport
    handlers: RunHandlers = field(default_factory=RunHandlers)
    findings: RunFindings = field(default_factory=RunFindings)

    @property
    def settings(self) -> RunnerSettings:
        return self.config.settings

    @property
    def mode(self) -> Mode:
        return self.config.mode

    @property
    def sink(self) -> Sink:
        return self.externals.sink

    @property
    def behaviour(self) -> capabilities.Behaviour:
        """How the running aicr talks; the pinned version's until the fetch told."""
        found = self.findings.aicr_version
        if found is not None:
            return capabilities.behaviour_of(found.numbers)
        pinned = capabilities.AicrVersion.parse(f"aicr version {self.settings.aicr.version}")
        return capabilities.behaviour_of(pinned.numbers if pinned else (0, 0, 0))

    @property
    def work(self) -> Path:
        return self.settings.work_path

    @property
    def recipe_path(self) -> Path:
        return self.work / "recipe.yaml"

    @property
    def bundle_dir(self) -> Path:
        return self.work / "bundle"

    @property
    def ctrf_path(self) -> Path:
        return self.work / "ctrf.json"

    @property
    def upgrade_report_path(self) -> Path:
        """The upgrade check's report (the evidence ConfigMap takes it from here)."""
        return self.work / "upgrade-check.json"

    @property
    def evidence_dir(self) -> Path:
        return self.work / "evidence"

    def log_path(self, state: State) -> Path:
        path = self.work / "logs" / f"{state.value}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def run_child(
        self,
        state: State,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        tail: deque[str] | None = None,
        on_line: Callable[[str], None] | None = None,
        on_block: Callable[[str], None] | None = None,
        cwd: Path | None = None,
        safe_stop: HelmGuard | None = None,
    ) -> ProcessResult:
        """Run a step's child: its output in the state's log file and relayed to the
        pod log; a child the shutdown stopped raises ``InterruptedRun``."""
        relay = on_block or aicr_relay(state.value, tail, on_line)
        child = env if env is not None else child_env(self.config.environ)
        log_path = self.log_path(state)
        run = self.externals.processes.run
        result = (
            run(argv, env=child, cwd=cwd or self.work, log_path=log_path, on_block=relay, safe_stop=safe_stop)
            if safe_stop is not None
            else run(argv, env=child, cwd=cwd or self.work, log_path=log_path, on_block=relay)
        )
        if result.safe_point:
            raise InterruptedRun(
                f"interrupted: a shutdown was requested; {state} was stopped between two helm operations "
                f"(none was cut, exit {result.exit_code}); the next run of this release takes over"
            )
        if result.stopped_by_shutdown:
            # The runner stopped the child after the grace period; a child that
            # finished within it keeps its outcome and the machine stops the run.
            hint = "; check `helm list -A --pending`, then re-run" if state is State.DEPLOY else ""
            raise InterruptedRun(
                f"interrupted: {state} did not finish within the {self.settings.shutdown_grace_seconds:.0f}s grace "
                f"period and was stopped (exit {result.exit_code}){hint}"
            )
        return result
