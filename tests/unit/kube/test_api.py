"""ClientKubeApi's retries against a loopback HTTP server that answers like a
struggling API server: 429 with Retry-After, 5xx, closed connections, 4xx."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.config import kube_config

from aicr_runner.errors import ApiConflictError, CaptureError, LeaseError, RunnerError
from aicr_runner.kube import api as kube
from aicr_runner.kube.api import ClientKubeApi, LeaseRecord
from tests.support.loopback import LoopbackServer, serving


@dataclass
class Script:
    """The answers to give, in order; the last one repeats."""

    answers: list[tuple[int, dict[str, str]]]
    seen: list[tuple[str, str, float]] = field(default_factory=list)

    def next(self) -> tuple[int, dict[str, str]]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class _Handler(http.server.BaseHTTPRequestHandler):
    script: Script

    def do_PATCH(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        self.script.seen.append((self.command, self.path, time.monotonic()))
        status, headers = self.script.next()
        if status == 0:  # drop the connection without an answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        payload = json.dumps({"kind": "Status", "code": status}).encode()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script([(200, {})])
    handler = type("Handler", (_Handler,), {"script": script})
    with serving(handler) as httpd:
        yield httpd.url, script


def api_for(url: str, budget: float = 30.0) -> ClientKubeApi:
    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = False  # the runner's retries are under test, not urllib3's
    return ClientKubeApi(client.ApiClient(configuration), write_budget_seconds=budget)


def test_408_429_and_5xx_are_retried_honouring_retry_after(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers[:] = [(429, {"Retry-After": "1"}), (503, {}), (500, {}), (408, {}), (200, {})]
    api = api_for(url)
    api.apply_configmap("ns", "aicr-run-status", data={"k": "v"})
    assert len(script.seen) == 5
    assert all(path.startswith("/api/v1/namespaces/ns/configmaps/aicr-run-status?") for _, path, _ in script.seen)
    assert script.seen[1][2] - script.seen[0][2] >= 0.95, "Retry-After: 1 was honoured"


def test_dropped_connections_are_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers[:] = [(0, {}), (0, {}), (200, {})]
    api_for(url).apply_configmap("ns", "x", data={"k": "v"})
    assert len(script.seen) == 3


def test_connection_refused_until_the_server_is_back() -> None:
    """An API server that is down, then starts on the same port: the write lands."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Script([(200, {})])
    handler = type("Handler", (_Handler,), {"script": script})
    started: list[LoopbackServer] = []

    def start_later() -> None:
        time.sleep(2.0)
        httpd = LoopbackServer(handler, port)
        started.append(httpd)
        httpd.serve_forever()

    threading.Thread(target=start_later, daemon=True).start()
    try:
        api_for(f"http://127.0.0.1:{port}").apply_configmap("ns", "x", data={"k": "v"})
    finally:
        for httpd in started:
            httpd.stop()
    assert len(script.seen) == 1


@pytest.mark.parametrize(
    ("status", "hint"),
    [(403, "may not write ConfigMaps"), (404, "namespace does not exist"), (422, "rejected the object"), (400, "")],
)
def test_other_4xx_fail_at_once_with_the_hint(server: tuple[str, Script], status: int, hint: str) -> None:
    url, script = server
    script.answers[:] = [(status, {}), (200, {})]
    with pytest.raises(CaptureError) as caught:
        api_for(url).apply_configmap("ns", "x", data={"k": "v"})
    assert len(script.seen) == 1, "not retried"
    assert caught.value.exit_code == 26
    assert f"writing ConfigMap ns/x failed: HTTP {status}" in caught.value.message
    assert hint in caught.value.message


def test_409_is_a_conflict_for_the_caller(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers[:] = [(409, {})]
    with pytest.raises(ApiConflictError, match="HTTP 409"):
        api_for(url).apply_configmap("ns", "x", data={"k": "v"})
    assert len(script.seen) == 1


def test_gives_up_within_the_budget_naming_it(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers[:] = [(503, {})]
    started = time.monotonic()
    with pytest.raises(CaptureError) as caught:
        api_for(url, budget=3.0).apply_configmap("ns", "x", data={"k": "v"})
    assert time.monotonic() - started < 3.5
    assert len(script.seen) >= 2
    assert "within the 3s API write budget" in caught.value.message
    assert "last error: HTTP 503" in caught.value.message


def test_retry_after_beyond_the_budget_stops_at_once(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers[:] = [(429, {"Retry-After": "60"})]
    started = time.monotonic()
    with pytest.raises(CaptureError, match="HTTP 429"):
        api_for(url, budget=5.0).apply_configmap("ns", "x", data={"k": "v"})
    assert time.monotonic() - started < 1.0
    assert len(script.seen) == 1


@pytest.mark.parametrize(
    ("call", "error", "hint"),
    [
        (lambda api: api.get_lease("ns", "l"), LeaseError, "may not read Leases"),
        (lambda api: api.create_lease("ns", LeaseRecord(name="l")), LeaseError, "may not create Leases"),
        (
            lambda api: api.replace_lease("ns", LeaseRecord(name="l", resource_version="1")),
            LeaseError,
            "may not update Leases",
        ),
        (lambda api: api.get_job_labels("ns", "j"), CaptureError, "may not read Jobs"),
        (lambda api: api.get_helmrelease_uid("ns", "hr"), CaptureError, "may not read HelmReleases"),
        (lambda api: api.create_event("ns", {"kind": "Event"}), CaptureError, "may not create Events"),
    ],
)
def test_a_forbidden_request_names_the_rights_it_lacks(
    server: tuple[str, Script], call: Callable[[ClientKubeApi], object], error: type[RunnerError], hint: str
) -> None:
    url, script = server
    script.answers[:] = [(403, {})]
    with pytest.raises(error) as caught:
        call(api_for(url))
    assert hint in caught.value.message
    assert "ConfigMaps" not in caught.value.message
    # The fact a caller branches on (the fleet's "forbidden") is a field, not the message's words.
    assert (caught.value.http_status, caught.value.out_of_budget) == (403, False)


def test_the_failure_event_calls_keep_their_own_short_budget(
    server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod is on its way out: an API server that keeps answering 503 holds it
    for the Event's budget, not the 30 s write budget."""
    url, script = server
    script.answers[:] = [(503, {})]
    monkeypatch.setattr(kube, "_EVENT_BUDGET_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(CaptureError, match=r"within the 1s API write budget") as caught:
        api_for(url, budget=30.0).create_event("ns", {"kind": "Event"})
    assert (caught.value.out_of_budget, caught.value.http_status) == (True, 0)
    assert time.monotonic() - started < 3.0
    assert script.seen[0][1].startswith("/api/v1/namespaces/ns/events")


def test_a_refused_write_logs_the_runner_retries_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The client the runner builds from a kubeconfig makes one try per attempt:
    urllib3's own retries would add three "Retrying" lines to each one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    # The client reads $KUBECONFIG when it is imported; this is where it keeps it.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    # load_kube_config sets the client's process-wide default configuration.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    api = ClientKubeApi(write_budget_seconds=1.5)
    caplog.set_level("DEBUG", logger="urllib3")
    with pytest.raises(CaptureError, match=r"gave up after \d+ attempt"):
        api.apply_configmap("ns", "x", data={"k": "v"})
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("urllib3") and "Retrying" in r.getMessage()]


# -- every request bounded; SIGTERM stops a request in flight -----------------------------------


@pytest.mark.parametrize(("mode", "reason"), [("hang", "Read timed out"), ("drip", "no complete answer within")])
def test_a_request_to_a_server_that_never_completes_an_answer_ends_within_its_budget(mode: str, reason: str) -> None:
    from tests.support.hostile_server import HostileKubeApi

    with HostileKubeApi(mode) as server:
        api = api_for(server.url, budget=1.0)
        with pytest.raises(CaptureError) as failure:
            api.get_configmap_data("ns", "cm")
    assert "within the 1s API read budget" in failure.value.message
    assert reason in failure.value.message


def test_sigterm_stops_a_request_in_flight_and_later_calls_get_a_short_budget_then_none() -> None:
    from aicr_runner.errors import InterruptedRun
    from tests.support.hostile_server import HostileKubeApi

    signalled = threading.Event()
    with HostileKubeApi("hang") as server:
        configuration = client.Configuration()
        configuration.host = server.url
        configuration.retries = False
        api = ClientKubeApi(client.ApiClient(configuration), write_budget_seconds=3600, interrupted=signalled.is_set)

        def signal_once_requested() -> None:
            if server.requested.wait(60):
                signalled.set()

        threading.Thread(target=signal_once_requested, daemon=True).start()
        with pytest.raises(InterruptedRun, match="a shutdown was requested during writing ConfigMap ns/cm"):
            api.apply_configmap("ns", "cm", data={"a": "b"})
        # After SIGTERM: one call gets AFTER_SHUTDOWN_SECONDS, not the hour; then none is tried.
        with pytest.raises(CaptureError, match=f"within the {kube.AFTER_SHUTDOWN_SECONDS:g}s API write budget"):
            api.apply_configmap("ns", "final", data={"a": "b"})
        requests = server.requests
        with pytest.raises(CaptureError, match="not tried, an API call already ran out of time"):
            api.apply_configmap("ns", "later", data={"a": "b"})
        assert server.requests == requests


def test_after_sigterm_stops_a_hung_request_the_final_status_is_written_if_the_api_answers() -> None:
    from aicr_runner.errors import InterruptedRun
    from tests.support.hostile_server import HostileKubeApi

    signalled = threading.Event()
    with HostileKubeApi("hang-once") as server:
        configuration = client.Configuration()
        configuration.host = server.url
        configuration.retries = False
        api = ClientKubeApi(client.ApiClient(configuration), write_budget_seconds=3600, interrupted=signalled.is_set)

        def signal_once_requested() -> None:
            if server.requested.wait(60):
                signalled.set()

        threading.Thread(target=signal_once_requested, daemon=True).start()
        with pytest.raises(InterruptedRun):
            api.apply_configmap("ns", "aicr-run-status", data={"phase": "Running"})
        api.apply_configmap("ns", "aicr-run-status", data={"phase": "Interrupted"})
        assert server.requests == 2


def test_after_a_call_ran_out_of_its_budget_calls_get_one_requests_time_until_one_gets_through(
    server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 3: against an API that fails every call, each call waiting out its
    whole budget made a run take the budget once per call."""
    url, script = server
    monkeypatch.setattr(kube, "_REQUEST_TIMEOUT_SECONDS", 0.5)
    script.answers[:] = [(500, {})]
    api = api_for(url, budget=2.0)
    with pytest.raises(CaptureError, match="within the 2s API write budget"):
        api.apply_configmap("ns", "a", data={})
    with pytest.raises(CaptureError, match=r"within the 0\.5s API write budget"):
        api.apply_configmap("ns", "b", data={})
    script.answers[:] = [(200, {})]
    api.apply_configmap("ns", "c", data={})
    script.answers[:] = [(500, {})]
    with pytest.raises(CaptureError, match="within the 2s API write budget"):
        api.apply_configmap("ns", "d", data={})
