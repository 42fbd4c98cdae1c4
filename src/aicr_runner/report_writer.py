"""The run's verdict written to the cluster as a report object (``reports`` builds it).

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

A run whose deploy failed ends before the captures: ``write_after_failed_deploy``
writes its components at the run's end.

Advisory, after the verdict and the evidence are captured: every failure is
one warning line and never changes the run's outcome or exit code. Each call
has its own short budget, so an API outage delays the end of the run by at
most two budgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aicr_runner import logs, reports
from aicr_runner.config import ReportsApi
from aicr_runner.report import StepStatus, utcnow
from aicr_runner.reports import OPENREPORTS, WGPOLICY, Entry, ReportApi, RunFacts

if TYPE_CHECKING:
    from aicr_runner.context import RunContext

__all__ = [
    "BUDGET_SECONDS",
    "ReportTarget",
    "RequestApi",
    "choose_api",
    "entries_of",
    "write_after_failed_deploy",
    "write_report",
    "write_verdict",
]

#: Each discovery read and the write may retry this long (429, 5xx, connection errors).
BUDGET_SECONDS = 30.0
_FIELD_MANAGER = "aicr-runner"
_CANDIDATES: Mapping[ReportsApi, tuple[ReportApi, ...]] = {
    ReportsApi.AUTO: (OPENREPORTS, WGPOLICY),
    ReportsApi.OPENREPORTS: (OPENREPORTS,),
    ReportsApi.WGPOLICY: (WGPOLICY,),
    ReportsApi.NONE: (),
}
_NOT_STARTED = (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED)


@runtime_checkable
class RequestApi(Protocol):
    """``kube.ClientKubeApi.request``: one API call, retried within a budget."""

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


def entries_of(ctx: RunContext) -> list[Entry] | None:
    """The run's results: each CTRF test and each component deploy.sh reported;
    None when neither validate nor deploy ran (nothing to report)."""
    validate = ctx.report.step("validate")
    deploy = ctx.report.step("deploy")
    if validate.status in _NOT_STARTED and deploy.status in _NOT_STARTED:
        return None
    entries: list[Entry] = []
    if validate.status not in _NOT_STARTED:
        entries += _validation(ctx, interrupted=validate.status is StepStatus.INTERRUPTED)
    if deploy.status not in _NOT_STARTED:
        entries += reports.deploy_entries(deploy.progress, ctx.report.failed_components)
    return entries


def _validation(ctx: RunContext, *, interrupted: bool) -> list[Entry]:
    """The CTRF tests; one ``error`` result when there is no verdict to map."""
    why = "aicr validate was interrupted: no verdict" if interrupted else ""
    if not why and not ctx.ctrf_path.is_file():
        why = "aicr validate wrote no CTRF report: no verdict"
    if not why:
        try:
            return reports.validation_entries(ctx.ctrf_path.read_bytes())
        except (OSError, ValueError) as exc:
            why = f"the CTRF report could not be read: {exc}"
    return [Entry("aicr-validate", "aicr-validate", "validate", "error", reports.stable_message(why, "error"))]


def facts_of(ctx: RunContext, namespace: str, *, evidence_stored: bool) -> RunFacts:
    s, report = ctx.settings, ctx.report
    version = ctx.aicr_version.text if ctx.aicr_version is not None else report.aicr_version
    return RunFacts(
        name=s.reports.name,
        namespace=namespace,
        release=s.reports.release,
        aicr_version=version,
        recipe=", ".join(f"{key}={value}" for key, value in report.criteria.items() if value),
        run_by=report.run_by,
        evidence_configmap=s.validate.evidence_configmap if evidence_stored else "",
        when=utcnow(),
    )


def write_verdict(ctx: RunContext, *, evidence_stored: bool) -> None:
    """Write the run's report, if there is an API to write to and something to
    report. Never raises: a failure is one warning line."""
    target, setting = ctx.report_target, ctx.settings.reports.api
    if target is None or setting is ReportsApi.NONE:
        return
    log = logs.get_logger()
    try:
        entries = entries_of(ctx)
        if entries is None:
            return
        chosen = choose_api(target.api, setting)
        if chosen is None:
            _say_not_served(setting)
            return
        # aicr's messages, with any credential the run registered masked, as in the pod log.
        entries = [replace(entry, message=logs.redact(entry.message)) for entry in entries]
        facts = facts_of(ctx, target.namespace, evidence_stored=evidence_stored)
        body = reports.report_body(chosen, facts, entries)
        write_report(target.api, chosen, body)
    except Exception as exc:  # noqa: BLE001 - advisory: the verdict is already captured
        log.warning("verdict report not written", reason=logs.redact(str(exc)))
        return
    cut = body["metadata"]["annotations"].get(reports.CUT_ANNOTATION, "")
    log.info(
        "verdict report written",
        report=f"{chosen.kind} {target.namespace}/{facts.name}",
        results=len(body["results"]),
        **({"cut": cut} if cut else {}),
    )


def write_after_failed_deploy(ctx: RunContext) -> None:
    """A run whose deploy step failed ends before the captures: the components
    deploy.sh reported still go out (a failed install is what a fleet most needs
    to see). Not after an interruption: the pod is on its way out."""
    deploy = ctx.report.step("deploy")
    # The machine marks the steps it never reached skipped ("not reached"): never started.
    if deploy.status is not StepStatus.FAILED or ctx.report.step("capture-evidence").started_at is not None:
        return
    if reports.deploy_entries(deploy.progress, ctx.report.failed_components):
        write_verdict(ctx, evidence_stored=False)


def _say_not_served(setting: ReportsApi) -> None:
    asked = " or ".join(c.api_version for c in _CANDIDATES[setting])
    # Asked for by name, its absence is a warning; under auto, the cluster's choice.
    say = logs.get_logger().info if setting is ReportsApi.AUTO else logs.get_logger().warning
    say(
        f"no verdict report written: the cluster serves no {asked} reports (reports.api={setting.value}; "
        "installing the CRDs is the cluster's choice, docs/reports.md)"
    )
