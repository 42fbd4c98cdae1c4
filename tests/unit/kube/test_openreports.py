"""The verdict as an OpenReports Report / wgpolicyk8s PolicyReport (aicr_runner.kube.openreports):
the CTRF and deploy mapping, stable messages and result IDs, the size bound, and
every body checked against the real CRDs' OpenAPI schemas (the reports-api and
Kyverno modules' CRD YAML, scripts/bootstrap-tools.sh report-crds)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from aicr_runner.kube import openreports as reports
from aicr_runner.kube.openreports import OPENREPORTS, WGPOLICY, Entry, ReportApi, RunFacts
from e2e.tools import report_crds

WHEN = datetime(2026, 12, 5, 9, 30, 15, tzinfo=UTC)
FACTS = RunFacts(
    name="aicr-gpu",
    namespace="aicr-system",
    release="gpu",
    aicr_version="v1.2.0",
    recipe="service=eks, accelerator=h100, intent=training",
    run_by="gpu-install-0123456789/gpu-install-0123456789-abcde",
    evidence_configmap="aicr-evidence-bundle",
    when=WHEN,
)


def ctrf(tests: list[dict[str, Any]]) -> bytes:
    counts = {s: sum(1 for t in tests if t["status"] == s) for s in ("passed", "failed", "skipped", "pending", "other")}
    summary = {"tests": len(tests), **counts, "start": 1764927000000, "stop": 1764927060000}
    return json.dumps(
        {
            "reportFormat": "CTRF",
            "specVersion": "0.0.1",
            "results": {"tool": {"name": "aicr"}, "summary": summary, "tests": tests},
        }
    ).encode()


def check(
    name: str, status: str, *, phase: str = "deployment", message: str = "", duration: int = 1200
) -> dict[str, Any]:
    return {"name": name, "status": status, "duration": duration, "suite": [phase], "message": message, "stdout": []}


def sixteen_checks() -> bytes:
    """A verdict shaped like aicr's: 16 checks over three phases, aicr's own words."""
    tests = [check(f"deployment-check-{i:02d}", "passed", message=f"check passed in {i}.{i}s") for i in range(8)] + [
        check(
            "nccl-all-reduce-bw",
            "failed",
            phase="performance",
            message="bus bandwidth 310 GB/s < 400 GB/s (took 2m13s)",
        ),
        check("dcgm-diag-l2", "passed", phase="performance"),
        check("gpu-operator-ready", "other", message="validator crashed at 2026-12-05T09:31:02Z: OOMKilled"),
        check("karpenter-nodepool", "skipped", message='SKIP reason="Karpenter not found"', duration=0),
        *(check(f"conformance-{i}", "passed", phase="conformance") for i in range(3)),
        check("dra-driver", "pending", phase="conformance", duration=0),
    ]
    assert len(tests) == 16
    return ctrf(tests)


def fifty_components(failed: frozenset[str] = frozenset({"acme-c17", "acme-c42"})) -> dict[str, Any]:
    rows = [
        {
            "name": f"acme-c{i:02d}",
            "namespace": f"acme-ns-{i:02d}",
            "status": "failed" if f"acme-c{i:02d}" in failed else "installed",
            "attempts": 1,
            "durationSeconds": 12.5 + i,
        }
        for i in range(50)
    ]
    return {"total": 50, "done": 50, "installed": 50 - len(failed), "failed": len(failed), "components": rows}


# -- the mapping ---------------------------------------------------------------------


def test_ctrf_statuses_map_to_report_results_and_the_phase_is_the_category() -> None:
    raw = ctrf(
        [
            check("a", "passed"),
            check("b", "failed"),
            check("c", "skipped"),
            check("d", "pending"),
            check("e", "other", phase="performance"),
        ]
    )
    entries = reports.validation_entries(raw)
    assert [(e.policy, e.rule, e.result, e.category) for e in entries] == [
        ("a", "a", "pass", "deployment"),
        ("b", "b", "fail", "deployment"),
        ("c", "c", "skip", "deployment"),
        ("d", "d", "skip", "deployment"),
        ("e", "e", "error", "performance"),
    ]
    assert entries[0].extra == {"ctrfStatus": "passed", "durationMs": "1200"}


def test_a_test_with_an_unknown_status_is_an_error_and_a_document_that_is_not_ctrf_is_refused() -> None:
    assert [e.result for e in reports.validation_entries(ctrf([check("x", "exploded")]))] == ["error"]
    with pytest.raises(ValueError, match="not a CTRF report"):
        reports.validation_entries(b'{"results": 3}')


def test_messages_lose_times_and_durations_and_an_empty_one_says_the_outcome() -> None:
    assert reports.stable_message("bus 310 GB/s (took 2m13s) at 2026-12-05T09:31:02.123Z", "fail") == (
        "bus 310 GB/s (took <duration>) at <time>"
    )
    assert reports.stable_message("done in 350ms\n  at 09:31:02", "pass") == "done in <duration> at <time>"
    assert reports.stable_message("8 GPUs on h100 nodes, 80Gi each", "pass") == "8 GPUs on h100 nodes, 80Gi each"
    assert reports.stable_message("  ", "error") == "crashed or never started"
    assert len(reports.stable_message("x" * 5000, "fail")) == reports.MAX_MESSAGE_CHARS


def _results(raw: bytes, facts: RunFacts = FACTS) -> list[dict[str, Any]]:
    body = reports.report_body(OPENREPORTS, facts, reports.validation_entries(raw))
    return list(body["results"])


def test_a_second_run_with_the_same_outcomes_gives_the_same_messages_and_result_ids() -> None:
    first = _results(sixteen_checks())
    # Another run: other durations, times and pod, the same outcomes.
    later = (
        sixteen_checks().replace(b"2m13s", b"1m58s").replace(b"09:31:02", b"10:02:47").replace(b"in 3.3s", b"in 4.1s")
    )
    rerun = _results(later, RunFacts(**{**FACTS.__dict__, "run_by": "gpu-install-x/gpu-install-x-zzzzz"}))
    assert [(r["message"], r["properties"]["resultID"]) for r in first] == [
        (r["message"], r["properties"]["resultID"]) for r in rerun
    ]
    assert first[8]["message"] == "bus bandwidth 310 GB/s < 400 GB/s (took <duration>)"


def test_a_pass_to_fail_flip_is_a_new_result_id_and_another_release_never_shares_one() -> None:
    passing = _results(ctrf([check("nccl", "passed")]))[0]["properties"]["resultID"]
    failing = _results(ctrf([check("nccl", "failed")]))[0]["properties"]["resultID"]
    other_release = _results(ctrf([check("nccl", "passed")]), RunFacts(**{**FACTS.__dict__, "name": "aicr-other"}))
    assert len({passing, failing, other_release[0]["properties"]["resultID"]}) == 3
    assert passing == _results(ctrf([check("nccl", "passed", duration=99)]))[0]["properties"]["resultID"]


def test_every_component_is_a_deploy_result_and_one_named_only_by_the_failure_report_fails() -> None:
    progress = {
        "components": [
            {"name": "cert-manager", "namespace": "cert-manager", "status": "installed", "durationSeconds": 3.2},
            {"name": "gpu-operator", "namespace": "gpu-operator", "status": "failed", "durationSeconds": 300.0},
            {"name": "nfd", "namespace": "nfd", "status": "interrupted", "durationSeconds": None},
        ]
    }
    entries = reports.deploy_entries(progress, ["gpu-operator", "aws-efa"])
    assert [(e.policy, e.rule, e.category, e.result) for e in entries] == [
        ("cert-manager", "install", "deploy", "pass"),
        ("gpu-operator", "install", "deploy", "fail"),
        ("nfd", "install", "deploy", "error"),
        ("aws-efa", "install", "deploy", "fail"),
    ]
    assert entries[0].extra == {"namespace": "cert-manager", "deployStatus": "installed", "durationSeconds": "3.2"}
    assert reports.deploy_entries(None, []) == []


def test_the_report_carries_source_labels_the_last_run_and_the_run_facts_and_no_owner() -> None:
    entries = [*reports.validation_entries(sixteen_checks()), *reports.deploy_entries(fifty_components(), [])]
    body = reports.report_body(OPENREPORTS, FACTS, entries)
    meta = body["metadata"]
    assert (body["apiVersion"], body["kind"], meta["name"], meta["namespace"]) == (
        "openreports.io/v1alpha1",
        "Report",
        "aicr-gpu",
        "aicr-system",
    )
    assert "ownerReferences" not in meta
    assert meta["labels"] == {
        "app.kubernetes.io/name": "nvidia-aicr",
        "app.kubernetes.io/managed-by": "aicr-runner",
        "aicr.nvidia.com/release": "gpu",
    }
    assert meta["annotations"] == {"aicr.nvidia.com/last-run": "2026-12-05T09:30:15Z"}
    assert body["source"] == "aicr"
    assert {r["source"] for r in body["results"]} == {"aicr"}
    assert body["summary"] == {"pass": 60, "fail": 3, "warn": 0, "error": 1, "skip": 2}
    assert body["configuration"] == {"limits": {"maxResults": reports.MAX_RESULTS}}
    props = body["results"][0]["properties"]
    assert {k: props[k] for k in ("aicrVersion", "recipe", "runBy", "evidenceConfigMap", "durationMs")} == {
        "aicrVersion": "v1.2.0",
        "recipe": "service=eks, accelerator=h100, intent=training",
        "runBy": "gpu-install-0123456789/gpu-install-0123456789-abcde",
        "evidenceConfigMap": "aicr-evidence-bundle",
        "durationMs": "1200",
    }
    assert body["results"][-1]["category"] == "deploy"


def test_a_policyreport_has_no_report_level_source_or_configuration() -> None:
    body = reports.report_body(WGPOLICY, FACTS, reports.validation_entries(sixteen_checks()))
    assert (body["apiVersion"], body["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert "source" not in body
    assert "configuration" not in body
    assert {r["source"] for r in body["results"]} == {"aicr"}


# -- bounded ---------------------------------------------------------------------------


def test_over_the_result_cap_failing_results_are_kept_first_and_the_cut_is_said() -> None:
    tests = [check(f"p{i:03d}", "passed") for i in range(650)] + [check("late-failure", "failed")]
    body = reports.report_body(OPENREPORTS, FACTS, reports.validation_entries(ctrf(tests)))
    assert len(body["results"]) == reports.MAX_RESULTS
    assert body["results"][-1]["policy"] == "late-failure", "kept, in its place"
    assert body["summary"]["pass"] == 650, "the summary counts every result"
    assert body["metadata"]["annotations"][reports.CUT_ANNOTATION] == (
        "151 of 651 results left out (151 pass): at most 500 results and 1000000 bytes, failing ones first; "
        "the summary counts all of them"
    )


def test_over_the_byte_budget_results_are_cut_before_the_object_nears_etcds_limit() -> None:
    long = "x" * 5000  # every message is cut to MAX_MESSAGE_CHARS; long names are not
    tests = [check(f"{'n' * 4000}-{i}", "failed", message=long) for i in range(400)]
    body = reports.report_body(OPENREPORTS, FACTS, reports.validation_entries(ctrf(tests)))
    size = len(json.dumps(body).encode())
    assert size <= reports.MAX_BODY_BYTES < 1_572_864
    assert 0 < len(body["results"]) < 400
    assert "of 400 results left out" in body["metadata"]["annotations"][reports.CUT_ANNOTATION]


def test_the_size_of_a_16_check_verdict_and_a_50_component_deploy(capsys: pytest.CaptureFixture[str]) -> None:
    """The closing note's figures (printed with -s): bytes of the JSON body applied."""
    verdict = reports.validation_entries(sixteen_checks())
    deploy = reports.deploy_entries(fifty_components(), [])
    sizes = {
        "16 checks": len(json.dumps(reports.report_body(OPENREPORTS, FACTS, verdict), separators=(",", ":")).encode()),
        "50 components": len(
            json.dumps(reports.report_body(OPENREPORTS, FACTS, deploy), separators=(",", ":")).encode()
        ),
        "both": len(
            json.dumps(reports.report_body(OPENREPORTS, FACTS, [*verdict, *deploy]), separators=(",", ":")).encode()
        ),
    }
    with capsys.disabled():
        print(f"\nreport sizes (bytes of JSON): {sizes}")
    # Far below the 1.5 MiB etcd limit, and nothing was cut.
    assert sizes["both"] < 64 * 1024
    assert sizes["16 checks"] + sizes["50 components"] > sizes["both"]


# -- against the real CRDs' schemas -----------------------------------------------------


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (the API server prunes them
    silently, which would hide a misspelt field) everywhere but metadata."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for key, value in node.items():
                if key != "metadata":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _crd_schema(path: Path, version: str) -> Any:
    crd = yaml.safe_load(path.read_text())
    served = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert served, f"{path.name} has no version {version}"
    return _strict(served[0]["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize(
    ("api", "crd"),
    [
        (OPENREPORTS, "openreports/openreports.io_reports.yaml"),
        (WGPOLICY, "wgpolicy/wgpolicyk8s.io_policyreports.yaml"),
    ],
    ids=["openreports", "wgpolicy"],
)
def test_every_report_written_meets_the_crds_schema(api: ReportApi, crd: str) -> None:
    schema = _crd_schema(report_crds() / crd, api.version)
    entries = [*reports.validation_entries(sixteen_checks()), *reports.deploy_entries(fifty_components(), ["x"])]
    cut = [Entry(f"p{i}", f"p{i}", "deployment", "pass", "passed") for i in range(600)]
    for body in (
        reports.report_body(api, FACTS, entries),
        reports.report_body(api, FACTS, []),
        reports.report_body(api, RunFacts(**{**FACTS.__dict__, "release": ""}), cut),
    ):
        jsonschema.Draft7Validator(schema).validate(body)


def test_the_strict_schema_catches_what_the_api_server_would_drop_or_refuse() -> None:
    """The check above can fail: a field the CRD lacks and a result outside its enum are refused."""
    schema = _crd_schema(report_crds() / "wgpolicy/wgpolicyk8s.io_policyreports.yaml", "v1alpha2")
    body = reports.report_body(OPENREPORTS, FACTS, reports.validation_entries(sixteen_checks()))
    with pytest.raises(jsonschema.ValidationError, match="'configuration', 'source' were unexpected"):
        jsonschema.Draft7Validator(schema).validate(body)
    body = reports.report_body(WGPOLICY, FACTS, [Entry("a", "a", "deployment", "passed", "ok")])
    with pytest.raises(jsonschema.ValidationError, match="'passed' is not one of"):
        jsonschema.Draft7Validator(schema).validate(body)


def test_the_regressed_checks_are_an_annotation_only_when_some_regressed() -> None:
    body = reports.report_body(OPENREPORTS, FACTS, [])
    assert reports.REGRESSED_ANNOTATION not in body["metadata"]["annotations"]
    regressed = RunFacts(**{**FACTS.__dict__, "regressed": ("operator-health", "gpu-operator-version")})
    body = reports.report_body(OPENREPORTS, regressed, [])
    assert body["metadata"]["annotations"][reports.REGRESSED_ANNOTATION] == "operator-health,gpu-operator-version"
    many = RunFacts(**{**FACTS.__dict__, "regressed": tuple(f"check-{i:04d}" for i in range(400))})
    value = reports.report_body(OPENREPORTS, many, [])["metadata"]["annotations"][reports.REGRESSED_ANNOTATION]
    assert len(value) == 1024
    assert value.endswith("...")
