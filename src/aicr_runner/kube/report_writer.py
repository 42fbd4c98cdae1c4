"""The run's verdict written to the cluster as a report object (``kube.openreports`` builds it).

Which API is found by discovery: ``reports.api`` ``auto`` takes OpenReports
(``openreports.io/v1alpha1`` ``reports``) where it is served, else
``wgpolicyk8s.io/v1alpha2`` ``policyreports``, else writes nothing and says so
in one log line; ``openreports`` or ``wgpolicy`` asks for that one only;
``none`` writes nothing. Installing the CRDs is the cluster's choice
(docs/reports.md).

The object is written with server-side apply, under one name per release,
with no ownerReference: it outlives the Job and the pod (a report owned by its
Job disappears with it), and each run replaces its results (the ``results``
list is atomic in both CRDs).

What a run reports, and when, is ``steps.verdict_report``'s: after the last
capture, or at the end of a run whose deploy failed. Advisory: it turns every
failure here into one warning line that never changes the run's outcome or
exit code. Each call has its own short budget, so an API outage delays the end
of the run by at most two budgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from aicr_runner import logs
from aicr_runner.kube import openreports
from aicr_runner.kube.openreports import OPENREPORTS, WGPOLICY, Entry, ReportApi, RunFacts
from aicr_runner.settings.config import ReportsApi

__all__ = [
    "BUDGET_SECONDS",
    "ReportTarget",
    "RequestApi",
    "choose_api",
    "served",
    "write",
    "write_report",
]

log = logs.get_logger()

#: Each discovery read and the write may retry this long (429, 5xx, connection errors).
BUDGET_SECONDS = 30.0
_FIELD_MANAGER = "aicr-runner"
_CANDIDATES: Mapping[ReportsApi, tuple[ReportApi, ...]] = {
    ReportsApi.AUTO: (OPENREPORTS, WGPOLICY),
    ReportsApi.OPENREPORTS: (OPENREPORTS,),
    ReportsApi.WGPOLICY: (WGPOLICY,),
    ReportsApi.NONE: (),
}


@runtime_checkable
class RequestApi(Protocol):
    """``kube.api.ClientKubeApi.request``: one API call, retried within a budget."""

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        path_params: Mapping[str, str],
        query_params: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
        body: Any = None,
        response_type: str | None = None,
        missing_ok: bool = False,
        budget_seconds: float | None = None,
    ) -> Any: ...


@dataclass(frozen=True)
class ReportTarget:
    """Where a Job run writes its report: the cluster's API and the release namespace."""

    api: RequestApi
    namespace: str


def served(api: RequestApi, candidate: ReportApi) -> bool:
    """The API server serves ``candidate``'s resource (its group version's discovery document lists it)."""
    document = api.request(
        f"discovering {candidate.api_version}",
        "GET",
        "/apis/{group}/{version}",
        path_params={"group": candidate.group, "version": candidate.version},
        response_type="object",
        missing_ok=True,
        budget_seconds=BUDGET_SECONDS,
    )
    resources = (document or {}).get("resources") or []
    return any(isinstance(r, dict) and r.get("name") == candidate.plural for r in resources)


def choose_api(api: RequestApi, setting: ReportsApi) -> ReportApi | None:
    """The first of the setting's candidates the API server serves; None: none is."""
    return next((candidate for candidate in _CANDIDATES[setting] if served(api, candidate)), None)


def write_report(api: RequestApi, chosen: ReportApi, body: Mapping[str, Any]) -> None:
    """Server-side apply of the whole report (created by the first run, replaced by the next)."""
    meta = body["metadata"]
    api.request(
        f"writing {chosen.kind} {meta['namespace']}/{meta['name']}",
        "PATCH",
        "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
        path_params={
            "group": chosen.group,
            "version": chosen.version,
            "namespace": meta["namespace"],
            "plural": chosen.plural,
            "name": meta["name"],
        },
        query_params=[("fieldManager", _FIELD_MANAGER), ("force", "true")],
        content_type="application/apply-patch+yaml",
        body=dict(body),
        budget_seconds=BUDGET_SECONDS,
    )


def write(target: ReportTarget, setting: ReportsApi, facts: RunFacts, entries: Sequence[Entry]) -> None:
    """Write ``entries`` as the report ``facts`` names, to the first API of the
    setting's that is served; one log line says what was written, or that no
    API was served. An API error is raised (the caller makes it a warning)."""
    chosen = choose_api(target.api, setting)
    if chosen is None:
        _say_not_served(setting)
        return
    # aicr's messages, with any credential the run registered masked, as in the pod log.
    masked = [replace(entry, message=logs.redact(entry.message)) for entry in entries]
    body = openreports.report_body(chosen, facts, masked)
    write_report(target.api, chosen, body)
    cut = body["metadata"]["annotations"].get(openreports.CUT_ANNOTATION, "")
    log.info(
        "verdict report written",
        report=f"{chosen.kind} {target.namespace}/{facts.name}",
        results=len(body["results"]),
        **({"cut": cut} if cut else {}),
    )


def _say_not_served(setting: ReportsApi) -> None:
    asked = " or ".join(c.api_version for c in _CANDIDATES[setting])
    # Asked for by name, its absence is a warning; under auto, the cluster's choice.
    say = log.info if setting is ReportsApi.AUTO else log.warning
    say(
        "no verdict report written",
        reason=f"the cluster serves no {asked} reports (installing the CRDs is the cluster's choice, docs/reports.md)",
        reports_api=setting.value,
    )
