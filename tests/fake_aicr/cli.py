"""Entry point of the fake aicr: global flags, subcommand dispatch, exit codes."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from .catalog import DIMENSIONS, Catalog
from .log import (
    BUILD_DATE,
    COMMIT,
    EXIT_ABORTED,
    VERSION,
    Aborted,
    AicrError,
    Flag,
    Logger,
    UsageError,
    _truthy,
    go_log_error,
    legacy,
    log_style,
    parse_flags,
    skips_output,
)

USAGE = """NAME:
   aicr - AI Cluster Runtime (fake for tests)

USAGE:
   aicr [global options] command [command options]

COMMANDS:
   snapshot   Capture cluster configuration snapshot (the agent simulated)
   recipe     Generate a recipe from criteria (recipe list: the overlay catalog)
   bundle     Render a deployment bundle from a recipe
   verify     Verify a bundle's checksums and trust level
   validate   Validate a cluster against a recipe
   evidence   Publish evidence bundles
   mirror     List the images and charts a recipe needs (mirror list)
   upgrade-check  Check whether moving between two recipes is safe, per component

GLOBAL OPTIONS:
   --debug       debug logging
   --log-json    JSON logs on stderr
   --version, -v print the version
"""

_CRITERIA_FLAGS = [
    Flag(("service",), usage="Kubernetes service type"),
    Flag(("accelerator", "gpu"), usage="Accelerator/GPU type"),
    Flag(("intent",), usage="Workload intent"),
    Flag(("os",), usage="Operating system type of the GPU node"),
    Flag(("platform",), usage="Platform/framework type to include in the runtime"),
]
RECIPE_FLAGS = [
    *_CRITERIA_FLAGS,
    Flag(("nodes",), "int", usage="Number of worker/GPU nodes in the cluster"),
    Flag(("data",), usage="Path to external data directory to overlay on embedded recipe data."),
    Flag(("output", "o"), usage="output destination: file path, ConfigMap URI (cm://namespace/name), or stdout"),
    Flag(("format", "t"), default="yaml", usage="output format (json, yaml, table)"),
    Flag(("kubeconfig", "k"), usage="Path to kubeconfig file"),
    Flag(("criteria-strict",), "bool", default=False, usage="reject criteria values not in the embedded catalog"),
]
#: 1.x only (contract section 5).
LEGACY_MISSING_RECIPE_FLAGS = ("criteria-strict",)


def render_help(command: str, flags: Sequence[Flag], values: dict[str, list[str]] | None = None) -> str:
    """``aicr <command> --help`` as urfave/cli prints it: one line per flag with its
    aliases and type; a criteria flag's usage lists the values it accepts
    (``(e.g. a, b)``), as aicr's own help does."""
    rows: list[tuple[str, str]] = []
    for flag in flags:
        kind = {"str": " string", "int": " int", "list": " string", "bool": ""}[flag.kind]
        names = ", ".join(f"{'-' if len(name) == 1 else '--'}{name}{kind}" for name in flag.names)
        if flag.kind == "list":
            names += f" [ --{flag.names[0]} string ]"
        usage = flag.usage
        if values and flag.names[0] in values:
            usage += f" (e.g. {', '.join(sorted(values[flag.names[0]]))})"
        rows.append((names, usage))
    rows.append(("--help, -h", "show help"))
    width = max(len(name) for name, _ in rows)
    lines = [f"   {name.ljust(width)}  {usage}".rstrip() for name, usage in rows]
    head = f"NAME:\n   aicr {command}\n\nUSAGE:\n   aicr {command} [options]\n\n"
    if command == "recipe" and not legacy():
        head += "COMMANDS:\n   list  List the embedded (and --data) overlays: the criteria catalog\n\n"
    return head + "OPTIONS:\n" + "\n".join(lines) + "\n"


def _command_flags(command: str) -> list[Flag]:
    if command == "recipe":
        return [f for f in RECIPE_FLAGS if not (legacy() and f.names[0] in LEGACY_MISSING_RECIPE_FLAGS)]
    if command == "bundle":
        from .bundle import bundle_flags

        return bundle_flags()
    if command == "validate":
        from .validate import validate_flags

        return validate_flags()
    if command == "snapshot":
        from .snapshot import SNAPSHOT_FLAGS

        return SNAPSHOT_FLAGS
    if command == "upgrade-check":
        from .upgrade import UPGRADE_FLAGS

        return UPGRADE_FLAGS
    return []


def _print_help(command: str) -> int:
    values = Catalog.load().valid if command == "recipe" else None
    sys.stdout.write(render_help(command, _command_flags(command), values))
    return 0


def _record_environment(argv: Sequence[str]) -> None:
    """FAKE_AICR_ENV_LOG: one JSON line per invocation, so tests can see which
    credentials reached which call."""
    target = os.environ.get("FAKE_AICR_ENV_LOG")
    if not target:
        return
    watched = {
        key: value
        for key, value in os.environ.items()
        if key in ("DOCKER_CONFIG", "COSIGN_IDENTITY_TOKEN") or key.upper().startswith("AICR_RUNNER_")
    }
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"argv": list(argv), "env": watched}) + "\n")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Aborted(signal.Signals(signum).name)


def _global_flags(args: list[str]) -> tuple[bool, bool, int | None]:
    """Consume the global flags before the subcommand: (json, debug, exit now?)."""
    json_mode = _truthy(os.environ.get("AICR_LOG_JSON"))
    debug = _truthy(os.environ.get("AICR_DEBUG"))
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag == "--log-json":
            json_mode = True
        elif flag == "--debug":
            debug = True
        elif flag in ("--version", "-v"):
            print(f"aicr version {VERSION} (commit: {COMMIT}, date: {BUILD_DATE})")
            return json_mode, debug, 0
        elif flag in ("--help", "-h"):
            print(_usage())
            return json_mode, debug, 0
        else:
            sys.stderr.write(f"Incorrect Usage: flag provided but not defined: {flag}\n\n{_usage()}")
            return json_mode, debug, 1
    return json_mode, debug, None


#: The subcommands that answer ``--help`` with their flags (0.11 has no upgrade-check).
_HELP_COMMANDS = ("recipe", "bundle", "validate", "snapshot")


def main(argv: Sequence[str]) -> int:
    _record_environment(argv)
    args = list(argv)
    json_mode, debug, done = _global_flags(args)
    if done is not None:
        return done
    log = Logger(json_mode=json_mode, debug_mode=debug)
    if not args or (
        args[0] in (*_HELP_COMMANDS, *(() if legacy() else ("upgrade-check",)))
        and {"--help", "-h"} & {*args[1:2], *args[-1:]}
    ):
        return _print_help(args[0]) if args else _print_usage()
    command, rest = args[0], args[1:]
    handlers: dict[str, Callable[[list[str], Logger], int]] = {
        "recipe": cmd_recipe,
        "snapshot": _lazy("snapshot", "cmd_snapshot"),
        "bundle": _lazy("bundle", "cmd_bundle"),
        "verify": _lazy("bundle", "cmd_verify"),
        "validate": _lazy("validate", "cmd_validate"),
        "evidence": _lazy("validate", "cmd_evidence"),
        "mirror": _lazy("mirror", "cmd_mirror"),
        "upgrade-check": _lazy("upgrade", "cmd_upgrade_check"),
    }
    if legacy():
        del handlers["evidence"]  # 0.11.1: "No help topic for 'evidence'"
        del handlers["mirror"]  # 0.11.1 has no mirror command
        del handlers["upgrade-check"]  # 0.11.1 has no upgrade-check (present by v1.0.0)
    handler = handlers.get(command)
    if handler is None:
        return _unknown_command(command, rest)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return handler(rest, log)
    except UsageError as exc:
        sys.stderr.write(f"Incorrect Usage: {exc}\n")
        if legacy():
            # 0.11.1 fails before its logger exists: Go's default log line.
            sys.stderr.write("\n")
            go_log_error(str(exc), 1)
            return 1
        code, error = 1, str(exc)
    except AicrError as exc:
        code, error = exc.exit_code, str(exc)
    except Aborted as exc:
        code, error = EXIT_ABORTED, f"[INTERNAL] operation aborted: {exc}: context canceled"
    log.error("command failed", error=error, exitCode=code)
    return code


def _print_usage() -> int:
    print(_usage())
    return 0


def _usage() -> str:
    """The root help; a 0.x aicr has no ``evidence`` nor ``upgrade-check`` command to list."""
    if legacy():
        return "".join(
            line
            for line in USAGE.splitlines(keepends=True)
            if not line.startswith(("   evidence", "   mirror", "   upgrade-check"))
        )
    return USAGE


def _unknown_command(command: str, rest: list[str]) -> int:
    """What urfave/cli does with a command it does not have (0.11.1 observed):
    ``No help topic`` and exit 3; but a flag among the arguments is parsed as a
    root flag first, which is a usage error (exit 1) printed as Go's log line."""
    flag = next((arg for arg in rest if arg.startswith("-") and arg not in ("--help", "-h")), None)
    if legacy() and flag is not None:
        name = "-" + flag.lstrip("-").split("=", 1)[0]
        sys.stdout.write(_usage())
        sys.stderr.write(f"Incorrect Usage: flag provided but not defined: {name}\n\n")
        go_log_error(f"flag provided but not defined: {name}", 1)
        return 1
    if legacy() and rest[:1] in (["--help"], ["-h"]):
        go_log_error(f"No help topic for '{command}'", 1)
        return 1
    sys.stderr.write(f"No help topic for '{command}'\n")
    return 3


def _lazy(module: str, name: str) -> Callable[[list[str], Logger], int]:
    def run(args: list[str], log: Logger) -> int:
        import importlib

        handler: Callable[[list[str], Logger], int] = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        return handler(args, log)

    return run


# ---------------------------------------------------------------------------
# recipe
# ---------------------------------------------------------------------------


def cmd_recipe(args: list[str], log: Logger) -> int:
    if args and args[0] == "list":
        return cmd_recipe_list(args[1:], log)
    parsed = parse_flags(args, _command_flags("recipe"))
    for dim in DIMENSIONS:
        if parsed.counts.get(dim, 0) > 1:
            raise AicrError("INVALID_REQUEST", f"flag --{dim} can only be specified once")
    fmt = str(parsed.get("format")).lower()
    if fmt not in ("yaml", "json", "table"):
        raise AicrError("INVALID_REQUEST", f'unknown output format: "{fmt}", valid formats are: yaml, json, table')
    if not legacy():
        log.info("generating recipe offline — reads inputs only; does not deploy to or modify any cluster")
    strict = bool(parsed.get("criteria-strict")) or _truthy(os.environ.get("AICR_CRITERIA_STRICT"))
    catalog = Catalog.load(parsed.get("data"), strict=strict, log=log)
    criteria = catalog.normalise({dim: parsed.get(dim) for dim in DIMENSIONS})
    log.info(
        "building recipe from criteria",
        criteria="criteria(" + ", ".join(f"{d}={criteria[d]}" for d in DIMENSIONS) + ")",
    )
    resolution = catalog.resolve(criteria)
    document = resolution.document(parsed.get("nodes"))
    output = parsed.get("output") or ""
    text = _render_recipe(document, fmt)
    if output and skips_output("recipe"):
        pass  # a broken aicr: says it succeeded, writes nothing
    elif output:
        if output.startswith("cm://"):
            raise AicrError("INVALID_REQUEST", "the fake aicr cannot write cm:// outputs")
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise AicrError("INTERNAL", f"failed to write recipe to {output}", exc) from exc
    else:
        sys.stdout.write(text)
    names = [component["name"] for component in resolution.components]
    attrs: dict[str, Any] = {
        "output": output,
        "components": len(names),
        "overlays": len(resolution.applied),
    }
    if log_style() != "0.11":
        attrs["componentNames"] = ", ".join(names)
    log.info("recipe generation completed", **attrs)
    return 0


def _render_recipe(document: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    if fmt == "table":
        rows: list[tuple[str, ...]] = [("NAME", "NAMESPACE", "VERSION", "SOURCE")]
        rows += [(c["name"], c["namespace"], c["version"], c["source"]) for c in document["componentRefs"]]
        return _table(rows)
    return yaml.safe_dump(document, sort_keys=False)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n" for row in rows)


def cmd_recipe_list(args: list[str], log: Logger) -> int:
    parsed = parse_flags(
        args,
        [
            *_CRITERIA_FLAGS,
            Flag(("data",)),
            Flag(("format", "t"), default="table"),
            Flag(("no-health", "skip-health"), "bool", default=False),
            Flag(("criteria-strict",), "bool", default=False),
        ],
    )
    fmt = str(parsed.get("format")).lower()
    if fmt not in ("yaml", "json", "table"):
        raise AicrError("INVALID_REQUEST", f'unknown output format: "{fmt}", valid formats are: yaml, json, table')
    catalog = Catalog.load(parsed.get("data"), strict=bool(parsed.get("criteria-strict")), log=log)
    filters = {
        dim: value for dim, value in catalog.normalise({d: parsed.get(d) for d in DIMENSIONS}).items() if value != "any"
    }
    health = not parsed.get("no-health")
    entries = catalog.list_entries(filters, health=health)
    if fmt == "json":
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
    elif fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(entries, sort_keys=False))
    elif not entries:
        sys.stdout.write("(no matching overlays)\n")
    else:
        header = ["NAME", "SERVICE", "ACCELERATOR", "INTENT", "OS", "PLATFORM", "IS_LEAF"]
        if health:
            header += ["STATUS", "COVERAGE"]
        header.append("SOURCE")
        rows = [tuple(header)]
        for entry in entries:
            row = [entry["name"], *entry["criteria"].values(), "true" if entry["is_leaf"] else "false"]
            if health:
                leaf = entry["is_leaf"]
                row += [
                    entry["health"]["status"] if leaf else "-",
                    entry["health"]["coverage"] if leaf else "-",
                ]
            row.append(entry["source"])
            rows.append(tuple(row))
        sys.stdout.write(_table(rows))
        sys.stdout.write("any = wildcard (the overlay applies to every value of that dimension)\n")
    log.info("recipe list completed", overlays=len(entries))
    return 0
