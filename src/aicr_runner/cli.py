"""Command line: ``run`` (the Job entrypoint), ``plan`` (local dry run), ``version``.

Imports are staged: ``version`` and ``--help`` need only ``names``; reading the
settings (and refusing bad input, exit 2) needs only the standard library and
never the Kubernetes client, oras, httpx or requests; those come with the steps,
and the Kubernetes client only when results go to ConfigMaps.

Every input is checked before any step runs: the settings (``config.load``),
a ``--values`` file against the chart's schema, and every directory the run
writes (created now, and must take a file). A bad input is one line per problem
on stderr naming the variable or flag, and exit 2; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from aicr_runner import __version__
from aicr_runner.names import CRITERIA_FLAG_ORDER, ENV_PREFIX, PINNED_AICR_VERSION

if TYPE_CHECKING:
    from aicr_runner.config import RunnerSettings
    from aicr_runner.context import Mode, RunContext
    from aicr_runner.errors import ConfigError
    from aicr_runner.job_events import JobEvents
    from aicr_runner.kube import KubeApi
    from aicr_runner.lease import InstallLease
    from aicr_runner.process import ShutdownController
    from aicr_runner.report import RunReport
    from aicr_runner.report_writer import ReportTarget
    from aicr_runner.sink import Sink

__all__ = ["main"]

#: No Job ran in a plan: say what did.
_PLAN_COMPLETE = "AICR plan complete: recipe resolved, bundle rendered and verified; nothing was deployed"
#: Kubernetes keeps at most 4096 bytes of a termination message.
_TERMINATION_MESSAGE_LIMIT = 4096


class _ArgumentsRefused(Exception):
    """argparse refused the command line; ``message`` may quote an argument."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose error comes back to ``main`` (to mask the
    credentials in the arguments it quotes) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentsRefused(self, message)


def _arguments_refused(exc: _ArgumentsRefused, argv: Sequence[str]) -> int:
    """argparse's usage and error line, exit 2, with every argument that holds
    a user or password masked where the line quotes it (as is, or as repr)."""
    import re

    from aicr_runner.masking import has_userinfo, mask_userinfo

    message = exc.message
    for arg in sorted((a for a in argv if has_userinfo(a)), key=len, reverse=True):
        flag = re.match(r"--[a-z][a-z0-9-]*=", arg)
        masked = flag.group() + mask_userinfo(arg[flag.end() :]) if flag else mask_userinfo(arg)
        message = message.replace(repr(arg), repr(masked)).replace(arg, masked)
    exc.parser.print_usage(sys.stderr)
    print(f"{exc.parser.prog}: error: {message}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="aicr-runner",
        description="Resolve, bundle, verify, deploy and validate an aicr recipe (configuration: AICR_RUNNER_* "
        "environment variables, see docs/configuration.md 'Environment').",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,plan,version}")
    run = sub.add_parser("run", help="the Kubernetes Job entrypoint: results go to ConfigMaps")
    plan = sub.add_parser(
        "plan", help="local dry run: resolve, bundle and verify; results go to a directory; no cluster needed"
    )
    sub.add_parser("version", help="print the runner version and the pinned aicr version")
    for command in (run, plan):
        command.add_argument(
            "--aicr-binary",
            type=Path,
            metavar="PATH",
            help="use this preinstalled aicr instead of downloading the pinned release "
            f"(env {ENV_PREFIX}AICR__BINARY; verified against {ENV_PREFIX}AICR__BINARY_SHA256 when set)",
        )
    run.add_argument(
        "--results-dir",
        type=Path,
        metavar="DIR",
        help="write results to this directory instead of ConfigMaps (a full run outside a pod)",
    )
    _add_plan_options(plan)
    return parser


def _add_plan_options(plan: argparse.ArgumentParser) -> None:
    """What only ``plan`` takes: its output, a values file, a local pack, the criteria as flags."""
    plan.add_argument(
        "--output",
        type=Path,
        default=Path("aicr-plan"),
        metavar="DIR",
        help="where the recipe, bundle and run report land (default: ./aicr-plan)",
    )
    plan.add_argument(
        "--values",
        type=Path,
        metavar="FILE",
        help="a values file for the nvidia-aicr chart: plan what `helm install -f FILE` would run "
        "(environment variables and criteria flags override it)",
    )
    plan.add_argument(
        "--pack-dir",
        type=Path,
        metavar="DIR",
        help="a local data pack directory to try before pushing it (instead of a pack ref)",
    )
    for name in CRITERIA_FLAG_ORDER:
        plan.add_argument(
            f"--{name}", metavar="VALUE", help=f"criteria {name} (sets {ENV_PREFIX}CRITERIA__{name.upper()})"
        )


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
    except _ArgumentsRefused as exc:
        return _arguments_refused(exc, argv)
    env = dict(os.environ if environ is None else environ)
    if args.command == "version":
        print(f"aicr-runner {__version__} (pinned aicr {PINNED_AICR_VERSION})")
        return 0
    _never_fail_on_encoding()
    from aicr_runner.config import load
    from aicr_runner.errors import ConfigError, ExitCode

    origins: dict[str, str] = {}
    try:
        env = _command_environment(args, env, origins)
        settings = load(env, local_pack=_local_pack(args) is not None)
    except ConfigError as exc:
        return _bad_input(exc, origins)
    # Before the heavy imports: a refused plan answers in milliseconds, offline.
    if args.command == "plan" and (refused := _criteria_refused_offline(settings, args)):
        print(f"aicr-runner: {refused}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        _check_places(settings, args)
    except ConfigError as exc:
        return _bad_input(exc, origins)
    return _run(settings, args, env)


def _run(settings: RunnerSettings, args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """The run itself, once every input is known good."""
    from aicr_runner import logs
    from aicr_runner.context import Mode
    from aicr_runner.errors import RunnerError

    mode = Mode(args.command)
    logs.configure(settings.log_format)
    try:
        return _execute(settings, mode, args, env)
    except RunnerError as exc:
        logs.get_logger().error(exc.message, exit_code=int(exc.exit_code))
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a run ends with one line and an exit code, never a traceback
        return _internal_error(exc, settings)
    finally:
        logs.flush_relay()


def _never_fail_on_encoding() -> None:
    """Print what cannot be encoded as escapes: a summary line quoting bytes that
    are not UTF-8 must not end the run with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or detached stream: nothing to print to anyway
                continue


def _command_environment(args: argparse.Namespace, env: dict[str, str], origins: dict[str, str]) -> dict[str, str]:
    """The settings' environment with the command line's flags applied; ``origins``
    learns which variable came from which flag or values key (for messages)."""
    _paths_not_urls(args)
    if args.aicr_binary is not None:
        # The flag is the binary setting: every check that reads the setting sees it.
        env[f"{ENV_PREFIX}AICR__BINARY"] = os.path.abspath(args.aicr_binary)
        origins[f"{ENV_PREFIX}AICR__BINARY"] = "--aicr-binary"
    if args.command != "plan":
        return env
    if args.values is not None:
        from aicr_runner.values import VALUE_TO_ENV, env_from_values, load_values_file

        from_values = env_from_values(load_values_file(args.values))
        keys = {ENV_PREFIX + name: dotted for dotted, name in VALUE_TO_ENV.items()}
        origins.update({name: f"--values key {keys[name]}" for name in from_values if name not in env})
        env = {**from_values, **env}
    for name in CRITERIA_FLAG_ORDER:
        if getattr(args, name) is not None:
            env[f"{ENV_PREFIX}CRITERIA__{name.upper()}"] = getattr(args, name)
            origins[f"{ENV_PREFIX}CRITERIA__{name.upper()}"] = f"--{name}"
    if f"{ENV_PREFIX}WORK_DIR" not in env:
        env[f"{ENV_PREFIX}WORK_DIR"] = os.path.join(os.path.abspath(args.output), "work")
        origins[f"{ENV_PREFIX}WORK_DIR"] = "--output"
    return env


def _paths_not_urls(args: argparse.Namespace) -> None:
    """A path flag given a URL (``--aicr-binary https://user:pw@host/aicr``) is
    refused: taken as a path under the working directory, the URL, password and
    all, would be printed by every later message that names the path."""
    import re

    from aicr_runner.config import Invalid, problem_line
    from aicr_runner.errors import ConfigError

    flags = ("aicr_binary", "output", "results_dir", "pack_dir", "values")
    # argparse made each a Path, which writes '//' as '/': 'https://h/x' is 'https:/h/x'.
    given = {f"--{name.replace('_', '-')}": str(getattr(args, name)) for name in flags if getattr(args, name, None)}
    why = Invalid("a URL, not a path; give a local file or directory (download an aicr release or a pack first)")
    problems = [
        problem_line(flag, value, why) for flag, value in given.items() if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", value)
    ]
    if problems:
        raise ConfigError(problems)


def _check_places(settings: RunnerSettings, args: argparse.Namespace) -> None:
    """Every directory the run writes exists or is created now, and takes a file.
    Before any step: a run never reports success with results that went nowhere."""
    from aicr_runner.config import Invalid, problem_line
    from aicr_runner.errors import ConfigError

    places: list[tuple[str, str]] = [(f"{ENV_PREFIX}WORK_DIR", settings.work_dir)]
    output = _results_dir(args)
    if output is not None:
        places.append(("--output" if args.command == "plan" else "--results-dir", os.path.abspath(output)))
    problems: list[str] = []
    for name, place in places:
        try:
            _writable_directory(place)
        except Invalid as exc:
            problems.append(problem_line(name, place, exc))
    if output is not None and not problems:
        problems.extend(_result_places(settings, args, output))
    problems.extend(_trusted_root_problem(settings))
    if problems:
        raise ConfigError(problems)


def _result_places(settings: RunnerSettings, args: argparse.Namespace, output: Path) -> list[str]:
    """The results directory's subdirectories (one per result, named as its
    ConfigMap would be): one already there must be a directory that takes a
    file, or the run would end without its report after all its work."""
    from aicr_runner.config import Invalid, problem_line

    flag = "--output" if args.command == "plan" else "--results-dir"
    results = {
        "STATUS_CONFIGMAP": settings.status_configmap,
        "RECIPE__CONFIGMAP": settings.recipe.configmap,
        "VALIDATE__RESULT_CONFIGMAP": settings.validate.result_configmap,
        "VALIDATE__EVIDENCE_CONFIGMAP": settings.validate.evidence_configmap,
    }
    problems: list[str] = []
    for setting, name in results.items():
        place = output / name
        if not name or not (place.exists() or place.is_symlink()):
            continue  # created when the result is written; the results directory takes files
        try:
            _writable_directory(str(place))
        except Invalid as exc:
            why = (
                f"{name}/ in it {exc.reason}; the results {ENV_PREFIX}{setting} names go there: remove it or "
                f"choose another {flag}"
            )
            problems.append(problem_line(flag, str(output), Invalid(why)))
    return problems


def _trusted_root_problem(settings: RunnerSettings) -> list[str]:
    """A Sigstore trusted root that is given must be a file (when provenance is checked at all)."""
    from aicr_runner.config import Invalid, problem_line

    provenance = settings.aicr.provenance
    path = Path(provenance.trusted_root)
    if not provenance.trusted_root or provenance.mode.value == "off" or path.is_file():
        return []
    state = "is a directory" if path.is_dir() else "exists but is not a file" if path.exists() else "does not exist"
    reason = f"{state}; give a Sigstore trusted_root.json file, or leave it empty for the shipped public-good root"
    return [problem_line(f"{ENV_PREFIX}AICR__PROVENANCE__TRUSTED_ROOT", provenance.trusted_root, Invalid(reason))]


def _writable_directory(place: str) -> None:
    """``place`` is (now) a directory this process can create files in; raises ``Invalid``."""
    import tempfile

    from aicr_runner.config import Invalid, absolute_path

    absolute_path(required=True)(place)  # UTF-8, no control characters, absolute
    path = Path(place)
    try:
        if path.exists() and not path.is_dir():
            raise Invalid("exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Invalid(f"cannot be created ({exc.strerror or exc})") from None
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".aicr-runner-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise Invalid(_not_writable(exc)) from None


def _not_writable(exc: OSError) -> str:
    """Why a directory takes no file, in words that fit the errno: /proc answers
    "No such file or directory" for a directory that is there."""
    import errno

    said = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"is not writable by this process ({said})"
    if exc.errno == errno.EROFS:
        return f"is on a read-only file system ({said})"
    if exc.errno == errno.ENOENT:
        return f"takes no file: creating one failed with '{said}', as in /proc and other special file systems"
    return f"takes no file ({said})"


def _results_dir(args: argparse.Namespace) -> Path | None:
    """Where results land outside a cluster: ``plan --output``, ``run --results-dir``."""
    if args.command == "plan":
        return Path(os.path.abspath(args.output))
    results: Path | None = getattr(args, "results_dir", None)
    return Path(os.path.abspath(results)) if results is not None else None


def _internal_error(exc: Exception, settings: RunnerSettings) -> int:
    """An unexpected error outside the steps: one line, the traceback in the work directory."""
    import traceback

    from aicr_runner import logs
    from aicr_runner.errors import ExitCode

    details = settings.work_path / "logs" / "traceback.txt"
    try:
        details.parent.mkdir(parents=True, exist_ok=True)
        details.write_text(logs.redact(traceback.format_exc()), errors="backslashreplace")
        where = f"traceback in {details}"
    except OSError:
        where = "no traceback written (the work directory is not writable)"
    logs.get_logger().error(
        f"internal error: {type(exc).__name__}: {logs.redact(str(exc))[:500]} ({where})",
        exit_code=int(ExitCode.INTERNAL),
    )
    return int(ExitCode.INTERNAL)


def _criteria_refused_offline(settings: RunnerSettings, args: argparse.Namespace) -> str | None:
    """The chart's criteria check against its catalog, before anything is downloaded.

    Skipped with a pack (it may register values) and with a preinstalled aicr
    (nothing to download; that aicr decides, whatever its version).
    """
    if settings.pack.ref or _local_pack(args) is not None or settings.aicr.binary:
        return None
    from aicr_runner.catalog import refusal

    return refusal(settings.criteria.stated(), settings.aicr.version)


def _local_pack(args: argparse.Namespace) -> Path | None:
    """``plan --pack-dir``: a local pack standing in for a pack ref; ConfigError when it is no directory."""
    pack_dir: Path | None = getattr(args, "pack_dir", None)
    if pack_dir is None:
        return None
    if not pack_dir.is_dir():
        from aicr_runner.config import Invalid, problem_line
        from aicr_runner.errors import ConfigError

        state = "is not a directory" if pack_dir.exists() else "the directory does not exist"
        reason = Invalid(f"{state}; give a data pack directory with registry.yaml")
        raise ConfigError([problem_line("--pack-dir", str(pack_dir), reason)])
    # Absolute, symlinks kept: the path the user gave is the one messages show.
    return Path(os.path.abspath(pack_dir))


def _bad_input(exc: ConfigError, origins: Mapping[str, str] | None = None) -> int:
    """One line per problem on stderr (at most MAX_PROBLEMS, each bounded), naming
    the flag or values key a variable came from; exit 2."""
    from aicr_runner.config import MAX_PROBLEMS
    from aicr_runner.errors import ExitCode

    if exc.report:
        print(
            "\n".join(f"aicr-runner: {line}" if i == 0 else line for i, line in enumerate(exc.problems)),
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    for problem in exc.problems[:MAX_PROBLEMS]:
        name = problem.split("=", 1)[0].split(":", 1)[0]
        origin = (origins or {}).get(name)
        print(f"aicr-runner: invalid setting: {problem}{f' (from {origin})' if origin else ''}", file=sys.stderr)
    if len(exc.problems) > MAX_PROBLEMS:
        print(f"aicr-runner: ... and {len(exc.problems) - MAX_PROBLEMS} more problems", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)


def _register_credentials(settings: RunnerSettings) -> None:
    """Read every credential once, up front, so no later log line can show it."""
    from aicr_runner import logs

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


def _make_sink(settings: RunnerSettings, mode: Mode, args: Any, api: KubeApi | None) -> Sink:
    from aicr_runner.errors import RunnerError
    from aicr_runner.sink import ConfigMapSink, DirectorySink

    if api is not None:
        return ConfigMapSink(api, settings.namespace or _pod_namespace())
    results = _results_dir(args)
    if results is None:  # a run without the API is a plan or a run --results-dir
        raise RunnerError("no results directory and no cluster to write results to")
    return DirectorySink(results)


def _make_api(settings: RunnerSettings, mode: Mode, args: Any) -> KubeApi | None:
    """The cluster's API for a Job run; None for plan and ``run --results-dir``."""
    from aicr_runner.context import Mode

    if mode is Mode.PLAN or args.results_dir is not None:
        return None
    from aicr_runner.kube import ClientKubeApi

    return ClientKubeApi(write_budget_seconds=settings.kube_write_budget_seconds)


def _make_lease(settings: RunnerSettings, api: KubeApi | None, shutdown: ShutdownController) -> InstallLease | None:
    if api is None or not settings.lease.name:
        return None
    from aicr_runner.lease import InstallLease

    return InstallLease(api, settings.namespace or _pod_namespace(), settings.lease, interrupted=shutdown.requested)


def _report_target(settings: RunnerSettings, api: KubeApi | None) -> ReportTarget | None:
    """Where the verdict report goes: a Job run's API (one that can make any request)."""
    if api is None:  # plan and a results directory: no import of the writer
        return None
    from aicr_runner.report_writer import ReportTarget, RequestApi

    if not isinstance(api, RequestApi):
        return None
    return ReportTarget(api, settings.namespace or _pod_namespace())


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if path.is_file():
        return path.read_text().strip()
    from aicr_runner.errors import ConfigError

    raise ConfigError([f"{ENV_PREFIX}NAMESPACE='': not running in a pod; set the namespace for the result ConfigMaps"])


def _execute(settings: RunnerSettings, mode: Mode, args: Any, env: Mapping[str, str]) -> int:
    from aicr_runner.context import Mode
    from aicr_runner.process import ShutdownController

    _prepare_work(settings)
    api = _make_api(settings, mode, args)
    sink = _make_sink(settings, mode, args, api)
    shutdown = ShutdownController()
    lease = _make_lease(settings, api, shutdown)
    previous = {sig: signal.signal(sig, shutdown.request) for sig in (signal.SIGTERM, signal.SIGINT)}
    ctx = _run_context(settings, mode, args, env, sink=sink, shutdown=shutdown)
    report = ctx.report
    events = _make_events(settings, api)
    publish_status, status_warned = _status_publisher(settings, sink, live=api is not None or mode is Mode.RUN)
    ctx.lease = lease
    ctx.report_target = _report_target(settings, api)
    ctx.progress = lambda: publish_status(report)
    ctx.on_lease_lost = _stop_when_lease_lost(shutdown)
    if events is not None:
        ctx.on_deploy_progress = events.deploy_progress
    on_change = publish_status if events is None else _with_step_events(publish_status, events)
    try:
        code = _run_machine(ctx, on_change, shutdown)
    finally:
        if lease is not None:
            lease.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status_warned and api is None and code == 0:
        code = _report_not_written(report, status_warned[0])
    if ctx.report_target is not None:
        from aicr_runner import report_writer

        report_writer.write_after_failed_deploy(ctx)
    _conclude(settings, mode, report, sink, args, api=api, events=events)
    return code


def _run_machine(ctx: RunContext, on_change: Callable[[RunReport], None], shutdown: ShutdownController) -> int:
    """The steps run, and the run's exit code under its gates."""
    from aicr_runner.context import Mode
    from aicr_runner.machine import Machine
    from aicr_runner.steps import Steps

    settings = ctx.settings
    machine = Machine(Steps(ctx).functions(), ctx.report, on_change=on_change, interrupted=shutdown.requested)
    machine.run()
    return machine.finish(
        validate_gate=settings.validate.fail_on_error,
        publish_gate=settings.validate.publish.fail_on_error,
        success=_PLAN_COMPLETE if ctx.mode is Mode.PLAN else "AICR Job complete",
        component_gate=settings.deploy.fail_on_component_failure,
    )


def _make_events(settings: RunnerSettings, api: KubeApi | None) -> JobEvents | None:
    """Events on the runner's own Job: in a Job run that knows its Job's name."""
    if api is None or not settings.lease.job_name:
        return None
    from aicr_runner.job_events import JobEvents

    return JobEvents(
        api,
        namespace=settings.namespace or _pod_namespace(),
        job=settings.lease.job_name,
        pod=settings.lease.pod_name,
    )


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


def _report_not_written(report: RunReport, reason: str) -> int:
    """Outside a cluster the results directory is the product: a run whose
    report did not land there did not succeed."""
    from aicr_runner.errors import ExitCode
    from aicr_runner.report import RunPhase

    code = report.exit_code = int(ExitCode.CAPTURE_FAILED)
    report.message = f"the run report was not written: {reason}"
    report.phase = RunPhase.FAILED
    return code


def _prepare_work(settings: RunnerSettings) -> None:
    """Credentials registered before anything can log them; the work directory
    (already checked writable by ``_check_places``)."""
    _register_credentials(settings)
    settings.work_path.mkdir(parents=True, exist_ok=True)


def _run_context(
    settings: RunnerSettings, mode: Mode, args: Any, env: Mapping[str, str], *, sink: Sink, shutdown: ShutdownController
) -> RunContext:
    """The run's context and report, after the start line said what runs."""
    from aicr_runner import logs
    from aicr_runner.context import RunContext
    from aicr_runner.machine import Machine
    from aicr_runner.process import SubprocessRunner

    aicr_version, version_output = _aicr_version_before_fetch(settings, env)
    report = Machine.new_report(
        runner_version=__version__,
        aicr_version=aicr_version,
        criteria=settings.criteria.stated(),
        run_by=settings.lease.pod_identity,
    )
    logs.get_logger().info(
        "aicr-runner starting",
        mode=mode.value,
        runner=__version__,
        aicr=aicr_version,
        arch=settings.aicr.arch.value,
        criteria=settings.criteria.summary(),
        pack=settings.pack.ref or str(_local_pack(args) or ""),
    )
    return RunContext(
        settings=settings,
        mode=mode,
        sink=sink,
        processes=SubprocessRunner(
            grace_seconds=settings.shutdown_grace_seconds, shutdown=shutdown, redact=logs.redact
        ),
        environ=env,
        report=report,
        aicr_binary=args.aicr_binary,
        pack_dir=_local_pack(args),
        interrupted=shutdown.requested,
        version_output=version_output,
    )


def _status_publisher(
    settings: RunnerSettings, sink: Sink, *, live: bool
) -> tuple[Callable[[RunReport], None], list[str]]:
    """The run report's writer, and the first write failure it saw (warned once).

    A ConfigMap shows a Job's progress live (kubectl get cm), and so does the
    results directory of a local ``run`` (its deploy takes minutes: summary.txt
    shows each component as deploy.sh reports it). A plan's results directory
    (``live`` false) is read once the plan is over, and the final report is what
    lands there (each write is two atomic file replacements: most of a quick
    plan's own time went to writes nobody read).
    """
    from aicr_runner import logs
    from aicr_runner.errors import RunnerError
    from aicr_runner.report import RunPhase, StepStatus

    status_warned: list[str] = []
    # The deploy step's progress is written from a thread of its own: one write at a time.
    one_at_a_time = threading.Lock()

    def publish_status(current: RunReport) -> None:
        if not settings.status_configmap:
            return
        if current.phase is RunPhase.RUNNING and (
            not live or not any(r.status is StepStatus.RUNNING for r in current.steps)
        ):
            # A step just ended: the next step's start (or the final report) is
            # written next anyway and shows it, so this write would be overwritten
            # at once (half of the writes of a run).
            return
        try:
            with one_at_a_time:
                sink.put(
                    settings.status_configmap,
                    data={
                        "report.json": current.to_json(),
                        "summary.txt": current.summary_text(),
                        "phase": current.phase.value,
                    },
                )
        except RunnerError as exc:
            if not status_warned:  # say it once, not at every step
                status_warned.append(exc.message)
                logs.get_logger().warning("run status not written", reason=exc.message)

    return publish_status, status_warned


def _stop_when_lease_lost(shutdown: ShutdownController) -> Callable[[str], None]:
    from aicr_runner import logs

    def lease_lost(reason: str) -> None:
        # Another run may take over: stop deploy.sh at the next safe point.
        logs.get_logger().error("lost the install Lease; stopping at the next safe point", reason=reason)
        shutdown.request()

    return lease_lost


def _conclude(
    settings: RunnerSettings,
    mode: Mode,
    report: RunReport,
    sink: Sink,
    args: Any,
    *,
    api: KubeApi | None,
    events: JobEvents | None = None,
) -> None:
    """The outcome announced and recorded on the Job; a failed Job run (or one
    with failed components, or whose validation ran no check) also reported on
    its HelmRelease."""
    from aicr_runner.report import RunPhase

    termination = _termination_line(report)
    _announce(settings, mode, report, sink, args, line=termination)
    if events is not None:
        events.run_ended(report, termination)
    warned = (RunPhase.FAILED, RunPhase.SUCCEEDED_WITH_FAILURES, RunPhase.SUCCEEDED_INCONCLUSIVE)
    if report.phase in warned and api is not None and settings.lease.job_name:
        # After the capture and the termination message; never changes the exit code.
        from aicr_runner import failure_event

        reasons = {
            RunPhase.FAILED: failure_event.EVENT_REASON,
            RunPhase.SUCCEEDED_WITH_FAILURES: failure_event.COMPONENTS_FAILED_REASON,
            RunPhase.SUCCEEDED_INCONCLUSIVE: failure_event.INCONCLUSIVE_REASON,
        }
        failure_event.report_failure(
            api,
            job_namespace=settings.namespace or _pod_namespace(),
            job=settings.lease.job_name,
            pod=settings.lease.pod_name,
            message=termination,
            reason=reasons[report.phase],
        )


def _aicr_version_before_fetch(settings: RunnerSettings, env: Mapping[str, str]) -> tuple[str, list[str] | None]:
    """What the start line can truthfully say about aicr before the fetch step,
    and what ``aicr --version`` printed when it was asked (the fetch step then
    does not ask again).

    A preinstalled binary is asked (a few milliseconds) when its provenance is
    not to be verified; otherwise it may not run before the fetch step verified
    it, and, like a release (only a tag until it is downloaded), the fetch step
    reports what it is.
    """
    from aicr_runner.capabilities import AicrVersion
    from aicr_runner.process import child_env

    binary = settings.aicr.binary
    if not binary:
        return f"{settings.aicr.version} (release tag, checked after download)", None
    if settings.aicr.provenance.mode.value != "off":
        # Nothing runs aicr before its provenance is verified, not even --version.
        return f"preinstalled {binary} (version reported once its provenance is verified)", None
    try:
        argv = [binary, "--version"]
        answer = subprocess.run(argv, env=child_env(env), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return f"unknown (preinstalled {binary}; the fetch step checks it)", None
    if answer.returncode != 0:
        return f"unknown (preinstalled {binary} --version exited {answer.returncode})", None
    version = AicrVersion.parse(answer.stdout)
    printed = answer.stdout.splitlines()
    if version is None:
        # Never taken for the pin: the fetch step asks its --help what it can do.
        said = " ".join(printed).strip()[:120]
        return f"unknown version ({said!r}), capabilities detected from flags by the fetch step", printed
    return version.text, printed


def _termination_line(report: RunReport) -> str:
    """The pod's termination message (before redaction): phase, exit code, why, aicr version."""
    from aicr_runner.recipe import with_supported

    line = f"{report.phase.value} (exit {report.exit_code}): "
    return line + with_supported(report.message, report.supported_combinations) + f" [aicr {report.aicr_version}]"


def _announce(settings: RunnerSettings, mode: Mode, report: RunReport, sink: Sink, args: Any, *, line: str) -> None:
    """Log the outcome, write the termination message ``line`` (redacted, bounded)
    and, outside a Job, print the summary."""
    from aicr_runner import logs
    from aicr_runner.context import Mode
    from aicr_runner.recipe import component_table

    log = logs.get_logger()
    if report.exit_code == 0:
        log.info(report.message, exit_code=0, status=sink.describe(settings.status_configmap or "-"))
    else:
        log.error(report.message, exit_code=report.exit_code, status=sink.describe(settings.status_configmap or "-"))
    if mode is Mode.RUN:
        try:
            Path(settings.termination_message_path).write_text(logs.redact(line)[:_TERMINATION_MESSAGE_LIMIT])
        except OSError as exc:
            log.warning("termination message not written", path=settings.termination_message_path, reason=str(exc))
        if args.results_dir is None:
            return
    print(report.summary_text())
    if report.components:
        from aicr_runner.recipe import RecipeSummary

        print(component_table(RecipeSummary.from_rows(report.components)))
    print(f"\nresults in {_results_dir(args)}")
    if report.supported_combinations:
        print("criteria rejected; supported combinations:\n  " + "\n  ".join(report.supported_combinations))
