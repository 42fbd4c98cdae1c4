"""The composition root: a run built from its settings and its invocation, and run.

``cli`` checked every input and hands over the settings, the resolved
``Invocation`` and the environment; this module builds what the run uses (the
cluster's API and the run's namespace in a Job run, the results sink, the install
Lease, the Job's Events, the verdict report's target, the status publisher, the
child runner), hands it to the steps as one frozen ``RunContext``, drives the
machine and has the outcome announced (``outcome``). What only a Job run needs (the Kubernetes client, the
Lease, the Events) is imported only in a Job run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aicr_runner import __version__, logs
from aicr_runner.aicr import start_version
from aicr_runner.children.process import ShutdownController, SubprocessRunner
from aicr_runner.errors import ConfigError, ExitCode, RunnerError
from aicr_runner.kube.sink import ConfigMapSink, DirectorySink, Sink
from aicr_runner.outcome import conclude
from aicr_runner.run.invocation import Invocation, Mode
from aicr_runner.run.machine import ROUTES, Machine
from aicr_runner.run.report import RunPhase, RunReport, StepStatus, status_data
from aicr_runner.settings.names import ENV_PREFIX
from aicr_runner.steps.context import RunConfig, RunContext, RunExternals, RunHandlers
from aicr_runner.steps.table import Steps

if TYPE_CHECKING:
    from aicr_runner.kube.api import KubeApi
    from aicr_runner.kube.events import JobEvents
    from aicr_runner.kube.lease import InstallLease
    from aicr_runner.kube.report_writer import ReportTarget
    from aicr_runner.settings.config import RunnerSettings

__all__ = ["run"]

log = logs.get_logger()

#: No Job ran in a plan: say what did.
_PLAN_COMPLETE = "AICR plan complete: recipe resolved, bundle rendered and verified; nothing was deployed"

_SUCCESS = {Mode.PLAN: _PLAN_COMPLETE, Mode.VALIDATE: "AICR validation complete (validation only: nothing deployed)"}


#: The cluster of a Job run: its API and the run's namespace (resolved once).
Cluster = tuple["KubeApi", str]


def run(
    settings: RunnerSettings,
    invocation: Invocation,
    env: Mapping[str, str],
    version: start_version.StartVersion | None = None,
) -> int:
    """The run itself, once every input is known good: its exit code, never a traceback.
    ``version``: aicr's version asked already (``start_version.ask``), else asked at the start line."""
    logs.configure(settings.log_format)
    try:
        return _execute(settings, invocation, env, version)
    except RunnerError as exc:
        log.error("run stopped", reason=exc.message, exit_code=int(exc.exit_code))  # noqa: TRY400 - one line, no traceback
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a run ends with one line and an exit code, never a traceback
        return _internal_error(exc, settings)
    finally:
        logs.flush_relay()


def _internal_error(exc: Exception, settings: RunnerSettings) -> int:
    """An unexpected error outside the steps: one line, the traceback in the work directory."""
    where = logs.write_traceback(settings.work_path)
    log.error(
        "internal error",
        error=f"{type(exc).__name__}: {logs.redact(str(exc))[:500]}",
        details=where,
        exit_code=int(ExitCode.INTERNAL),
    )
    return int(ExitCode.INTERNAL)


def _execute(
    settings: RunnerSettings, invocation: Invocation, env: Mapping[str, str], version: start_version.StartVersion | None
) -> int:
    _prepare_work(settings)
    shutdown = ShutdownController()
    cluster = _connect(settings, invocation, shutdown)
    sink = _make_sink(invocation, cluster)
    lease = _make_lease(settings, cluster, shutdown)
    with shutdown.installed():
        version = version or start_version.ask(settings, env)
        report, version_output = _start(settings, invocation, version.answer(shutdown.requested))
        events = _make_events(settings, cluster)
        publish_status, status = _status_publisher(settings, sink, live=invocation.mode is not Mode.PLAN)
        ctx = RunContext(
            config=_config(settings, invocation, env, version_output),
            externals=RunExternals(
                sink=sink,
                processes=SubprocessRunner(
                    grace_seconds=settings.shutdown_grace_seconds, shutdown=shutdown, redact=logs.redact
                ),
                interrupted=shutdown.requested,
                lease=lease,
                report_target=_report_target(cluster),
                read_configmap=None if cluster is None else cluster[0].get_configmap_data,
            ),
            report=report,
            handlers=_handlers(events, progress=lambda: publish_status(report), shutdown=shutdown),
        )
        on_change = publish_status if events is None else _with_step_events(publish_status, events)
        try:
            code = _run_machine(ctx, on_change, shutdown)
        finally:
            if lease is not None:
                lease.release()
    if status.last and code == 0:
        code = _report_not_written(report, sink.describe(settings.status_configmap), status.last)
    conclude(settings, invocation, report, sink, cluster=cluster, events=events, status_written=not status.last)
    return code


def _config(
    settings: RunnerSettings, invocation: Invocation, env: Mapping[str, str], version_output: tuple[str, ...] | None
) -> RunConfig:
    """What the run was asked: the settings, the mode and what the command line named."""
    return RunConfig(
        settings=settings,
        mode=invocation.mode,
        environ=env,
        aicr_binary=invocation.aicr_binary,
        pack_dir=invocation.pack_dir,
        recipe_file=invocation.recipe_file,
        upgrade_from=invocation.upgrade_from,
        version_output=version_output,
    )


def _handlers(events: JobEvents | None, *, progress: Callable[[], None], shutdown: ShutdownController) -> RunHandlers:
    """Whom the steps tell: the status writer, the run's stop when the Lease is lost,
    and in a Job the Job's Events (the deploy's progress, a verdict's or the cluster's
    change, a stopped upgrade); outside a Job those go unheard (the report says them)."""
    lease_lost = _stop_when_lease_lost(shutdown)
    if events is None:
        return RunHandlers(progress=progress, on_lease_lost=lease_lost)
    return RunHandlers(
        progress=progress,
        on_lease_lost=lease_lost,
        on_deploy_progress=events.deploy_progress,
        on_verdict_change=events.verdict_changed,
        on_cluster_change=events.cluster_changed,
        on_upgrade_check=events.upgrade_checked,
    )


def _make_api(settings: RunnerSettings, invocation: Invocation, shutdown: ShutdownController) -> KubeApi | None:
    """The cluster's API for a Job run; None for plan and ``run --results-dir``.
    A call in flight when SIGTERM arrives stops (``ClientKubeApi``)."""
    if not invocation.in_cluster:
        return None
    from aicr_runner.kube.api import ClientKubeApi

    return ClientKubeApi(write_budget_seconds=settings.kube_write_budget_seconds, interrupted=shutdown.requested)


def _connect(settings: RunnerSettings, invocation: Invocation, shutdown: ShutdownController) -> Cluster | None:
    """The API and the run's namespace (the setting, or the pod's own) in a Job run."""
    api = _make_api(settings, invocation, shutdown)
    return None if api is None else (api, settings.namespace or _pod_namespace())


def _report_target(cluster: Cluster | None) -> ReportTarget | None:
    """Where the verdict report goes: a Job run's API (one that can make any request)."""
    if cluster is None:  # plan and a results directory write no report
        return None
    from aicr_runner.kube.report_writer import ReportTarget, RequestApi

    api, namespace = cluster
    return ReportTarget(api, namespace) if isinstance(api, RequestApi) else None


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if path.is_file():
        return path.read_text().strip()
    raise ConfigError([f"{ENV_PREFIX}NAMESPACE='': not running in a pod; set the namespace for the result ConfigMaps"])


def _make_sink(invocation: Invocation, cluster: Cluster | None) -> Sink:
    if cluster is not None:
        return ConfigMapSink(*cluster)
    if invocation.results_dir is None:  # a run without the API is a plan or a run --results-dir
        raise RunnerError("no results directory and no cluster to write results to")
    return DirectorySink(invocation.results_dir)


def _make_lease(settings: RunnerSettings, cluster: Cluster | None, shutdown: ShutdownController) -> InstallLease | None:
    if cluster is None or not settings.lease.name:
        return None
    from aicr_runner.kube.lease import InstallLease

    api, namespace = cluster
    return InstallLease(api, namespace, settings.lease, interrupted=shutdown.requested)


def _make_events(settings: RunnerSettings, cluster: Cluster | None) -> JobEvents | None:
    """Events on the runner's own Job: in a Job run that knows its Job's name."""
    if cluster is None or not settings.lease.job_name:
        return None
    from aicr_runner.kube.events import JobEvents

    api, namespace = cluster
    return JobEvents(api, namespace=namespace, job=settings.lease.job_name, pod=settings.lease.pod_name)


def _prepare_work(settings: RunnerSettings) -> None:
    """Credentials registered before anything can log them; the work directory
    (already checked writable by ``cli``)."""
    _register_credentials(settings)
    settings.work_path.mkdir(parents=True, exist_ok=True)


def _register_credentials(settings: RunnerSettings) -> None:
    """Read every credential once, up front, so no later log line can show it."""
    pub = settings.validate.publish
    files = [
        Path(settings.pack.credentials_file) if settings.pack.credentials_file else None,
        Path(pub.registry_config_dir) / "config.json" if pub.registry_config_dir else None,
    ]
    for path in files:
        if path is not None and path.is_file():
            logs.register_dockerconfig_secrets(path.read_bytes())
    if pub.identity_token_file and Path(pub.identity_token_file).is_file():
        logs.register_secret(Path(pub.identity_token_file).read_text())


def _start(
    settings: RunnerSettings, invocation: Invocation, answer: tuple[str, tuple[str, ...] | None]
) -> tuple[RunReport, tuple[str, ...] | None]:
    """The run's report, after the start line said what runs (``answer``: what the start
    line says of aicr, and what a preinstalled aicr printed for ``--version``, which the
    fetch step then does not ask again)."""
    aicr_version, version_output = answer
    report = Machine.new_report(
        ROUTES[invocation.mode],
        runner_version=__version__,
        aicr_version=aicr_version,
        criteria=settings.criteria.stated(),
        run_by=settings.lease.pod_identity,
    )
    log.info(
        "aicr-runner starting",
        mode=invocation.mode.value,
        runner=__version__,
        aicr=aicr_version,
        arch=settings.aicr.arch.value,
        criteria=settings.criteria.summary(),
        pack=settings.pack.ref or str(invocation.pack_dir or ""),
    )
    return report, version_output


def _run_machine(ctx: RunContext, on_change: Callable[[RunReport], None], shutdown: ShutdownController) -> int:
    """The steps run, and the run's exit code under its gates."""
    settings = ctx.settings
    machine = Machine(
        Steps(ctx).functions(),
        ctx.report,
        on_change=on_change,
        interrupted=shutdown.requested,
        transitions=ROUTES[ctx.mode],
        clock=ctx.externals.clock,
    )
    machine.run()
    code = machine.finish(
        validate_gate=settings.validate.fail_on_error,
        publish_gate=settings.validate.publish.fail_on_error,
        success=_SUCCESS.get(ctx.mode, "AICR Job complete"),
        component_gate=settings.deploy.fail_on_component_failure,
    )
    return code


def _with_step_events(publish_status: Callable[[RunReport], None], events: JobEvents) -> Callable[[RunReport], None]:
    """The machine's ``on_change``: the status written, then an Event for each step that just ended."""
    told: set[str] = set()

    def on_change(current: RunReport) -> None:
        publish_status(current)
        for record in current.steps:
            if record.ended_at is not None and record.state not in told:
                told.add(record.state)
                events.step_ended(record)

    return on_change


def _report_not_written(report: RunReport, where: str, reason: str) -> int:
    """The run's final report is its product (the results directory outside a
    cluster, the status ConfigMap that fleet, alerts and the next run read in
    one): a run whose final report did not land did not succeed, and its last
    line does not say it did. Exit 26, which the Job retries (docs: exit codes)."""
    code = report.exit_code = int(ExitCode.CAPTURE_FAILED)
    report.message = f"{report.message}; but the run report ({where}) was not written: {reason}"
    report.phase = RunPhase.FAILED
    return code


@dataclass
class _StatusWrites:
    """How the run report's writes went: the first failure (warned once) and the
    last write's failure (empty once a write landed)."""

    first: str = ""
    last: str = ""


def _status_publisher(
    settings: RunnerSettings, sink: Sink, *, live: bool
) -> tuple[Callable[[RunReport], None], _StatusWrites]:
    """The run report's writer, and how its writes went.

    After a failed write, the progress writes are skipped until the final report:
    against an API that fails every write, each write would wait out its whole
    budget (a 5 s budget made a short run 100 s; the default 120 s, 40 minutes).

    A ConfigMap shows a Job's progress live (kubectl get cm), and so does the
    results directory of a local ``run`` (its deploy takes minutes: summary.txt
    shows each component as deploy.sh reports it). A plan's results directory
    (``live`` false) is read once the plan is over, and the final report is what
    lands there (each write is two atomic file replacements: most of a quick
    plan's own time went to writes nobody read).
    """
    status = _StatusWrites()
    # The deploy step's progress is written from a thread of its own: one write at a time.
    one_at_a_time = threading.Lock()

    def publish_status(current: RunReport) -> None:
        if not settings.status_configmap:
            return
        if current.phase is RunPhase.RUNNING and (
            status.last or not live or not any(r.status is StepStatus.RUNNING for r in current.steps)
        ):
            # A step just ended: the next step's start (or the final report) is
            # written next anyway and shows it, so this write would be overwritten
            # at once (half of the writes of a run).
            return
        try:
            with one_at_a_time:
                sink.put(settings.status_configmap, data=status_data(current))
        except RunnerError as exc:
            status.last = exc.message
            if not status.first:  # say it once, not at every step
                status.first = exc.message
                log.warning("run status not written", reason=exc.message)
        else:
            status.last = ""

    return publish_status, status


def _stop_when_lease_lost(shutdown: ShutdownController) -> Callable[[str], None]:
    def lease_lost(reason: str) -> None:
        # Another run may take over: stop deploy.sh at the next safe point.
        log.error("lost the install Lease; stopping at the next safe point", reason=reason)
        shutdown.request()

    return lease_lost
