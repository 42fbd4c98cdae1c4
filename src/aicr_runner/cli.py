"""Command line: ``run`` (the Job entrypoint), ``plan`` (local dry run), ``validate``
(validation only, against the recipe recorded at install), ``fleet`` (the verdicts of
several clusters in one table), ``mirror`` (what an install needs, for air-gapped
sites: a plan, then the list), ``version``.

This module reads the command line and checks every input; ``wiring`` builds and
runs the run. Imports are staged: ``version`` and ``--help`` need only
``settings.names``; reading the settings (and refusing bad input, exit 2) needs
only what loading them needs, never the Kubernetes client, oras, httpx or
requests; ``wiring`` (and with it the steps) is imported once, when the run starts.

Every input is checked before any step runs: the settings (``config.load``),
a ``--values`` file against the chart's schema, and every directory the run
writes (created now, and must take a file: ``settings.places``). A bad input is one line per problem
on stderr naming the variable or flag, and exit 2; never a traceback. The
arguments are then resolved once into an ``Invocation``: nothing past this
module sees argparse's namespace.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from aicr_runner import __version__
from aicr_runner.settings.names import CRITERIA_FLAG_ORDER, ENV_PREFIX, PINNED_AICR_VERSION

if TYPE_CHECKING:
    from aicr_runner.errors import ConfigError
    from aicr_runner.mirror.command import MirrorRequest
    from aicr_runner.run.invocation import Invocation
    from aicr_runner.settings.config import RunnerSettings

__all__ = ["main", "program"]


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
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,plan,validate,fleet,mirror,version}")
    run = sub.add_parser("run", help="the Kubernetes Job entrypoint: results go to ConfigMaps")
    plan = sub.add_parser(
        "plan", help="local dry run: resolve, bundle and verify; results go to a directory; no cluster needed"
    )
    validate = _validate_parser(sub)
    mirror = _mirror_parser(sub)
    sub.add_parser("version", help="print the runner version and the pinned aicr version")
    _add_fleet_options(
        sub.add_parser(
            "fleet", help="one table of every release's verdict across kubeconfig contexts (exit 34 if not all green)"
        )
    )
    for command in (run, plan, validate, mirror):
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
    _add_plan_inputs(mirror)
    return parser


def _mirror_parser(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``mirror``: a plan, then the list of what the install needs (or its copy into a registry)."""
    from aicr_runner.mirror.arguments import add_options

    mirror = sub.add_parser(
        "mirror",
        help="for air-gapped sites: resolve and bundle as plan does, then list every chart, image and file "
        "the install needs, or copy them into a registry",
    )
    add_options(mirror)
    return mirror


def _validate_parser(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``validate``: aicr validate only (no recipe resolution, bundle, helm or deploy.sh)."""
    validate = sub.add_parser(
        "validate",
        help="validation only, against the recipe recorded at install: never deploys; "
        "ends at once with exit 33 while an install holds the install Lease",
    )
    validate.add_argument(
        "--recipe",
        type=Path,
        required=True,
        metavar="FILE",
        help="the recipe recorded at install (recipe.yaml of the recipe ConfigMap; FILE.gz when FILE is absent)",
    )
    validate.add_argument(
        "--results-dir",
        type=Path,
        metavar="DIR",
        help="write results to this directory instead of ConfigMaps (against the current kubeconfig, like plan)",
    )
    return validate


def _add_plan_options(plan: argparse.ArgumentParser) -> None:
    """What only ``plan`` takes: its output, a values file, a local pack, the criteria as flags."""
    plan.add_argument(
        "--output",
        type=Path,
        default=Path("aicr-plan"),
        metavar="DIR",
        help="where the recipe, bundle and run report land (default: ./aicr-plan)",
    )
    _add_plan_inputs(plan)


def _add_plan_inputs(plan: argparse.ArgumentParser) -> None:
    """What ``plan`` and ``mirror`` take: a values file, a local pack, the criteria as flags."""
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
    plan.add_argument(
        "--upgrade-from",
        metavar="RECIPE",
        help="the recipe an upgrade starts from (a recipe file, or cm://NAMESPACE/NAME for aicr to read): "
        "run aicr upgrade-check against it and print each component's verdict",
    )
    for name in CRITERIA_FLAG_ORDER:
        plan.add_argument(
            f"--{name}", metavar="VALUE", help=f"criteria {name} (sets {ENV_PREFIX}CRITERIA__{name.upper()})"
        )


def _add_fleet_options(fleet: argparse.ArgumentParser) -> None:
    """What only ``fleet`` takes: which contexts, how long each may take, the output format."""
    which = fleet.add_mutually_exclusive_group()
    which.add_argument(
        "--context", action="append", default=[], metavar="NAME", help="a kubeconfig context to read (repeat it)"
    )
    which.add_argument("--all-contexts", action="store_true", help="read every context of the kubeconfig")
    fleet.add_argument("--kubeconfig", metavar="FILE", help="the kubeconfig (default: KUBECONFIG or ~/.kube/config)")
    fleet.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="each request to a cluster may take this long, retries included (default 10, at most 300)",
    )
    fleet.add_argument("-o", "--output", choices=("table", "json"), default="table", help="table (default) or json")


def _without_settings(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``version``, ``fleet``, and ``mirror --from-archive`` (the inside of the gap: no plan, only the archive)."""
    if args.command == "mirror":
        return _mirror_from_archive(args)
    return _fleet(args, env) if args.command == "fleet" else _version()


def _version() -> int:
    print(f"aicr-runner {__version__} (pinned aicr {PINNED_AICR_VERSION})")
    return 0


def _fleet(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``fleet``: flags checked, the kubeconfig read once, the contexts read; bad
    input is one line and exit 2. Every log line (the client's and urllib3's
    included) goes through the redacting log."""
    from aicr_runner import logs
    from aicr_runner.errors import ConfigError
    from aicr_runner.fleet.command import MAX_TIMEOUT_SECONDS, chosen_contexts, run_fleet
    from aicr_runner.kube.kubeconfig import read_kubeconfig

    _never_fail_on_encoding()
    logs.configure()
    try:
        _check_timeout(args.timeout, MAX_TIMEOUT_SECONDS)
        config = read_kubeconfig(args.kubeconfig, env)
        contexts = chosen_contexts(config, args.context, args.all_contexts)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"aicr-runner fleet: {problem}", file=sys.stderr)
        return 2
    try:
        return run_fleet(config, contexts, args.timeout, args.output)
    except KeyboardInterrupt:  # Ctrl-C while the clusters are read: one line, no traceback
        print("aicr-runner fleet: interrupted", file=sys.stderr)
        return 130


def _check_timeout(timeout: float, maximum: float) -> None:
    if not 0 < timeout <= maximum:
        from aicr_runner.errors import ConfigError

        raise ConfigError([f"--timeout={timeout:g}: must be more than 0 and at most {maximum:g} seconds"])


def program() -> NoReturn:
    """The ``aicr-runner`` command: ``main`` on this process's arguments, and exit."""
    code = main()
    # On exit the interpreter runs its collector over every object still tracked,
    # about 40,000, most of them made by the imports (pydantic's schemas): some 50 ms,
    # a sixth of a plan's own time. Frozen, they are not scanned; atexit (the log
    # handlers' flush) and the modules' teardown still run. Only here, at the end of
    # the process: a caller of ``main`` keeps its collector as it was.
    import gc

    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
    except _ArgumentsRefused as exc:
        return _arguments_refused(exc, argv)
    env = dict(os.environ if environ is None else environ)
    if args.command in ("version", "fleet") or (args.command == "mirror" and args.from_archive is not None):
        return _without_settings(args, env)
    _never_fail_on_encoding()
    from aicr_runner.errors import ConfigError, ExitCode
    from aicr_runner.settings.config import load
    from aicr_runner.settings.places import check_places

    origins: dict[str, str] = {}
    try:
        env = _command_environment(args, env, origins)
        invocation = _invocation(args)
        settings = load(env, local_pack=invocation.pack_dir is not None)
    except ConfigError as exc:
        return _bad_input(exc, origins)
    # Before the heavy imports: a refused plan answers in milliseconds, offline.
    if args.command in ("plan", "mirror") and (refused := _criteria_refused_offline(settings, invocation)):
        print(f"aicr-runner: {refused}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        check_places(settings, invocation.results_dir, invocation.results_flag)
    except ConfigError as exc:
        return _bad_input(exc, origins)
    return _launch(args, settings, invocation, env)


def _launch(args: argparse.Namespace, settings: RunnerSettings, invocation: Invocation, env: dict[str, str]) -> int:
    """Every input checked: the run (or the mirror command, a plan and then its list)."""
    if args.command == "mirror":
        return _mirror(args, settings, invocation, env)
    version = None
    if args.command == "plan":
        # A plan touches no cluster and is what a user waits for: a preinstalled aicr
        # answers --version while the run's modules load, not after them.
        from aicr_runner.aicr import start_version

        version = start_version.ask(settings, env)
    from aicr_runner import wiring

    return wiring.run(settings, invocation, env, version)


def _mirror(args: argparse.Namespace, settings: RunnerSettings, invocation: Invocation, env: dict[str, str]) -> int:
    from aicr_runner import wiring
    from aicr_runner.mirror.command import run_mirror

    request = _mirror_request(args)
    return request if isinstance(request, int) else run_mirror(settings, invocation, env, request, wiring.run)


def _mirror_from_archive(args: argparse.Namespace) -> int:
    from aicr_runner.mirror.command import run_from_archive

    request = _mirror_request(args)
    if isinstance(request, int):
        return request
    return run_from_archive(request, Path(os.path.abspath(args.from_archive)))


def _mirror_request(args: argparse.Namespace) -> MirrorRequest | int:
    """``mirror``'s own flags checked (exit 2 when refused), and the values file it lists for."""
    from aicr_runner.errors import ConfigError
    from aicr_runner.mirror.arguments import request_from

    values: dict[str, object] = {}
    if args.values is not None and args.from_archive is None:
        from aicr_runner.settings.values_file import load_values_file

        values = load_values_file(args.values)  # checked already: it loaded into the settings
    try:
        return request_from(args, values)
    except ConfigError as exc:
        return _bad_input(exc)


def _invocation(args: argparse.Namespace) -> Invocation:
    """The command line resolved once: the mode, where results land (absolute),
    the local pack (checked a directory) and the preinstalled aicr."""
    from aicr_runner.run.invocation import Invocation, Mode

    # mirror runs the plan's steps: its work directory is a plan's results directory.
    mode = Mode.PLAN if args.command == "mirror" else Mode(args.command)
    given: Path | None = args.output if mode is Mode.PLAN else args.results_dir
    recipe: Path | None = getattr(args, "recipe", None)
    return Invocation(
        mode=mode,
        results_dir=Path(os.path.abspath(given)) if given is not None else None,
        pack_dir=_local_pack(args),
        aicr_binary=args.aicr_binary,
        recipe_file=Path(os.path.abspath(recipe)) if recipe is not None else None,
        upgrade_from=_upgrade_from(args),
    )


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
    if args.command == "validate":
        return _recorded_criteria(args.recipe, env, origins)
    if args.command not in ("plan", "mirror"):
        return env
    if args.values is not None:
        from aicr_runner.settings.values_file import env_from_values, load_values_file, value_to_env

        from_values = env_from_values(load_values_file(args.values))
        keys = {ENV_PREFIX + name: dotted for dotted, name in value_to_env().items()}
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


def _recorded_criteria(recipe: Path, env: dict[str, str], origins: dict[str, str]) -> dict[str, str]:
    """``validate`` outside the chart: criteria not stated are the recorded recipe's
    own (the run report names them; nothing is resolved from them)."""
    prefix = f"{ENV_PREFIX}CRITERIA__"
    if any(name.startswith(prefix) for name in env) or not recipe.is_file():
        return env
    from aicr_runner.aicr.recipe import recorded_criteria

    for name, value in recorded_criteria(recipe).items():
        env[prefix + name.upper()] = value
        origins[prefix + name.upper()] = f"the criteria of --recipe {recipe}"
    return env


def _paths_not_urls(args: argparse.Namespace) -> None:
    """A path flag given a URL (``--aicr-binary https://user:pw@host/aicr``) is
    refused: taken as a path under the working directory, the URL, password and
    all, would be printed by every later message that names the path."""
    import re

    from aicr_runner.errors import ConfigError
    from aicr_runner.settings.config import Invalid, problem_line

    flags: tuple[str, ...] = ("aicr_binary", "output", "results_dir", "pack_dir", "values", "recipe")
    flags += ("charts_dir", "registry_config", "hosts_toml", "to_archive", "from_archive")  # mirror's
    # mirror's --work-dir is plan's --output under another name.
    named = {"output": "work-dir"} if args.command == "mirror" else {}
    # argparse made each a Path, which writes '//' as '/': 'https://h/x' is 'https:/h/x'.
    given = {
        f"--{named.get(name, name.replace('_', '-'))}": str(getattr(args, name))
        for name in flags
        if getattr(args, name, None)
    }
    why = Invalid("a URL, not a path; give a local file or directory (download an aicr release or a pack first)")
    problems = [
        problem_line(flag, value, why) for flag, value in given.items() if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", value)
    ]
    if problems:
        raise ConfigError(problems)


def _criteria_refused_offline(settings: RunnerSettings, invocation: Invocation) -> str | None:
    """The chart's criteria check against its catalog, before anything is downloaded.

    Skipped with a pack (it may register values) and with a preinstalled aicr
    (nothing to download; that aicr decides, whatever its version).
    """
    if settings.pack.ref or invocation.pack_dir is not None or settings.aicr.binary:
        return None
    from aicr_runner.settings.criteria_catalog import refusal

    return refusal(settings.criteria.stated(), settings.aicr.version)


_CM_URI = re.compile(r"cm://[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?/[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


def _upgrade_from(args: argparse.Namespace) -> str:
    """``plan --upgrade-from``: ``cm://ns/name`` as given, or a readable recipe file
    (absolute); ConfigError otherwise, before any step runs."""
    given: str | None = getattr(args, "upgrade_from", None)
    if not given:
        return ""
    from aicr_runner.errors import ConfigError
    from aicr_runner.settings.config import Invalid, problem_line

    if given.startswith("cm://"):
        if _CM_URI.fullmatch(given):
            return given
        reason = Invalid("allowed: cm://NAMESPACE/NAME (a Kubernetes namespace and ConfigMap name)")
        raise ConfigError([problem_line("--upgrade-from", given, reason)])
    from aicr_runner.aicr.recipe import load_recipe
    from aicr_runner.errors import RecipeFormatError

    path = Path(given)
    try:
        load_recipe(path)
    except RecipeFormatError as exc:
        reason = Invalid(f"{exc.message}; give a recipe file (aicr recipe output, the recipe ConfigMap recipe.yaml)")
        raise ConfigError([problem_line("--upgrade-from", given, reason)]) from None
    return os.path.abspath(path)


def _local_pack(args: argparse.Namespace) -> Path | None:
    """``plan --pack-dir``: a local pack standing in for a pack ref; ConfigError when it is no directory."""
    pack_dir: Path | None = getattr(args, "pack_dir", None)
    if pack_dir is None:
        return None
    if not pack_dir.is_dir():
        from aicr_runner.errors import ConfigError
        from aicr_runner.settings.config import Invalid, problem_line

        state = "is not a directory" if pack_dir.exists() else "the directory does not exist"
        reason = Invalid(f"{state}; give a data pack directory with registry.yaml")
        raise ConfigError([problem_line("--pack-dir", str(pack_dir), reason)])
    # Absolute, symlinks kept: the path the user gave is the one messages show.
    return Path(os.path.abspath(pack_dir))


def _bad_input(exc: ConfigError, origins: Mapping[str, str] | None = None) -> int:
    """One line per problem on stderr (at most MAX_PROBLEMS, each bounded), naming
    the flag or values key a variable came from; exit 2."""
    from aicr_runner.errors import ExitCode
    from aicr_runner.settings.config import MAX_PROBLEMS

    if exc.report:
        print(
            "\n".join(f"aicr-runner: {line}" if i == 0 else line for i, line in enumerate(exc.problems)),
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    for problem in exc.items[:MAX_PROBLEMS]:
        origin = (origins or {}).get(problem.name)
        print(f"aicr-runner: invalid setting: {problem.line}{f' (from {origin})' if origin else ''}", file=sys.stderr)
    if len(exc.problems) > MAX_PROBLEMS:
        print(f"aicr-runner: ... and {len(exc.problems) - MAX_PROBLEMS} more problems", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)
