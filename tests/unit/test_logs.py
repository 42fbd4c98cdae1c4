"""Events, rendered by structlog as ``logs.configure`` sets it up, and the
standard library's records rendered alike."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from aicr_runner import logs
from aicr_runner.settings.config import LogFormat

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
EVENTS: list[tuple[str, str, dict[str, Any]]] = [
    ("info", "step started", {"step": "fetch"}),
    ("info", "aicr-runner starting", {"mode": "plan", "criteria": "service=eks, accelerator=h100", "pack": ""}),
    (
        "warning",
        "run status not written",
        {"reason": "a b", "n": 3, "f": 0.5, "none": None, "items": [1, "a"], "eq": "a=b", "quote": "it's"},
    ),
    ("error", "fetch failed: exit 27", {"exit_code": 27, "status": "/tmp/x"}),
    ("error", "", {"k": "v"}),
    ("info", "unicode é ─ ✓", {"nested": {"a": 1}, "flag": True, "tab": "a\tb"}),
]


#: The lines ``EVENTS`` render as, logged with ``step="deploy"`` bound: structlog's
#: console renderer (no colours, level padded to 9, keys sorted, values with
#: spaces, quotes or "=" as repr) and its JSON renderer (keys as bound, then
#: event, level, timestamp).
EXPECTED = {
    LogFormat.CONSOLE: [
        "T [info     ] step started step=fetch",
        "T [info     ] aicr-runner starting criteria='service=eks, accelerator=h100' mode=plan pack= step=deploy",
        "T [warning  ] run status not written eq='a=b' f=0.5 items=[1, 'a'] n=3 none=None quote=\"it's\" reason='a b'"
        " step=deploy",
        "T [error    ] fetch failed: exit 27 exit_code=27 status=/tmp/x step=deploy",
        "T [error    ] k=v step=deploy",
        "T [info     ] unicode é ─ ✓ flag=True nested={'a': 1} step=deploy tab='a\\tb'",
    ],
    LogFormat.JSON: [
        '{"step": "fetch", "event": "step started", "level": "info", "timestamp": "T"}',
        '{"step": "deploy", "mode": "plan", "criteria": "service=eks, accelerator=h100", "pack": "",'
        ' "event": "aicr-runner starting", "level": "info", "timestamp": "T"}',
        '{"step": "deploy", "reason": "a b", "n": 3, "f": 0.5, "none": null, "items": [1, "a"], "eq": "a=b",'
        ' "quote": "it\'s", "event": "run status not written", "level": "warning", "timestamp": "T"}',
        '{"step": "deploy", "exit_code": 27, "status": "/tmp/x", "event": "fetch failed: exit 27", "level": "error",'
        ' "timestamp": "T"}',
        '{"step": "deploy", "k": "v", "event": "", "level": "error", "timestamp": "T"}',
        '{"step": "deploy", "nested": {"a": 1}, "flag": true, "tab": "a\\tb", "event": "unicode \\u00e9 \\u2500'
        ' \\u2713", "level": "info", "timestamp": "T"}',
    ],
}


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_events_render_in_the_configured_format(fmt: LogFormat) -> None:
    out = io.StringIO()
    logs.configure(fmt, stream=out)
    for level, event, values in EVENTS:
        getattr(logs.get_logger().bind(step="deploy"), level)(event, **values)
    logs.get_logger().debug("below the threshold")
    assert STAMP.sub("T", out.getvalue()).splitlines() == EXPECTED[fmt]


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_every_value_of_an_event_is_masked(fmt: LogFormat) -> None:
    logs.register_secret("hunter2-secret")
    out = io.StringIO()
    logs.configure(fmt, stream=out)
    logs.get_logger(step="pack").error(
        "pull failed for hunter2-secret", reason="auth hunter2-secret", items=["x hunter2-secret"]
    )
    assert "hunter2-secret" not in out.getvalue()
    assert out.getvalue().count("***") == 3, out.getvalue()


def test_stdlib_loggers_render_like_events() -> None:
    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    logging.getLogger("urllib3.connectionpool").warning("Retrying after %s", "reset")
    logging.getLogger("oras").info("below the WARNING threshold")
    assert STAMP.sub("T", out.getvalue()) == '{"event": "Retrying after reset", "level": "warning", "timestamp": "T"}\n'


def test_a_plan_imports_no_retry_stack_and_logs_through_structlog(tmp_path: Path) -> None:
    """A plan with a preinstalled aicr and no pack: neither tenacity, the HTTP
    stack, the Kubernetes client nor the deploy relay's matcher; its events go
    through structlog. (asyncio and the standard library's logging come with
    pydantic-settings, which every run reads its settings with.)"""
    from tests.fake_aicr import install_fake_aicr

    fake = install_fake_aicr(tmp_path / "bin")
    probe = (
        "import sys\n"
        "from aicr_runner.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = ['tenacity', 'httpx', 'requests', 'oras', 'kubernetes', 'ctypes', 'hyperscan', 'zlib_ng']\n"
        "print(code, 'structlog' in sys.modules, [name for name in heavy if name in sys.modules], file=sys.stderr)\n"
    )
    argv = ["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan"), "--accelerator", "h100"]
    env = {"PATH": "/usr/bin:/bin", "AICR_RUNNER_AICR__PROVENANCE__MODE": "off", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.stderr.strip().splitlines()[-1] == "0 True []", result.stderr[-3000:]


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_a_stdlib_record_with_a_traceback_is_rendered_and_masked(fmt: LogFormat) -> None:
    logs.register_secret("hunter2-secret")
    out = io.StringIO()
    logs.configure(fmt, stream=out)
    try:
        raise ConnectionError("reset by https://user:hunter2-secret@r.example")
    except ConnectionError:
        logging.getLogger("urllib3.connectionpool").warning("Retrying", exc_info=True)
    text = out.getvalue()
    assert "hunter2-secret" not in text
    assert "ConnectionError: reset by https://user:***@r.example" in (
        json.loads(text)["exception"] if fmt is LogFormat.JSON else text
    )
    assert text.startswith("{" if fmt is LogFormat.JSON else "20")


def _relay_blocks(count: int) -> None:
    for n in range(count):
        logs.relay(f"helm line {n} a\nhelm line {n} b\nhelm line {n} c\n", step="deploy", source="deploy.sh")
        logs.flush_relay()


@pytest.mark.parametrize("fmt", list(LogFormat))
def test_relayed_lines_and_events_from_two_threads_never_split_a_line(tmp_path: Path, fmt: LogFormat) -> None:
    # The pump thread relays deploy.sh while another thread (a status write's
    # retry) logs an event: each line in the pod log must stay whole.
    pod_log = tmp_path / "pod.log"
    blocks, events = 3000, 3000
    with pod_log.open("w", encoding="utf-8") as stream:
        logs.configure(fmt, stream)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
        try:
            relaying = threading.Thread(target=_relay_blocks, args=(blocks,))
            relaying.start()
            log = logs.get_logger(step="deploy")
            for n in range(events):
                log.warning("Kubernetes API write retry", attempt=n)
            relaying.join()
            logs.flush_relay()
        finally:
            sys.setswitchinterval(switch)
            logs.configure()
    lines = pod_log.read_text(encoding="utf-8").splitlines()
    assert len(lines) == blocks * 3 + events
    if fmt is LogFormat.JSON:
        records = [json.loads(line) for line in lines]
        assert sum(record["event"] == "Kubernetes API write retry" for record in records) == events
    else:
        assert all(STAMP.match(line) for line in lines), [line for line in lines if not STAMP.match(line)][:3]
        assert sum("Kubernetes API write retry" in line for line in lines) == events


def test_a_cached_module_logger_follows_every_later_configuration() -> None:
    """Loggers are cached on first use and keep the processor chain and output
    they were assembled with: a configuration made afterwards must reach them."""
    import structlog

    log = logs.get_logger()  # as a module makes it at import: nothing configured by it yet
    first, second = io.StringIO(), io.StringIO()
    logs.configure(LogFormat.CONSOLE, stream=first)
    log.info("first")  # structlog assembles the logger now, and caches it
    logs.configure(LogFormat.JSON, stream=second)
    log.info("second", n=1)
    assert structlog.get_config()["cache_logger_on_first_use"] is True
    assert STAMP.sub("T", first.getvalue()) == "T [info     ] first\n"
    assert STAMP.sub("T", second.getvalue()) == '{"n": 1, "event": "second", "level": "info", "timestamp": "T"}\n'


def test_capture_logs_sees_the_events_of_a_logger_cached_before_it() -> None:
    from structlog.testing import capture_logs

    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    log = logs.get_logger()
    log.info("before")
    with capture_logs() as captured:
        log.warning("during", n=1)
    log.info("after")
    assert captured == [{"event": "during", "n": 1, "log_level": "warning"}]
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["before", "after"]


def test_a_step_bound_in_context_leads_every_line_logged_within_it() -> None:
    """The step runner binds the step once (``bound_contextvars``): events and the
    standard library's records within it carry it first, as ``bind`` puts it;
    nothing after it does."""
    from structlog.contextvars import bound_contextvars

    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    log = logs.get_logger()
    with bound_contextvars(step="pack"):
        log.info("pulled", layers=2)
        log.bind(source="aicr").info("bound here wins", step="deploy")
        logging.getLogger("oras").warning("slow")
    log.info("after")
    assert STAMP.sub("T", out.getvalue()).splitlines() == [
        '{"step": "pack", "layers": 2, "event": "pulled", "level": "info", "timestamp": "T"}',
        '{"step": "deploy", "source": "aicr", "event": "bound here wins", "level": "info", "timestamp": "T"}',
        '{"step": "pack", "event": "slow", "level": "warning", "timestamp": "T"}',
        '{"event": "after", "level": "info", "timestamp": "T"}',
    ]


def test_every_event_of_a_step_carries_the_step_no_call_passes_it(
    tmp_path: Path, log_events: list[dict[str, Any]]
) -> None:
    from aicr_runner.run.machine import State
    from tests.unit.steps.test_steps import StubProcesses, context, step

    ctx = context(tmp_path, StubProcesses(), AICR_RUNNER_VALIDATE__ENABLED="true")
    step(ctx, State.VALIDATE)
    logs.get_logger().info("between steps")
    assert [(e["event"], e.get("step"), e.get("exit_code")) for e in log_events] == [
        ("step started", "validate", None),
        ("aicr validate exited", "validate", 0),
        ("step ended", "validate", 30),  # no CTRF report: a broken contract
        ("between steps", None, None),
    ]
