"""Every context read at once, each by its own deadline; a failure is a row.

Per context: the verdict reports (OpenReports ``Report``, else wgpolicyk8s
``PolicyReport``) of every namespace, then the status ConfigMaps of the
namespaces that have no report. A context that cannot be reached, whose
credentials may not list these objects, that does not answer by its deadline,
or that answers with objects that make no sense is one row naming the reason;
``fleet`` never stops on one cluster.

Each context is read in a daemon thread of its own, started at once, so every
context gets the whole ``--timeout`` (a cluster that hangs does not take time
from the others) and the table is printed about one timeout after the start
whatever hangs: a thread still waiting then is left behind, and being a daemon
it never holds up the exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from aicr_runner.fleet.rows import Row, rows_from_configmaps, rows_from_reports
from aicr_runner.kube.clusters import ClusterReadError

__all__ = ["MANAGED_SELECTOR", "Lister", "read_context", "read_fleet"]

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=aicr-runner"
_REPORT_LISTS = (
    ("Report", "/apis/openreports.io/v1alpha1/reports"),
    ("PolicyReport", "/apis/wgpolicyk8s.io/v1alpha2/policyreports"),
)
_CONFIGMAPS = "/api/v1/configmaps"
#: Past its deadline, how long a context's thread may take to say why it gave up
#: (a request stopped at the deadline needs about a second to report it).
_MARGIN_SECONDS = 2.0

#: ``list_objects(what, path, selector)`` of one context's client.
Lister = Callable[[str, str, str], "list[Any] | None"]


def read_context(context: str, lister: Lister) -> list[Row]:
    rows: list[Row] = []
    try:
        for kind, path in _REPORT_LISTS:
            reports = lister(f"{kind}s", path, MANAGED_SELECTOR)
            if reports:
                rows = rows_from_reports(context, kind, reports)
                break
        configmaps = lister("ConfigMaps", _CONFIGMAPS, MANAGED_SELECTOR) or []
    except ClusterReadError as exc:
        return [Row(context=context, problem_kind=exc.kind, problem_detail=exc.message)]
    rows += rows_from_configmaps(context, configmaps, skip={row.namespace for row in rows})
    if not rows:
        return [
            Row(
                context=context,
                problem_kind="none",
                problem_detail="no aicr-runner report or status ConfigMap in any namespace",
            )
        ]
    return sorted(rows, key=lambda row: (row.namespace, row.release))


def read_fleet(contexts: Sequence[str], read_one: Callable[[str, float], list[Row]], timeout: float) -> list[Row]:
    """Rows of every context, in the order given. ``read_one(context, deadline)``
    reads one context by ``deadline`` (``time.monotonic``); a context still
    unanswered a moment after it is a row saying so."""
    deadline = time.monotonic() + timeout
    outcomes: list[list[Row] | None] = [None] * len(contexts)
    finished = [threading.Event() for _ in contexts]

    def one(index: int) -> None:
        try:
            outcomes[index] = _read_one_safely(contexts[index], read_one, deadline)
        finally:
            finished[index].set()

    for index, context in enumerate(contexts):
        threading.Thread(target=one, args=(index,), name=f"fleet {context[:40]}", daemon=True).start()
    rows: list[Row] = []
    for index, context in enumerate(contexts):
        finished[index].wait(max(0.0, deadline + _MARGIN_SECONDS - time.monotonic()))
        outcome = outcomes[index]
        rows += (
            outcome
            if outcome is not None
            else [Row(context, problem_kind="unreachable", problem_detail=f"no answer within {timeout:g}s")]
        )
    return rows


def _read_one_safely(context: str, read_one: Callable[[str, float], list[Row]], deadline: float) -> list[Row]:
    """One context's rows; whatever it raises is its row, never the table's end."""
    try:
        return read_one(context, deadline)
    except ClusterReadError as exc:
        return [Row(context=context, problem_kind=exc.kind, problem_detail=exc.message)]
    except Exception as exc:  # noqa: BLE001 - one cluster's surprise is one row, never a traceback
        return [
            Row(
                context=context,
                problem_kind="error",
                problem_detail=f"reading this context failed ({type(exc).__name__})",
            )
        ]
