"""The verdict report's writer (aicr_runner.kube.report_writer), through the step that
calls it (aicr_runner.steps.verdict_report): which API discovery picks, what is written where and when, and that a
failure is one warning line that never changes the run. The real API server:
e2e/test_reports.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aicr_runner.errors import CaptureError
from aicr_runner.kube.report_writer import ReportTarget
from aicr_runner.kube.sink import ConfigMapSink
from aicr_runner.run.machine import State
from aicr_runner.run.report import StepStatus
from aicr_runner.steps.context import RunContext
from aicr_runner.steps.table import Steps
from aicr_runner.steps.verdict_report import write_after_failed_deploy
from tests.support.fakes import FakeKubeApi
from tests.unit.steps.test_steps import StubProcesses, context, rewired, step, validated

NS = "aicr-system"
REPORT = f"/apis/openreports.io/v1alpha1/namespaces/{NS}/reports/aicr-gpu"
POLICY_REPORT = f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{NS}/policyreports/aicr-gpu"
BOTH = {"openreports.io/v1alpha1": ["reports", "clusterreports"], "wgpolicyk8s.io/v1alpha2": ["policyreports"]}


@dataclass
class FakeRequests:
    """The API as ``ClientKubeApi.request`` answers it: discovery of the ``served``
    group versions, server-side applies kept by path. ``log`` is shared with the
    ConfigMap fake, to see the order of the writes."""

    served: Mapping[str, list[str]]
    log: list[str] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse_writes: str = ""

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
    ) -> Any:
        resolved = path.format(**path_params)
        self.log.append(f"{method} {resolved}")
        assert budget_seconds == 30.0
        if method == "GET":
            assert missing_ok, "a group version that is not served is a 404, not an error"
            plurals = self.served.get(resolved.removeprefix("/apis/"))
            return None if plurals is None else {"resources": [{"name": p} for p in plurals]}
        if self.refuse_writes:
            raise CaptureError(f"{what} failed: {self.refuse_writes}")
        assert (method, content_type) == ("PATCH", "application/apply-patch+yaml")
        assert dict(query_params) == {"fieldManager": "aicr-runner", "force": "true"}
        self.objects[resolved] = body
        return None


class OrderedConfigMaps(FakeKubeApi):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def apply_configmap(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.log.append(f"configmap {name}")
        super().apply_configmap(namespace, name, **kwargs)


CTRF = {
    "reportFormat": "CTRF",
    "results": {
        "summary": {"tests": 2, "passed": 1, "failed": 1, "skipped": 0, "pending": 0, "other": 0},
        "tests": [
            {"name": "operator-health", "status": "passed", "duration": 900, "suite": ["deployment"]},
            {"name": "nccl-bw", "status": "failed", "duration": 5, "suite": ["performance"], "message": "low"},
        ],
    },
}


def run_ctx(tmp_path: Path, api: FakeRequests, *, ctrf: bool = True, evidence: bool = True, **env: str) -> Any:
    """A run whose validate and deploy ran (two components, one failed), with the
    evidence directory aicr wrote, up to the capture of the evidence."""
    settings_env = {
        "AICR_RUNNER_NAMESPACE": NS,
        "AICR_RUNNER_REPORTS__NAME": "aicr-gpu",
        "AICR_RUNNER_REPORTS__RELEASE": "gpu",
        "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "true" if evidence else "false",
        **env,
    }
    ctx = context(tmp_path, StubProcesses(), sink=ConfigMapSink(OrderedConfigMaps(api.log), NS), **settings_env)
    ctx = rewired(ctx, report_target=ReportTarget(api, NS))
    validated(ctx, 8)
    if ctrf:
        ctx.ctrf_path.write_text(json.dumps(CTRF))
    (ctx.evidence_dir / "summary-bundle").mkdir(parents=True)
    (ctx.evidence_dir / "summary-bundle" / "manifest.json").write_text("{}")
    deploy = ctx.report.step(State.DEPLOY.value)
    deploy.status = StepStatus.WARNED
    deploy.progress = {
        "components": [
            {"name": "gpu-operator", "namespace": "gpu-operator", "status": "installed", "durationSeconds": 40.0},
            {"name": "nfd", "namespace": "nfd", "status": "failed", "durationSeconds": 3.0},
        ]
    }
    ctx.report.failed_components = ["nfd"]
    return ctx


def evidence_then_report(ctx: RunContext) -> tuple[StepStatus, int, str]:
    """The evidence capture step, then the machine's next state: the verdict report."""
    captured = step(ctx, State.CAPTURE_EVIDENCE)
    assert Steps(ctx).functions()[State.VERDICT_REPORT]().went_well
    return captured


def test_the_report_is_written_after_the_evidence_with_every_check_and_component(tmp_path: Path) -> None:
    api = FakeRequests(BOTH)
    ctx = run_ctx(tmp_path, api)
    assert evidence_then_report(ctx)[0] is StepStatus.SUCCEEDED
    assert api.log == [
        "configmap aicr-evidence-bundle",
        "GET /apis/openreports.io/v1alpha1",
        f"PATCH {REPORT}",
    ]
    body = api.objects[REPORT]
    assert body["kind"] == "Report"
    assert [(r["policy"], r["category"], r["result"]) for r in body["results"]] == [
        ("operator-health", "deployment", "pass"),
        ("nccl-bw", "performance", "fail"),
        ("gpu-operator", "deploy", "pass"),
        ("nfd", "deploy", "fail"),
    ]
    assert body["summary"] == {"pass": 2, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    assert {r["properties"]["evidenceConfigMap"] for r in body["results"]} == {"aicr-evidence-bundle"}
    assert body["metadata"]["labels"]["aicr.nvidia.com/release"] == "gpu"


def test_where_only_wgpolicy_is_served_a_policyreport_is_written(tmp_path: Path) -> None:
    api = FakeRequests({"wgpolicyk8s.io/v1alpha2": ["policyreports", "clusterpolicyreports"]})
    ctx = run_ctx(tmp_path, api, evidence=False)
    evidence_then_report(ctx)
    assert api.log == [
        "GET /apis/openreports.io/v1alpha1",
        "GET /apis/wgpolicyk8s.io/v1alpha2",
        f"PATCH {POLICY_REPORT}",
    ]
    body = api.objects[POLICY_REPORT]
    assert (body["apiVersion"], body["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert "evidenceConfigMap" not in body["results"][0]["properties"], "no evidence was stored"


def test_a_group_version_without_the_report_resource_is_not_served(tmp_path: Path) -> None:
    api = FakeRequests({"openreports.io/v1alpha1": ["clusterreports"], "wgpolicyk8s.io/v1alpha2": ["policyreports"]})
    evidence_then_report(run_ctx(tmp_path, api))
    assert list(api.objects) == [POLICY_REPORT]


def test_where_neither_is_served_nothing_is_written_and_one_line_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log_events: list[dict[str, Any]]
) -> None:
    api = FakeRequests({})
    assert evidence_then_report(run_ctx(tmp_path, api))[0] is StepStatus.SUCCEEDED
    assert api.objects == {}
    out = capsys.readouterr()
    assert [line for line in (out.out + out.err).splitlines() if "report" in line] == []  # no relayed line either
    said = [event for event in log_events if "report" in str(event)]
    assert said == [
        {
            "event": "no verdict report written",
            "reason": "the cluster serves no openreports.io/v1alpha1 or wgpolicyk8s.io/v1alpha2 reports "
            "(installing the CRDs is the cluster's choice, docs/reports.md)",
            "reports_api": "auto",
            "log_level": "info",
        }
    ]


@pytest.mark.parametrize(("setting", "calls"), [("none", []), ("openreports", ["GET /apis/openreports.io/v1alpha1"])])
def test_the_setting_narrows_what_is_asked_for(tmp_path: Path, setting: str, calls: list[str]) -> None:
    api = FakeRequests({"wgpolicyk8s.io/v1alpha2": ["policyreports"]})
    evidence_then_report(run_ctx(tmp_path, api, evidence=False, AICR_RUNNER_REPORTS__API=setting))
    assert api.log == calls
    assert api.objects == {}


def test_a_refused_write_is_one_warning_and_the_step_keeps_its_outcome(
    tmp_path: Path, log_events: list[dict[str, Any]]
) -> None:
    api = FakeRequests(BOTH, refuse_writes="HTTP 403 Forbidden")
    status, exit_code, reason = evidence_then_report(run_ctx(tmp_path, api))
    assert (status, exit_code) == (StepStatus.SUCCEEDED, 0)
    assert "Evidence artifacts written" in reason
    warned = [event for event in log_events if event["event"] == "verdict report not written"]
    assert [event["log_level"] for event in warned] == ["warning"]
    assert "HTTP 403 Forbidden" in warned[0]["reason"]


def test_a_validation_without_a_ctrf_report_is_one_error_result(tmp_path: Path) -> None:
    api = FakeRequests(BOTH)
    evidence_then_report(run_ctx(tmp_path, api, ctrf=False))
    results = api.objects[REPORT]["results"]
    assert [(r["policy"], r["result"], r["message"]) for r in results[:1]] == [
        ("aicr-validate", "error", "aicr validate wrote no CTRF report: no verdict")
    ]


def test_a_run_where_neither_validate_nor_deploy_ran_asks_nothing(tmp_path: Path) -> None:
    api = FakeRequests(BOTH)
    ctx = rewired(context(tmp_path, StubProcesses(), AICR_RUNNER_NAMESPACE=NS), report_target=ReportTarget(api, NS))
    evidence_then_report(ctx)
    assert api.log == []


def test_without_a_target_plan_and_a_results_directory_write_no_report(tmp_path: Path) -> None:
    ctx = context(tmp_path, StubProcesses())
    validated(ctx, 0)
    assert ctx.externals.report_target is None
    assert evidence_then_report(ctx)[0] is StepStatus.SKIPPED


def failed_deploy_ctx(tmp_path: Path, api: FakeRequests, rows: list[dict[str, Any]], status: StepStatus) -> Any:
    ctx = context(tmp_path, StubProcesses(), AICR_RUNNER_NAMESPACE=NS, AICR_RUNNER_REPORTS__NAME="aicr-gpu")
    ctx = rewired(ctx, report_target=ReportTarget(api, NS))
    deploy = ctx.report.step(State.DEPLOY.value)
    deploy.status, deploy.progress = status, {"components": rows}
    for later in (State.VALIDATE, State.CAPTURE_VERDICT, State.PUBLISH, State.CAPTURE_EVIDENCE):
        record = ctx.report.step(later.value)  # as the machine leaves the steps it never reached
        record.status, record.message = StepStatus.SKIPPED, "not reached"
    return ctx


FAILED_INSTALL = [
    {"name": "gpu-operator", "namespace": "gpu-operator", "status": "installed"},
    {"name": "nfd", "namespace": "nfd", "status": "failed"},
]


def test_a_run_that_ends_at_a_failed_deploy_still_reports_its_components(tmp_path: Path) -> None:
    api = FakeRequests(BOTH)
    write_after_failed_deploy(failed_deploy_ctx(tmp_path, api, FAILED_INSTALL, StepStatus.FAILED))
    results = api.objects[REPORT]["results"]
    assert [(r["policy"], r["category"], r["result"]) for r in results] == [
        ("gpu-operator", "deploy", "pass"),
        ("nfd", "deploy", "fail"),
    ]


@pytest.mark.parametrize(
    ("rows", "status", "captured"),
    [
        (FAILED_INSTALL, StepStatus.INTERRUPTED, False),  # the pod is on its way out
        ([], StepStatus.FAILED, False),  # no component started (a pending release stopped it)
        (FAILED_INSTALL, StepStatus.FAILED, True),  # the captures ran and wrote it already
        (FAILED_INSTALL, StepStatus.WARNED, False),  # --best-effort: the run went on to the captures
    ],
    ids=["interrupted", "nothing-started", "captured", "went-on"],
)
def test_otherwise_the_end_of_the_run_writes_nothing_more(
    tmp_path: Path, rows: list[dict[str, Any]], status: StepStatus, captured: bool
) -> None:
    api = FakeRequests(BOTH)
    ctx = failed_deploy_ctx(tmp_path, api, rows, status)
    if captured:
        ctx.report.step(State.CAPTURE_EVIDENCE.value).started_at = datetime.now(UTC)
    write_after_failed_deploy(ctx)
    assert api.log == []


def test_a_credential_the_run_registered_never_reaches_the_report(tmp_path: Path) -> None:
    from aicr_runner import logs

    logs.register_secret("hunter2-report-token")
    api = FakeRequests(BOTH)
    ctx = run_ctx(tmp_path, api)
    leaky = json.loads(json.dumps(CTRF))
    leaky["results"]["tests"][1]["message"] = "pull with hunter2-report-token refused"
    ctx.ctrf_path.write_text(json.dumps(leaky))
    evidence_then_report(ctx)
    text = json.dumps(api.objects[REPORT])
    assert "hunter2-report-token" not in text
    assert "pull with " in text
