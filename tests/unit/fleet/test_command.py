"""``aicr-runner fleet`` against loopback HTTP servers standing in for clusters:
one serving reports and status ConfigMaps, one answering 403, one refusing
connections; the kubeconfig read by the real client, the rows, the exit codes."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from aicr_runner import cli
from aicr_runner.errors import ExitCode
from aicr_runner.fleet.rows import (
    Row,
    age,
    is_green,
    render_json,
    render_table,
    rows_from_configmaps,
    rows_from_reports,
)
from aicr_runner.kube.openreports import LAST_RUN_ANNOTATION, REGRESSED_ANNOTATION, RELEASE_LABEL
from tests.support.loopback import serving


def report(namespace: str, release: str, summary: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "openreports.io/v1alpha1",
        "kind": "Report",
        "metadata": {
            "name": f"aicr-{release}",
            "namespace": namespace,
            "labels": {RELEASE_LABEL: release, "app.kubernetes.io/managed-by": "aicr-runner"},
            "annotations": {LAST_RUN_ANNOTATION: "2026-12-05T10:00:00Z"},
        },
        "summary": summary,
        "results": [{"properties": {"aicrVersion": "v0.11.1", "recipe": "h100-eks-ubuntu-training"}}],
    }


def status_configmap(namespace: str, phase: str) -> dict[str, Any]:
    body = {"phase": phase, "aicrVersion": "v0.11.1", "endedAt": "2026-12-05T09:00:00Z"}
    return {
        "metadata": {
            "name": "aicr-run-status",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/instance": "gpu"},
        },
        "data": {"report.json": json.dumps(body)},
    }


class _Cluster(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, Any]]] = {}

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        status, body = self.answers.get(path, (404, {"kind": "Status", "code": 404}))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(answers: dict[str, tuple[int, Any]]) -> Iterator[str]:
    handler = type("Handler", (_Cluster,), {"answers": answers})
    with serving(handler) as server:
        yield server.url


def _items(*items: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"kind": "List", "items": list(items)}


@pytest.fixture
def green_cluster() -> Iterator[str]:
    yield from serve(
        {
            "/apis/openreports.io/v1alpha1/reports": _items(report("gpu", "gpu", {"pass": 16, "skip": 1})),
            "/api/v1/configmaps": _items(status_configmap("gpu", "Succeeded")),
        }
    )


@pytest.fixture
def forbidden_cluster() -> Iterator[str]:
    yield from serve({"/apis/openreports.io/v1alpha1/reports": (403, {"kind": "Status", "code": 403})})


def refused_address() -> str:
    with socket.socket() as sock:  # a port bound and never listened on refuses connections
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def kubeconfig(tmp_path: Path, servers: dict[str, str]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": n, "cluster": {"server": s}} for n, s in servers.items()],
                "users": [{"name": "u", "user": {"token": "fleet-test-token"}}],
                "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in servers],
                "current-context": next(iter(servers)),
            }
        )
    )
    return path


def fleet_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["fleet", "-o", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_a_green_cluster_is_one_green_row_and_exit_0(
    tmp_path: Path, green_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path, {"prod": green_cluster})
    code, out = fleet_json(capsys, "--kubeconfig", str(config))
    assert code == 0
    [row] = out["rows"]
    assert (row["context"], row["namespace"], row["release"], row["phase"]) == ("prod", "gpu", "gpu", "Succeeded")
    assert (row["passed"], row["failed"], row["skipped"], row["other"]) == (16, 0, 1, 0)
    assert (row["aicr_version"], row["recipe"], row["source"]) == ("v0.11.1", "h100-eks-ubuntu-training", "Report")
    assert row["green"]
    assert out["green"]


def test_unreachable_and_forbidden_clusters_are_rows_and_exit_34(
    tmp_path: Path, green_cluster: str, forbidden_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = {"prod": green_cluster, "locked": forbidden_cluster, "gone": refused_address()}
    config = kubeconfig(tmp_path, servers)
    # 5 s: the green and forbidden clusters must answer within it on a loaded machine too.
    code = cli.main(["fleet", "--kubeconfig", str(config), "--all-contexts", "--timeout", "5"])
    out, err = capsys.readouterr()
    assert code == ExitCode.FLEET_NOT_GREEN
    assert int(ExitCode.FLEET_NOT_GREEN) == 34
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["CONTEXT", "prod", "locked", "gone"]
    assert lines[2].split()[3] == "forbidden"
    assert "HTTP 403" in lines[2]
    assert lines[3].split()[3] == "unreachable"
    assert "Connection refused" in lines[3]
    assert "within the 5s --timeout" in lines[3]
    assert "Traceback" not in err
    assert "fleet-test-token" not in out + err


def test_status_configmap_stands_in_where_no_report_api_is_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {"/api/v1/configmaps": _items(status_configmap("lab", "Failed"))}
    for url in serve(answers):
        code, out = fleet_json(capsys, "--kubeconfig", str(kubeconfig(tmp_path, {"lab": url})))
    assert code == 34
    [row] = out["rows"]
    assert (row["namespace"], row["release"], row["phase"]) == ("lab", "gpu", "Failed")
    assert row["source"] == "ConfigMap/aicr-run-status"
    assert row["passed"] is None
    assert not row["green"]


def test_a_cluster_without_any_verdict_is_not_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for url in serve({"/api/v1/configmaps": _items()}):
        code, out = fleet_json(capsys, "--kubeconfig", str(kubeconfig(tmp_path, {"empty": url})))
    assert code == 34
    assert out["rows"][0]["problem"].startswith("none:")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--timeout", "0"], "--timeout=0: must be more than 0 and at most 300 seconds"),
        (["--timeout", "nan"], "--timeout=nan: must be more than 0"),
        (["--context", "nope"], "--context=nope: no such context in the kubeconfig (it has: prod)"),
        (["--context", "a", "--all-contexts"], "argument --all-contexts: not allowed with argument --context"),
        (["-o", "yaml"], "argument -o/--output: invalid choice: 'yaml'"),
    ],
)
def test_bad_flags_are_one_message_and_exit_2(
    tmp_path: Path, argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path, {"prod": refused_address()})
    assert cli.main(["fleet", "--kubeconfig", str(config), *argv]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err


def test_an_unreadable_kubeconfig_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    assert cli.main(["fleet", "--kubeconfig", str(missing)]) == 2
    assert f"kubeconfig {missing}: cannot be read" in capsys.readouterr().err


def test_a_report_with_failures_is_failed_and_a_report_without_passes_inconclusive() -> None:
    rows = rows_from_reports("c", "Report", [report("a", "a", {"pass": 3, "fail": 1}), report("b", "b", {"skip": 2})])
    assert [(r.phase, is_green(r)) for r in rows] == [("Failed", False), ("Inconclusive", False)]


def test_regressions_are_the_checks_the_reports_annotation_names_and_a_configmap_row_has_none() -> None:
    regressed = report("a", "a", {"pass": 2, "fail": 2})
    regressed["metadata"]["annotations"][REGRESSED_ANNOTATION] = "operator-health,gpu-operator-version"
    rows = rows_from_reports("c", "Report", [regressed, report("b", "b", {"pass": 3})])
    assert [r.regressions for r in rows] == [2, 0]
    [from_status] = rows_from_configmaps("c", [status_configmap("d", "Succeeded")], set())
    assert from_status.regressions is None
    assert json.loads(render_json(rows, datetime(2026, 12, 5, 12, 0, tzinfo=UTC)))["rows"][0]["regressions"] == 2


def test_configmaps_of_namespaces_with_a_report_are_left_out() -> None:
    rows = rows_from_configmaps("c", [status_configmap("a", "Succeeded"), status_configmap("b", "Failed")], {"a"})
    assert [(r.namespace, r.phase) for r in rows] == [("b", "Failed")]


def test_a_status_configmap_without_a_release_label_names_no_release() -> None:
    body = status_configmap("b", "Succeeded")
    del body["metadata"]["labels"]
    [row] = rows_from_configmaps("c", [body], set())
    assert (row.release, row.source, is_green(row)) == ("-", "ConfigMap/aicr-run-status", True)


def test_age_and_table() -> None:
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert [age(t, now) for t in ("2026-12-05T10:00:00Z", "2026-12-01T12:00:00Z", "2026-12-05T11:59:30Z", "-")] == [
        "2h",
        "4d",
        "30s",
        "-",
    ]
    table = render_table([Row(context="c", problem_kind="forbidden", problem_detail="HTTP 403")], now)
    assert table.splitlines()[1].split() == [
        "c",
        "-",
        "-",
        "forbidden",
        "-",
        "-",
        "-/-/-/-",
        "-",
        "-",
        "-",
        "HTTP",
        "403",
    ]


def test_a_context_still_unanswered_after_its_bound_is_an_unreachable_row() -> None:
    from aicr_runner.fleet.read import read_context, read_fleet

    release = threading.Event()

    def hangs(what: str, path: str, selector: str) -> list[dict[str, Any]] | None:
        release.wait(60)
        return []

    try:
        rows = read_fleet(["stuck"], lambda context, _deadline: read_context(context, hangs), timeout=0.01)
    finally:
        release.set()
    assert [(r.context, r.problem_kind) for r in rows] == [("stuck", "unreachable")]
    assert "no answer within 0.01s" in rows[0].problem
