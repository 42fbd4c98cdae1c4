"""``aicr-runner fleet`` against what an unkind environment hands it: API servers
that hang, drip or fail, exec plugins that hang or fail loudly, kubeconfigs that
are not kubeconfigs, objects in a cluster that make no sense, 200 contexts of
which most do not answer. It always ends, always prints a table (or exits 2 with
one line for a bad kubeconfig), and never prints a credential or a control
character. A run that must prove it ends is a process of its own (a thread left
waiting must not hold the exit)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner import cli
from aicr_runner.errors import ExitCode
from tests.support.hostile_server import BlackHole, HostileKubeApi, StalledListener
from tests.support.loopback import serving
from tests.unit.fleet import test_command
from tests.unit.fleet.test_command import kubeconfig, refused_address, report

#: The green cluster of the fleet tests, as a context manager.
serve = contextlib.contextmanager(test_command.serve)

#: Generous: a fleet that ends at all ends long before; one that hangs never does.
_NEVER = 120
#: The --timeout of a test whose healthy clusters must answer: roomy, so a loaded machine
#: (CI runs the end-to-end suite beside this one) never turns a healthy row unreachable;
#: the hung and black-holed ones cost the test this long.
_ROOMY = "20"
_REPORTS = "/apis/openreports.io/v1alpha1/reports"
_CONFIGMAPS = "/api/v1/configmaps"


def fleet_process(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``aicr-runner fleet`` as a process; fails the test if it does not exit."""
    command = [sys.executable, "-m", "aicr_runner", "fleet", *argv]
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | (env or {})
    try:
        done = subprocess.run(
            command, check=False, env=environ, capture_output=True, timeout=_NEVER, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"fleet did not exit within {_NEVER}s")
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def table_rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines()[1:]}


# -- finding 1: API servers that never give a usable answer -----------------------------------


@pytest.mark.parametrize("mode", ["hang", "drip", "500"])
def test_fleet_ends_and_prints_its_table_against_a_server_that_never_answers_usefully(
    tmp_path: Path, mode: str
) -> None:
    with HostileKubeApi(mode) as api, serve({_REPORTS: (200, {"items": [report("gpu", "gpu", {"pass": 3})]})}) as ok:
        config = kubeconfig(tmp_path, {"bad": api.url, "good": ok})
        # 5 s: the good cluster must answer within it on a loaded machine too; the bad one costs it.
        code, out, err = fleet_process("--kubeconfig", str(config), "--all-contexts", "--timeout", "5")
    assert code == ExitCode.FLEET_NOT_GREEN, err
    rows = table_rows(out)
    assert rows["bad"][3] == "unreachable", out
    assert rows["good"][3] == "Succeeded", out
    assert "Traceback" not in err


# -- finding 2: exec credential plugins -----------------------------------------------------


def plugin_kubeconfig(tmp_path: Path, server: str, script: str) -> Path:
    plugin = tmp_path / "plugin.sh"
    plugin.write_text("#!/bin/sh\n" + script)
    plugin.chmod(0o755)
    path = tmp_path / "kubeconfig"
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}
    document = {
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": exec_user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_an_exec_plugin_that_hangs_is_killed_at_the_timeout_and_is_its_rows_problem(tmp_path: Path) -> None:
    # The plugin's child holds its pipes open too: the whole session is killed.
    config = plugin_kubeconfig(tmp_path, refused_address(), "sleep 600 &\nsleep 600\n")
    code, out, err = fleet_process("--kubeconfig", str(config), "--timeout", "1")
    assert code == ExitCode.FLEET_NOT_GREEN, err
    assert table_rows(out)["c"][3] == "unreachable", out
    assert "gave no credential within the --timeout" in out


def test_a_failing_exec_plugins_stderr_is_never_printed(tmp_path: Path) -> None:
    script = 'echo "error: refresh failed: refresh_token=rt-0123456789abcdef" >&2\nexit 1\n'
    config = plugin_kubeconfig(tmp_path, refused_address(), script)
    # Roomy: under load the plugin's own start could outlast a short budget (a timeout row, not its exit).
    code, out, err = fleet_process("--kubeconfig", str(config), "--timeout", _ROOMY)
    assert code == ExitCode.FLEET_NOT_GREEN
    assert "rt-0123456789abcdef" not in out + err
    assert "exited 1 (its output is not shown)" in out


def test_an_exec_plugins_token_reaches_the_cluster(tmp_path: Path) -> None:
    seen: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            payload = json.dumps({"items": [report("gpu", "gpu", {"pass": 1})]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    credential["status"] = {"token": "plugin-token-1"}  # type: ignore[assignment]
    with _serving(Recorder) as url:
        config = plugin_kubeconfig(tmp_path, url, f"echo '{json.dumps(credential)}'\n")
        code = cli.main(["fleet", "--kubeconfig", str(config), "--timeout", _ROOMY])
    assert code == 0
    assert seen
    assert all(h == "Bearer plugin-token-1" for h in seen)


# -- finding 4: many contexts, each by its own deadline ---------------------------------------


def test_200_contexts_healthy_refused_hung_and_black_holed_each_get_the_right_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {_REPORTS: (200, {"items": [report("gpu", "gpu", {"pass": 16, "skip": 1})]})}
    with serve(answers) as healthy, StalledListener() as hung, BlackHole() as hole:
        kinds = {"healthy": healthy, "refused": refused_address(), "hung": f"http://127.0.0.1:{hung.port}"}
        kinds["blackholed"] = hole.url
        servers = {f"{kind}-{i:03d}": url for i in range(50) for kind, url in kinds.items()}
        config = kubeconfig(tmp_path, servers)
        code = cli.main(["fleet", "-o", "json", "--kubeconfig", str(config), "--all-contexts", "--timeout", _ROOMY])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == ExitCode.FLEET_NOT_GREEN
    assert [r["context"] for r in rows] == list(servers)
    phases = {r["context"]: r["phase"] if not r["problem"] else r["problem"].split(":")[0] for r in rows}
    assert {c for c, p in phases.items() if p == "Succeeded"} == {c for c in servers if c.startswith("healthy")}
    assert {c for c, p in phases.items() if p == "unreachable"} == {c for c in servers if not c.startswith("healthy")}
    refused = [r["problem"] for r in rows if r["context"].startswith("refused")]
    assert all("Connection refused" in p for p in refused)


# -- finding 10 and 13: a kubeconfig that is not one ------------------------------------------


def _bad_kubeconfigs(tmp_path: Path) -> dict[str, tuple[dict[str, str], str]]:
    """name -> (environment or flag, what the one line says)."""
    good = kubeconfig(tmp_path, {"prod": refused_address()})
    files = {
        "not-yaml": b"clusters: [\n  {name: a\n",
        "a-list": b"- a\n- b\n",
        "non-utf8": b"clusters: []\nname: \xff\xfe\n",
        "ca-not-base64": yaml.safe_dump(
            {"clusters": [{"name": "a", "cluster": {"server": "https://x", "certificate-authority-data": "%%%"}}]}
        ).encode(),
        "alias-bomb": b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + b"".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n".encode() for i in range(8)
        ),
        "huge": b"# " + b"x" * (9 * 1024 * 1024) + b"\n",
    }
    cases: dict[str, tuple[dict[str, str], str]] = {}
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content)
        cases[name] = ({"--kubeconfig": str(path)}, str(path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases["fifo"] = ({"--kubeconfig": str(fifo)}, "not a regular file")
    cases["dev-zero"] = ({"--kubeconfig": "/dev/zero"}, "not a regular file")
    bad = tmp_path / "not-yaml"
    cases["KUBECONFIG=nope:bad:good"] = ({"KUBECONFIG": f"{tmp_path / 'nope'}:{bad}:{good}"}, f"{bad}: not YAML")
    return cases


def test_every_bad_kubeconfig_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for name, (given, expected) in _bad_kubeconfigs(tmp_path).items():
        flag = given.get("--kubeconfig")
        argv = ["--kubeconfig", flag] if flag else []
        code, out, err = fleet_process(*argv, "--timeout", "1", env={k: v for k, v in given.items() if k.isupper()})
        assert code == 2, (name, out, err)
        assert len(err.strip().splitlines()) == 1, (name, err)
        assert expected in err, (name, err)
        assert "Traceback" not in err
        assert out == "", name


# -- finding 10: objects in a cluster that make no sense --------------------------------------


class _Raw(http.server.BaseHTTPRequestHandler):
    answers: dict[str, bytes] = {}  # noqa: RUF012 - replaced per server

    def do_GET(self) -> None:
        payload = self.answers.get(self.path.split("?", 1)[0])
        self.send_response(200 if payload is not None else 404)
        payload = payload if payload is not None else b'{"kind": "Status", "code": 404}'
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Any:
    @contextlib.contextmanager
    def running() -> Iterator[str]:
        with serving(handler) as server:
            yield server.url

    return running()


def raw_cluster(reports: bytes, configmaps: bytes) -> Any:
    handler = type("Raw", (_Raw,), {"answers": {_REPORTS: reports, _CONFIGMAPS: configmaps}})
    return _serving(handler)


_GOOD_REPORT = json.dumps(report("good", "good", {"pass": 2}))
_BAD_CLUSTERS = {
    "non-numeric-count": (f'{{"items": [{_GOOD_REPORT}, {{"summary": {{"pass": "many"}}}}]}}', '{"items": []}'),
    "non-object-items": (f'{{"items": [{_GOOD_REPORT}, 7, "x", null]}}', '{"items": ["y"]}'),
    "list-report-json": (
        f'{{"items": [{_GOOD_REPORT}]}}',
        json.dumps({"items": [{"metadata": {"namespace": "b"}, "data": {"report.json": "[1, 2]"}}]}),
    ),
    "1e400": (f'{{"items": [{_GOOD_REPORT}, {{"summary": {{"pass": 1e400}}}}]}}', '{"items": []}'),
    "items-not-a-list": ('{"items": {"a": 1}}', '{"items": []}'),
    "answer-not-an-object": ("[1, 2, 3]", "[]"),
}


@pytest.mark.parametrize("case", list(_BAD_CLUSTERS))
def test_a_bad_object_in_a_cluster_is_that_rows_problem_and_the_table_stays(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reports, configmaps = _BAD_CLUSTERS[case]
    with (
        raw_cluster(reports.encode(), configmaps.encode()) as bad,
        serve({_REPORTS: (200, {"items": [report("gpu", "gpu", {"pass": 3})]})}) as ok,
    ):
        config = kubeconfig(tmp_path, {"healthy": ok, "odd": bad})
        code = cli.main(["fleet", "-o", "json", "--kubeconfig", str(config), "--all-contexts", "--timeout", _ROOMY])
    out, err = capsys.readouterr()
    assert code == ExitCode.FLEET_NOT_GREEN
    assert "Traceback" not in err
    rows = json.loads(out)["rows"]
    assert [(r["context"], r["green"]) for r in rows if r["context"] == "healthy"] == [("healthy", True)]
    odd = [r for r in rows if r["context"] == "odd"]
    assert odd
    assert any(r["problem"].startswith("error:") or r["phase"] == "unreadable" for r in odd), odd


# -- finding 11 (fleet): credentials in a server URL ------------------------------------------


@pytest.mark.parametrize("password", ["s3cr/et-pw", "s3cr#et-pw", "s3cr@et:pw"])
def test_a_password_in_a_server_url_never_shows(tmp_path: Path, password: str) -> None:
    port = refused_address().rsplit(":", 1)[1]
    config = kubeconfig(tmp_path, {"prod": f"http://admin:{password}@127.0.0.1:{port}"})
    code, out, err = fleet_process("--kubeconfig", str(config), "--timeout", "1")
    assert code == ExitCode.FLEET_NOT_GREEN, err
    for piece in ("s3cr", "et-pw", "et:pw"):
        assert piece not in out + err
    assert f"http://***@127.0.0.1:{port} holds a user or password" in out


# -- finding 12 (fleet): control characters from a cluster ------------------------------------


def test_control_characters_from_a_cluster_never_reach_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = report("gpu\x1b[2J", "rel\nforged  row", {"pass": 1})
    hostile["metadata"]["annotations"]["aicr.nvidia.com/last-run"] = "\x1b]0;pwned\x07\r2026"
    hostile["results"][0]["properties"]["recipe"] = "r\u202eevil\ud800"
    with serve({_REPORTS: (200, {"items": [hostile]})}) as url:
        config = kubeconfig(tmp_path, {"ctx\x1b[31m\nfake": url})
        code = cli.main(["fleet", "--kubeconfig", str(config), "--timeout", _ROOMY])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.rstrip("\n").split("\n")
    assert len(lines) == 2, out
    assert all(ch.isprintable() for line in lines for ch in line), out
    assert "\ufffd" in lines[1]


# -- finding 13 (fleet): the retry warning of a read ------------------------------------------


def test_a_retried_read_says_read(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"gone": refused_address()})
    # Waits for the retry line itself (a roomy budget: on a loaded machine the client's
    # start alone took 2 s), then stops the process: the wording is what is tested.
    command = [sys.executable, "-m", "aicr_runner", "fleet", "--kubeconfig", str(config), "--timeout", _ROOMY]
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with subprocess.Popen(command, env=environ, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True) as proc:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # ends when the process does: within its --timeout
            lines.append(line)
            if "retry" in line:
                break
        proc.terminate()
    err = "".join(lines)
    assert "Kubernetes API read retry" in err
    assert "write retry" not in err


def test_library_log_records_during_fleet_go_through_the_redacting_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client and urllib3 log through the standard library's root logger
    (the client's kubeconfig loader logs a failed auth refresh with what it
    failed on); under ``fleet`` every such record is rendered by the redacting
    log, which knows the kubeconfig's credentials."""
    import logging

    config = tmp_path / "kubeconfig"
    provider = {"name": "oidc", "config": {"refresh-token": "rt-fleet-0123456789", "idp-issuer-url": "https://x"}}
    config.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": refused_address()}}],
                "users": [{"name": "u", "user": {"auth-provider": provider}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    cli.main(["fleet", "--kubeconfig", str(config), "--timeout", "1"])
    capsys.readouterr()
    logging.getLogger("kubernetes.config.kube_config").error("refresh failed: refresh_token=%s", "rt-fleet-0123456789")
    logging.getLogger("urllib3.connectionpool").warning("retrying with token rt-fleet-0123456789")
    err = capsys.readouterr().err
    assert "refresh failed: refresh_token=***" in err
    assert "retrying with token ***" in err
    assert "rt-fleet-0123456789" not in err


def test_ctrl_c_while_clusters_are_read_is_one_line_and_exit_130(tmp_path: Path) -> None:
    with StalledListener() as hung:
        config = kubeconfig(tmp_path, {"hung": f"http://127.0.0.1:{hung.port}"})
        command = [sys.executable, "-m", "aicr_runner", "fleet", "--kubeconfig", str(config), "--timeout", "300"]
        # A shell's background job inherits SIGINT ignored, and Python then keeps it
        # ignored: the child starts with the default, as a terminal's fleet does.
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - no threads forked
        )
        try:
            assert hung.wait_for_connection(_NEVER), "fleet never connected"
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=_NEVER)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130
    assert err.decode().strip().splitlines()[-1] == "aicr-runner fleet: interrupted"
    assert b"Traceback" not in err
