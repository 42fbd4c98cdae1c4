"""Every row of the deploy/validate/verify tables, and the deploy.sh line scanner."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from aicr_runner.aicr.classify import (
    Classification,
    CtrfVerdict,
    DeployMarkers,
    Outcome,
    UnreadableReport,
    classify_ctrf,
    classify_deploy,
    classify_validate,
    classify_verify,
)
from aicr_runner.errors import ExitCode

S, W, F, NONE_RAN = Outcome.SUCCEEDED, Outcome.WARNED, Outcome.FAILED, Outcome.INCONCLUSIVE

# (exit, failure_report, dra_deferred, best_effort) -> (outcome, job exit code)
DEPLOY_TABLE: dict[tuple[int, bool, bool, bool], tuple[Outcome, int]] = {
    # exit 0: clean, or a failure report that --best-effort tolerates
    (0, False, False, False): (S, 0),
    (0, False, False, True): (S, 0),
    (0, True, False, True): (W, 0),
    (0, True, True, True): (W, 0),
    (0, True, False, False): (F, 1),
    (0, True, True, False): (F, 1),
    (0, False, True, False): (W, 0),
    (0, False, True, True): (W, 0),
    # exit 2: continue only with the DRA line, no failure report, --best-effort
    (2, False, True, True): (W, 0),
    (2, False, True, False): (F, 2),
    (2, True, True, True): (F, 2),
    (2, True, True, False): (F, 2),
    (2, False, False, True): (F, 2),
    (2, False, False, False): (F, 2),
    (2, True, False, True): (F, 2),
    (2, True, False, False): (F, 2),
}


def test_the_deploy_table_covers_every_combination_for_exit_0_and_2() -> None:
    combos = {(code, *flags) for code in (0, 2) for flags in itertools.product((False, True), repeat=3)}
    assert set(DEPLOY_TABLE) == combos


@pytest.mark.parametrize(("row", "expected"), list(DEPLOY_TABLE.items()), ids=str)
def test_deploy_exit_0_and_2(row: tuple[int, bool, bool, bool], expected: tuple[Outcome, int]) -> None:
    code, report, dra, best_effort = row
    result = classify_deploy(code, failure_report=report, dra_deferred=dra, best_effort=best_effort)
    assert (result.outcome, result.exit_code) == expected
    assert result.interrupted is False
    assert result.reason


@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=3)), ids=str)
@pytest.mark.parametrize("code", [1, 3, 126, 127, 137, 143, 255])
def test_deploy_other_codes_fail_with_that_code(code: int, flags: tuple[bool, bool, bool]) -> None:
    report, dra, best_effort = flags
    result = classify_deploy(code, failure_report=report, dra_deferred=dra, best_effort=best_effort)
    assert (result.outcome, result.exit_code, result.interrupted) == (F, code, False)


@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=3)), ids=str)
def test_deploy_130_is_an_interruption(flags: tuple[bool, bool, bool]) -> None:
    report, dra, best_effort = flags
    result = classify_deploy(130, failure_report=report, dra_deferred=dra, best_effort=best_effort)
    assert result == Classification(F, 130, result.reason, interrupted=True)
    assert "interrupted" in result.reason


def test_deploy_reasons_name_the_cause() -> None:
    assert "--best-effort" in classify_deploy(0, failure_report=True, dra_deferred=False, best_effort=False).reason
    assert "DRA" in classify_deploy(2, failure_report=False, dra_deferred=True, best_effort=True).reason
    assert "not found" in classify_deploy(127, failure_report=False, dra_deferred=False, best_effort=False).reason


@pytest.mark.parametrize(
    ("code", "outcome", "job_code", "words"),
    [
        (0, S, 0, "passed"),
        (2, F, 2, "readiness pre-flight"),
        (5, F, 5, "timed out"),
        (8, F, 8, "failed or were inconclusive"),
        (9, F, 9, "aborted"),
        (1, F, 1, "unexpected"),
        (3, F, 3, "unexpected"),
        (137, F, 137, "unexpected"),
    ],
)
def test_validate(code: int, outcome: Outcome, job_code: int, words: str) -> None:
    result = classify_validate(code)
    assert (result.outcome, result.exit_code) == (outcome, job_code)
    assert words in result.reason
    assert result.interrupted is (code == 9)


@pytest.mark.parametrize(
    ("code", "outcome", "words"),
    [
        (0, S, "verified"),
        (4, F, "integrity"),
        (2, F, "trust policy"),
        (3, F, "does not exist"),
        (8, F, "unexpected"),
        (1, F, "unexpected"),
    ],
)
def test_verify(code: int, outcome: Outcome, words: str) -> None:
    result = classify_verify(code)
    assert (result.outcome, result.exit_code) == (outcome, code)
    assert words in result.reason


# ---------------------------------------------------------------------------
# DeployMarkers
# ---------------------------------------------------------------------------

V1_BEST_EFFORT_RUN = """
══ Pre-flight checks ══════════════════════════════════════════════
✓ Pre-flight checks passed

┌─ [1/3] cert-manager  →  cert-manager
│  Manual (approx): cd /b/001-cert-manager && bash install.sh
└─ ✓ cert-manager installed

┌─ [2/3] nfd  →  node-feature-discovery
Error: INSTALLATION FAILED: nfd
  ↺ nfd: attempt 1/1 failed, retrying in 5s...
└─ ✗ nfd FAILED (after 2 attempts)
⚠ nfd install failed, continuing (--best-effort)

┌─ [3/3] nvidia-dra-driver-gpu  →  nvidia-dra-driver
└─ ✓ nvidia-dra-driver-gpu installed
  Skipping DRA kubelet plugin restart (driver migration gate not yet reached)
✗ Deployment completed with failures (--best-effort): nfd
⚠ DRA kubelet plugin restart blocked, retry needed for: nvidia-dra-driver-gpu — re-run this deploy once ...

NOTE: The above status reflects Helm install and manifest apply results,
"""


def feed_all(text: str) -> DeployMarkers:
    markers = DeployMarkers()
    for line in text.splitlines():
        markers.feed(line)
    return markers


def test_markers_from_a_1x_best_effort_run() -> None:
    markers = feed_all(V1_BEST_EFFORT_RUN)
    assert markers.failure_report is True
    assert markers.dra_deferred is True
    assert markers.preflight_failed is False
    assert markers.total == 3
    assert markers.started == ["cert-manager", "nfd", "nvidia-dra-driver-gpu"]
    assert markers.installed == ["cert-manager", "nvidia-dra-driver-gpu"]
    assert markers.failed == ["nfd"]
    assert markers.reported_failed == ["nfd"]
    assert markers.deferred == ["nvidia-dra-driver-gpu"]
    assert markers.counts() == "2/3 installed, 1 failed (nfd)"


def test_markers_from_a_clean_run() -> None:
    markers = feed_all("┌─ [1/1] nfd  →  nfd\n└─ ✓ nfd installed\n✓ All components installed successfully.\n")
    assert (markers.failure_report, markers.dra_deferred, markers.failed) == (False, False, [])
    assert markers.counts() == "1/1 installed"


def test_markers_from_a_v011_run() -> None:
    markers = feed_all(
        "Installing nfd (node-feature-discovery)...\n"
        "ERROR: helm install nfd failed after 6 attempts\n"
        "WARNING: nfd install failed, continuing (--best-effort)\n"
        "WARNING: the following components failed: nfd gpu-operator\n"
        "Deployment complete.\n"
    )
    assert markers.failure_report is True
    assert markers.failed == ["nfd"]
    assert markers.reported_failed == ["nfd", "gpu-operator"]
    assert markers.dra_deferred is False


def test_markers_ignore_colour_codes() -> None:
    markers = feed_all(
        "\x1b[0;31m✗\x1b[0m Deployment completed with failures (--best-effort): a b\n"
        "\x1b[1;33m⚠\x1b[0m DRA kubelet plugin restart blocked, retry needed for: x — re-run\n"
        "\x1b[0;32m└─ ✓\x1b[0m c installed\n"
    )
    assert markers.reported_failed == ["a", "b"]
    assert markers.deferred == ["x"]
    assert markers.installed == ["c"]


def test_markers_see_a_preflight_failure() -> None:
    markers = feed_all(
        "ERROR: namespace 'gpu-operator' is still terminating from a previous install.\n"
        "✗ Pre-flight checks failed. Fix the issues above before deploying.\n"
    )
    assert markers.preflight_failed is True
    assert markers.failure_report is False


def test_a_component_named_like_a_marker_word_is_not_a_report() -> None:
    markers = feed_all("┌─ [1/1] failures  →  ns\n└─ ✓ failures installed\nAll components installed successfully.\n")
    assert markers.failure_report is False
    assert markers.installed == ["failures"]


#: What the image's kubectl (v1.37.2) printed to stderr for `kubectl version` against
#: a v1.33.13 API server (e2e/test_kubernetes_floor.py, verbatim): the chart supports
#: that minor, below kubectl's documented skew, so a deploy.sh or a pre-flight that
#: asks `kubectl version` prints it on a supported cluster.
KUBECTL_SKEW_WARNING = (
    "Warning: version difference between client (1.37) and server (1.33) exceeds the supported minor version "
    "skew of +/-1"
)


@pytest.mark.parametrize("results_reported", [True, False], ids=["1.x", "0.11"])
def test_the_kubectl_skew_warning_is_an_ordinary_line(results_reported: bool) -> None:
    """Not a failure, not an error, not a component: it changes no marker, is
    relayed as text (no event of its own), and the run's verdict stays a success."""
    markers = DeployMarkers(results_reported=results_reported)
    assert markers.feed(KUBECTL_SKEW_WARNING) is None
    text = (
        f"Running pre-flight checks...\n{KUBECTL_SKEW_WARNING}\nPre-flight checks passed.\n"
        "Installing nfd (node-feature-discovery)...\n"
        f"{KUBECTL_SKEW_WARNING}\n"
        "Deployment complete.\n"
    )
    meaningful = [text[start:end] for start, end, _ in markers.scan(text)]
    assert KUBECTL_SKEW_WARNING not in meaningful
    assert (markers.failure_report, markers.dra_deferred, markers.preflight_failed) == (False, False, False)
    assert markers.all_failed == []
    verdict = classify_deploy(
        0, failure_report=markers.failure_report, dra_deferred=markers.dra_deferred, best_effort=True
    )
    assert verdict.outcome is S


# aicr v0.11.1's errors for a validate that never reached its checks (both exit 8).
NO_CLIENT = (
    "[INTERNAL] failed to create kubernetes client: [INTERNAL] failed to get in-cluster config: unable to load "
    "in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"
)
READINESS = (
    "[INTERNAL] validation failed: [INVALID_REQUEST] readiness check failed: K8s.server.version expected "
    ">= 1.32.4, got v1.20.0"
)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (NO_CLIENT, "could not reach the cluster, so no check ran and there is no verdict: [INTERNAL] failed"),
        (READINESS, "the readiness pre-flight failed, so no validator ran: [INTERNAL] validation failed"),
        ("[INTERNAL] validation failed: one or more phases did not pass", "one or more checks failed"),
        ("", "one or more checks failed or were inconclusive"),
        ("[INTERNAL] failed to load validator catalog: boom", "aicr validate failed before a verdict: [INTERNAL]"),
    ],
)
def test_validate_exit_8_says_whether_checks_failed_or_validate_never_got_to_them(error: str, words: str) -> None:
    result = classify_validate(8, error=error)
    assert (result.outcome, result.exit_code) == (Outcome.FAILED, 8)
    assert words in result.reason


# -- the CTRF report decides (aicr-snapshot-validate 2.6) -------------------------------------------


def ctrf(*tests: tuple[str, str, str]) -> CtrfVerdict:
    """A CTRF report as aicr writes it, from (name, status, message) rows."""
    rows: list[dict[str, Any]] = [
        {"name": name, "status": status, "message": message, "suite": ["deployment"]} for name, status, message in tests
    ]
    summary = {"tests": len(rows)} | {
        key: sum(1 for row in rows if row["status"] == key)
        for key in ("passed", "failed", "skipped", "pending", "other")
    }
    return CtrfVerdict.parse(json.dumps({"reportFormat": "CTRF", "results": {"summary": summary, "tests": rows}}))


PASSED = ("operator-health", "passed", "")
FAILED = ("gpu-operator-version", "failed", "version 24.9 below 25.3")
CRASHED = ("expected-resources", "other", "exit code 137")
SKIPPED = ("check-nvidia-smi", "skipped", "no GPU nodes found in the cluster")
PENDING = ("operator-health", "pending", "")
NOT_PASSED = "aicr validate exited 8: [INTERNAL] validation failed: one or more phases did not pass"


@pytest.mark.parametrize(
    ("code", "tests", "outcome", "job_code", "words"),
    [
        # any failed or other: the step fails, naming the checks, whatever the exit code
        (8, [PASSED, FAILED], F, 8, "1 failed: gpu-operator-version (version 24.9 below 25.3) (of 2 checks, 1 passed)"),
        (0, [PASSED, CRASHED], F, 8, "1 crashed or never started (status other): expected-resources (exit code 137)"),
        (0, [PASSED, CRASHED], F, 8, "aicr validate exited 0 all the same"),
        (0, [FAILED, CRASHED], F, 8, "1 failed: gpu-operator-version"),
        # no passed check: inconclusive (exit 32 when gated)
        (
            0,
            [],
            NONE_RAN,
            ExitCode.VALIDATION_INCONCLUSIVE,
            "no check ran: the recipe lists no check for phase deployment",
        ),
        (
            0,
            [SKIPPED],
            NONE_RAN,
            32,
            "no check ran: 1 skipped (skipped: check-nvidia-smi (no GPU nodes found in the cluster))",
        ),
        (0, [SKIPPED, PENDING], NONE_RAN, 32, "no check ran: 1 skipped, 1 pending"),
        (8, [SKIPPED], NONE_RAN, 32, f"; {NOT_PASSED}, but its CTRF report has no failed or crashed check"),
        # checks ran and passed: green; a failing exit code alone is said, and warned
        (
            0,
            [PASSED, SKIPPED],
            S,
            0,
            "validation passed: 1 of 2 checks passed, 1 skipped: check-nvidia-smi (no GPU nodes found in the cluster)",
        ),
        (0, [PASSED], S, 0, "validation passed: 1 of 1 checks passed"),
        # a failing exit behind a passing report is never green, and both are said
        (
            8,
            [PASSED],
            F,
            8,
            "aicr validate exited 8 ([INTERNAL] validation failed: one or more phases did not pass) although its "
            "CTRF report says validation passed: 1 of 1 checks passed: a failing exit is never green",
        ),
    ],
)
def test_the_ctrf_counts_decide_whatever_the_exit_code(
    code: int, tests: list[tuple[str, str, str]], outcome: Outcome, job_code: int, words: str
) -> None:
    error = "[INTERNAL] validation failed: one or more phases did not pass" if code == 8 else ""
    result = classify_ctrf(code, ctrf(*tests), phases=["deployment"], error=error)
    assert (result.outcome, result.exit_code) == (outcome, job_code), result.reason
    assert words in result.reason, result.reason
    # exit 0 with a failure, or a failing exit without one: the two disagree, and the reason says so
    failure = any(status in ("failed", "other") for _, status, _ in tests)
    assert ("exited" in result.reason) is ((code == 0) is failure), result.reason


def test_a_clean_verdict_says_nothing_about_the_exit_code() -> None:
    assert "exited" not in classify_ctrf(0, ctrf(PASSED), phases=["deployment"]).reason
    assert "exited" not in classify_ctrf(0, ctrf(SKIPPED), phases=["deployment"]).reason
    assert "exited" not in classify_ctrf(8, ctrf(FAILED), phases=["deployment"]).reason


#: A skipped check as aicr v0.11.1 reports it (the real e2e run's CTRF entry): no
#: ``message`` (a skip writes no termination message), the reason in the pod log.
REAL_SKIP = {
    "name": "check-nvidia-smi",
    "status": "skipped",
    "duration": 0,
    "suite": ["deployment"],
    "stdout": [
        'time=2026-12-05T09:04:31.745Z level=INFO msg="starting check" name=check-nvidia-smi',
        'time=2026-12-05T09:04:31.760Z level=INFO msg=SKIP reason="[INTERNAL] no GPU nodes found in the cluster: skip"',
    ],
}


def _report(*tests: dict[str, Any]) -> str:
    summary = {"tests": len(tests)} | {k: sum(t["status"] == k for t in tests) for k in ("passed", "skipped")}
    return json.dumps({"reportFormat": "CTRF", "results": {"summary": summary, "tests": list(tests)}})


def test_a_real_skip_without_a_message_is_named_with_the_reason_its_validator_logged() -> None:
    passed = {"name": "operator-health", "status": "passed", "stdout": ["Running: 1/1"]}
    result = classify_ctrf(0, CtrfVerdict.parse(_report(passed, REAL_SKIP)), phases=["deployment"])
    assert (result.outcome, result.reason) == (
        S,
        "validation passed: 1 of 2 checks passed, 1 skipped: check-nvidia-smi (no GPU nodes found in the cluster)",
    )
    alone = classify_ctrf(0, CtrfVerdict.parse(_report(REAL_SKIP)), phases=["deployment"])
    assert "(skipped: check-nvidia-smi (no GPU nodes found in the cluster))" in alone.reason


@pytest.mark.parametrize(
    "stdout",
    [[], ['level=INFO msg="starting check"'], "not a list", [{"line": 'msg=SKIP reason="x"'}]],
)
def test_a_skip_without_a_message_or_a_logged_reason_is_named_alone(stdout: object) -> None:
    verdict = CtrfVerdict.parse(_report({**REAL_SKIP, "stdout": stdout}))
    assert verdict.checks["skipped"] == [("check-nvidia-smi", "")]


def test_a_skip_message_aicr_wrote_wins_over_the_log() -> None:
    verdict = CtrfVerdict.parse(_report({**REAL_SKIP, "message": "skipped - no-cluster mode"}))
    assert verdict.checks["skipped"] == [("check-nvidia-smi", "skipped - no-cluster mode")]


def test_zero_tests_name_every_phase_asked_for() -> None:
    result = classify_ctrf(0, ctrf(), phases=["deployment", "conformance"])
    assert result.reason == (
        "validation inconclusive: no check ran: the recipe lists no check for phases deployment, conformance "
        "(CTRF tests: 0)"
    )


def test_many_checks_are_counted_not_all_listed() -> None:
    rows = [(f"check-{i}", "other", "") for i in range(8)]
    result = classify_ctrf(0, ctrf(*rows), phases=["conformance"])
    assert "8 crashed or never started (status other): check-0, check-1, check-2, check-3, check-4 and 3 more" in (
        result.reason
    )


@pytest.mark.parametrize(
    "raw",
    ["", "not json", "[]", '{"results": {}}', '{"results": {"summary": {"passed": 1}}}', '{"results": []}'],
)
def test_what_is_not_a_ctrf_report_is_refused(raw: str) -> None:
    with pytest.raises(UnreadableReport, match=r"^not a CTRF report: "):
        CtrfVerdict.parse(raw)
