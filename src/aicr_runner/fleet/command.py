"""``aicr-runner fleet``: the contexts chosen, read, printed; the exit code.

Exit 0 when every row is green, ``ExitCode.FLEET_NOT_GREEN`` otherwise (a
failed or stale-less verdict, an unreachable or forbidden cluster), 2 for bad
flags or an unreadable kubeconfig.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from aicr_runner.errors import ConfigError, ExitCode
from aicr_runner.fleet.read import Lister, read_fleet
from aicr_runner.fleet.rows import is_green, render_json, render_table
from aicr_runner.kube.clusters import client_for_context, context_names, list_objects

__all__ = ["MAX_TIMEOUT_SECONDS", "chosen_contexts", "run_fleet"]

MAX_TIMEOUT_SECONDS = 300.0


def chosen_contexts(kubeconfig: str | None, given: Sequence[str], every: bool) -> list[str]:
    """The contexts to read: those given, all of the kubeconfig's, or its current one."""
    known = context_names(kubeconfig)
    if every:
        return list(known.names)
    if not given:
        if not known.current:
            raise ConfigError(["--context: the kubeconfig has no current context; name one or give --all-contexts"])
        return [known.current]
    unknown = [name for name in given if name not in known.names]
    if unknown:
        allowed = ", ".join(known.names) or "none"
        raise ConfigError(
            [f"--context={name}: no such context in the kubeconfig (it has: {allowed})" for name in unknown]
        )
    return list(dict.fromkeys(given))


def run_fleet(kubeconfig: str | None, contexts: Sequence[str], timeout: float, output: str) -> int:
    def lister_for(context: str) -> Lister:
        api = client_for_context(kubeconfig, context, timeout)
        return lambda what, path, selector: list_objects(api, what, path, selector)

    rows = read_fleet(contexts, lister_for, timeout)
    now = datetime.now(UTC)
    print(render_json(rows, now) if output == "json" else render_table(rows, now), file=sys.stdout)
    return int(ExitCode.OK) if rows and all(is_green(row) for row in rows) else int(ExitCode.FLEET_NOT_GREEN)
