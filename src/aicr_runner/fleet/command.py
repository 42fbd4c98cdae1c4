"""``aicr-runner fleet``: the contexts chosen, read, printed; the exit code.

Exit 0 when every row is green, ``ExitCode.FLEET_NOT_GREEN`` otherwise (a
failed or stale-less verdict, an unreachable or forbidden cluster), 2 for bad
flags or an unusable kubeconfig (``kube.kubeconfig``: one line naming it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from aicr_runner.errors import ConfigError, ExitCode
from aicr_runner.fleet.read import read_context, read_fleet
from aicr_runner.fleet.rows import Row, is_green, render_json, render_table
from aicr_runner.kube.clusters import client_for_context, list_objects
from aicr_runner.kube.kubeconfig import Kubeconfig, register_credentials

__all__ = ["MAX_TIMEOUT_SECONDS", "chosen_contexts", "run_fleet"]

MAX_TIMEOUT_SECONDS = 300.0


def chosen_contexts(config: Kubeconfig, given: Sequence[str], every: bool) -> list[str]:
    """The contexts to read: those given, all of the kubeconfig's, or its current one."""
    known = list(config.contexts)
    if every:
        return known
    if not given:
        if not config.current:
            raise ConfigError(["--context: the kubeconfig has no current context; name one or give --all-contexts"])
        if config.current not in config.contexts:
            raise ConfigError([f"current-context {config.current[:100]!r}: no such context in the kubeconfig"])
        return [config.current]
    unknown = [name for name in given if name not in config.contexts]
    if unknown:
        allowed = ", ".join(known)[:500] or "none"
        raise ConfigError(
            [f"--context={name[:100]}: no such context in the kubeconfig (it has: {allowed})" for name in unknown]
        )
    return list(dict.fromkeys(given))


def run_fleet(config: Kubeconfig, contexts: Sequence[str], timeout: float, output: str) -> int:
    def read_one(context: str, deadline: float) -> list[Row]:
        api = client_for_context(config, context, deadline)
        return read_context(
            context,
            lambda what, path, selector: list_objects(api, what, path, selector, deadline=deadline, timeout=timeout),
        )

    register_credentials(config, contexts)
    rows = read_fleet(contexts, read_one, timeout)
    now = datetime.now(UTC)
    print(render_json(rows, now) if output == "json" else render_table(rows, now), file=sys.stdout)
    sys.stdout.flush()
    return int(ExitCode.OK) if rows and all(is_green(row) for row in rows) else int(ExitCode.FLEET_NOT_GREEN)
