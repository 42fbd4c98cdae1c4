"""Every context read in parallel, each within its timeout; a failure is a row.

Per context: the verdict reports (OpenReports ``Report``, else wgpolicyk8s
``PolicyReport``) of every namespace, then the status ConfigMaps of the
namespaces that have no report. A context that cannot be reached, whose
credentials may not list these objects, or that does not answer within the
timeout is one row naming the reason; ``fleet`` never stops on one cluster.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from aicr_runner.fleet.rows import Row, rows_from_configmaps, rows_from_reports
from aicr_runner.kube.clusters import ClusterReadError

__all__ = ["MANAGED_SELECTOR", "read_context", "read_fleet"]

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=aicr-runner"
_REPORT_LISTS = (
    ("Report", "/apis/openreports.io/v1alpha1/reports"),
    ("PolicyReport", "/apis/wgpolicyk8s.io/v1alpha2/policyreports"),
)
_CONFIGMAPS = "/api/v1/configmaps"

#: ``list_objects(what, path, selector)`` of one context's client.
Lister = Callable[[str, str, str], "list[dict[str, Any]] | None"]


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
        return [Row(context=context, problem=f"{exc.kind}: {exc.message}")]
    rows += rows_from_configmaps(context, configmaps, skip={row.namespace for row in rows})
    if not rows:
        return [Row(context=context, problem="none: no aicr-runner report or status ConfigMap in any namespace")]
    return sorted(rows, key=lambda row: (row.namespace, row.release))


def read_fleet(contexts: Sequence[str], lister_for: Callable[[str], Lister], timeout: float) -> list[Row]:
    """Rows of every context, in the order given; a context still unanswered
    after ``timeout`` (plus a margin for the connection) is a timeout row."""

    def one(context: str) -> list[Row]:
        try:
            return read_context(context, lister_for(context))
        except ClusterReadError as exc:
            return [Row(context=context, problem=f"{exc.kind}: {exc.message}")]

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(16, max(1, len(contexts))))
    futures = [pool.submit(one, context) for context in contexts]
    # Each list call is bounded by ``timeout``; three of them per context, plus a margin.
    done, _ = concurrent.futures.wait(futures, timeout=3 * timeout + 5)
    pool.shutdown(wait=False, cancel_futures=True)
    rows: list[Row] = []
    for context, future in zip(contexts, futures, strict=True):
        if future in done:
            rows += future.result()
        else:
            rows.append(Row(context=context, problem=f"unreachable: no answer within {3 * timeout + 5:g}s"))
    return rows
