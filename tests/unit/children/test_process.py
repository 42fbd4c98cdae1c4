"""SubprocessRunner with real tiny processes (the ansible-runner way): streaming,
exit codes, shutdown escalation, process groups, and the curated environment."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicr_runner.children.process import (
    ProcessResult,
    ProcessRunner,
    ShutdownController,
    SubprocessRunner,
    child_env,
)
from aicr_runner.errors import InterruptedRun, ToolError

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}


def run(
    tmp_path: Path,
    argv: list[str],
    *,
    runner: ProcessRunner | None = None,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
) -> ProcessResult:
    return (runner or SubprocessRunner()).run(
        argv, env=env or ENV, cwd=tmp_path, log_path=tmp_path / "logs" / "step.log", on_line=on_line
    )


def request_after(controller: ShutdownController, seconds: float, times: int = 1) -> threading.Timer:
    def fire() -> None:
        for _ in range(times):
            controller.request(signal.SIGTERM)

    timer = threading.Timer(seconds, fire)
    timer.start()
    return timer


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its /proc state says Z.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------


def test_stdout_and_stderr_are_merged_line_by_line_in_order(tmp_path: Path) -> None:
    lines: list[str] = []
    script = (
        "import sys\nfor i in range(5):\n    print(f'line {i}', file=sys.stdout if i % 2 else sys.stderr, flush=True)"
    )
    result = run(tmp_path, [PY, "-c", script], on_line=lines.append)
    assert result.exit_code == 0
    assert lines == [f"line {i}" for i in range(5)]
    assert result.log_path.read_text() == "".join(f"line {i}\n" for i in range(5))
    assert result.interrupted is False


def test_lines_reach_the_callback_while_the_child_still_runs(tmp_path: Path) -> None:
    """The child blocks until the callback has seen its 500th line: a runner that
    buffered until exit would never get there (the test would time out)."""
    gate = tmp_path / "gate"
    script = (
        "import os, sys, time\n"
        "for i in range(500):\n    print('x' * 80, i, flush=True)\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.01)\n"
        "print('released', flush=True)"
    )
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        if len(seen) == 500:
            gate.touch()

    result = run(tmp_path, [PY, "-c", script], on_line=on_line)
    assert result.exit_code == 0
    assert len(seen) == 501
    assert seen[-1] == "released"


def test_huge_output_is_streamed_not_accumulated(tmp_path: Path) -> None:
    total = 24 * 1024 * 1024
    script = (
        f"import sys\nline = b'y' * 99 + b'\\n'\nfor _ in range({total // 100}):\n    sys.stdout.buffer.write(line)"
    )
    count = 0

    def on_line(line: str) -> None:
        nonlocal count
        count += 1

    tracemalloc.start()
    try:
        result = run(tmp_path, [PY, "-c", script], on_line=on_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert count == total // 100
    assert result.log_path.stat().st_size == (total // 100) * 100
    assert peak < 4 * 1024 * 1024, f"peak Python allocation {peak} bytes while relaying {total} bytes"


def test_a_line_without_newline_is_passed_on_in_bounded_pieces(tmp_path: Path) -> None:
    pieces: list[str] = []
    runner = SubprocessRunner(max_line_bytes=1000)
    result = run(tmp_path, [PY, "-c", "import sys; sys.stdout.write('z' * 2500)"], runner=runner, on_line=pieces.append)
    assert result.exit_code == 0
    assert [len(piece) for piece in pieces] == [1000, 1000, 500]


def test_invalid_utf8_is_replaced_and_carriage_returns_dropped(tmp_path: Path) -> None:
    lines: list[str] = []
    script = "import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe done\\r\\nnext\\n')"
    run(tmp_path, [PY, "-c", script], on_line=lines.append)
    assert lines == ["ok\ufffd\ufffd done", "next"]


def test_callback_errors_surface_after_the_child_is_done(tmp_path: Path) -> None:
    def explode(line: str) -> None:
        raise RuntimeError(f"relay broke on {line}")

    with pytest.raises(RuntimeError, match="relay broke on first"):
        run(tmp_path, [PY, "-c", "print('first'); print('second')"], on_line=explode)
    assert (tmp_path / "logs" / "step.log").read_text() == "first\nsecond\n"


# ---------------------------------------------------------------------------
# exit codes and errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 130", 130),
        ("kill -TERM $$", 128 + signal.SIGTERM),
        ("kill -KILL $$", 128 + signal.SIGKILL),
    ],
)
def test_exit_codes_follow_the_shell(tmp_path: Path, command: str, code: int) -> None:
    assert run(tmp_path, ["bash", "-c", command]).exit_code == code


def test_missing_program_is_a_tool_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no-such-aicr: program not found") as caught:
        run(tmp_path, [str(tmp_path / "no-such-aicr"), "--version"])
    assert caught.value.exit_code == 27


def test_non_executable_program_is_a_tool_error(tmp_path: Path) -> None:
    script = tmp_path / "aicr"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(ToolError, match="not executable"):
        run(tmp_path, [str(script)])


def test_missing_working_directory_is_named(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    with pytest.raises(ToolError, match=r"working directory .*gone does not exist"):
        runner.run(["true"], env=ENV, cwd=tmp_path / "gone", log_path=tmp_path / "log")


def test_the_child_gets_exactly_the_given_environment(tmp_path: Path) -> None:
    lines: list[str] = []
    env = {**ENV, "ONLY_THIS": "1"}
    run(tmp_path, [PY, "-c", "import os; print(sorted(os.environ))"], env=env, on_line=lines.append)
    assert lines == [str(sorted(env))]


def test_the_child_runs_in_its_own_session(tmp_path: Path) -> None:
    lines: list[str] = []
    run(
        tmp_path,
        [PY, "-c", "import os; print(os.getsid(0) == os.getpid() == os.getpgrp())"],
        on_line=lines.append,
    )
    assert lines == ["True"]


# ---------------------------------------------------------------------------
# shutdown
# ---------------------------------------------------------------------------


def test_a_child_that_finishes_within_the_grace_period_exits_normally(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=10, kill_after_seconds=1)
    script = "trap 'echo got TERM; exit 99' TERM; sleep 0.6; echo finished"
    lines: list[str] = []
    timer = request_after(controller, 0.1)
    started = time.monotonic()
    result = run(tmp_path, ["bash", "-c", script], runner=runner, on_line=lines.append)
    timer.join()
    assert result.exit_code == 0
    assert lines == ["finished"]
    assert result.interrupted is True
    assert result.stopped is False, "it finished on its own: nothing was stopped"
    assert time.monotonic() - started < 5


def test_after_the_grace_period_the_group_gets_term(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=0.3, kill_after_seconds=5)
    script = "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 30 & wait $!"
    lines: list[str] = []
    timer = request_after(controller, 0.1)
    started = time.monotonic()
    result = run(tmp_path, ["bash", "-c", script], runner=runner, on_line=lines.append)
    timer.join()
    elapsed = time.monotonic() - started
    assert result.exit_code == 7
    assert lines == ["ready", "got TERM"]
    assert result.interrupted is True
    assert result.stopped is True
    assert 0.3 <= elapsed < 4


def test_a_child_that_ignores_term_is_killed(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=0.2, kill_after_seconds=0.3)
    timer = request_after(controller, 0.1)
    started = time.monotonic()
    ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    result = run(tmp_path, [PY, "-c", ignore_term], runner=runner)
    timer.join()
    assert result.exit_code == 128 + signal.SIGKILL
    assert result.interrupted is True
    assert result.stopped is True
    assert time.monotonic() - started < 5


def test_a_call_past_its_own_deadline_is_stopped_and_said_overdue(tmp_path: Path) -> None:
    """No shutdown: the call's deadline alone stops the group (TERM at once), and the
    result says overdue, not interrupted."""
    script = "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 30 & wait $!"
    lines: list[str] = []
    started = time.monotonic()
    result = SubprocessRunner().run(
        ["bash", "-c", script],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "out.log",
        on_line=lines.append,
        deadline_seconds=0.3,
    )
    assert (result.exit_code, result.overdue, result.stopped, result.interrupted) == (7, True, True, False)
    assert not result.stopped_by_shutdown
    assert lines == ["ready", "got TERM"]
    assert 0.3 <= time.monotonic() - started < 5


def test_a_call_with_a_deadline_is_stopped_at_once_on_shutdown_without_the_grace(tmp_path: Path) -> None:
    """A question (``deadline_seconds``) changes nothing: SIGTERM stops it at once, not after
    the grace period a deploy gets (here 30 s) nor at its own deadline (60 s)."""
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=30, kill_after_seconds=5)
    timer = request_after(controller, 0.1)
    started = time.monotonic()
    result = runner.run(
        ["bash", "-c", "trap 'exit 7' TERM; sleep 60 & wait $!"],
        env=ENV,
        cwd=tmp_path,
        log_path=tmp_path / "out.log",
        deadline_seconds=60,
    )
    timer.join()
    assert (result.exit_code, result.interrupted, result.stopped, result.overdue) == (7, True, True, False)
    assert result.stopped_by_shutdown
    assert time.monotonic() - started < 20


def test_a_call_that_ends_within_its_deadline_is_not_overdue(tmp_path: Path) -> None:
    result = SubprocessRunner().run(
        ["true"], env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "out.log", deadline_seconds=30
    )
    assert (result.exit_code, result.overdue, result.stopped) == (0, False, False)


def test_the_whole_process_group_is_stopped(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=0.2, kill_after_seconds=1)
    lines: list[str] = []
    timer = request_after(controller, 0.3)
    # The grandchild stands in for helm under deploy.sh.
    run(tmp_path, ["bash", "-c", "sleep 30 & echo $!; wait"], runner=runner, on_line=lines.append)
    timer.join()
    grandchild = int(lines[0])
    deadline = time.monotonic() + 5
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild)


def test_a_second_signal_skips_the_rest_of_the_grace_period(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=60, kill_after_seconds=1)
    timer = request_after(controller, 0.1, times=2)
    started = time.monotonic()
    result = run(tmp_path, ["bash", "-c", "sleep 30 & wait"], runner=runner)
    timer.join()
    assert result.exit_code == 128 + signal.SIGTERM
    assert time.monotonic() - started < 5


def test_a_real_sigterm_to_the_runner_is_recorded_not_forwarded(tmp_path: Path) -> None:
    controller = ShutdownController()
    runner = SubprocessRunner(shutdown=controller, grace_seconds=5, kill_after_seconds=1)
    timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGTERM))
    with controller.installed():
        timer.start()
        result = run(tmp_path, ["bash", "-c", "trap 'exit 9' TERM; sleep 0.8; echo done"], runner=runner)
        timer.join()
    assert result.exit_code == 0, "the child never saw the runner's SIGTERM"
    assert result.interrupted is True
    assert controller.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is not controller.request


def test_no_child_starts_once_shutdown_was_requested(tmp_path: Path) -> None:
    controller = ShutdownController()
    controller.request(signal.SIGINT)
    marker = tmp_path / "ran"
    with pytest.raises(InterruptedRun, match="SIGINT"):
        run(tmp_path, ["touch", str(marker)], runner=SubprocessRunner(shutdown=controller))
    assert not marker.exists()


def test_a_leftover_grandchild_holding_the_pipe_is_killed_after_the_drain_time(tmp_path: Path) -> None:
    runner = SubprocessRunner(drain_seconds=0.3)
    lines: list[str] = []
    started = time.monotonic()
    result = run(tmp_path, ["bash", "-c", "sleep 30 & echo $!; exit 4"], runner=runner, on_line=lines.append)
    assert result.exit_code == 4
    assert result.interrupted is False
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while pid_alive(int(lines[0])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(int(lines[0]))


# ---------------------------------------------------------------------------
# child_env
# ---------------------------------------------------------------------------


def test_child_env_strips_runner_settings_and_credentials() -> None:
    base = {
        "PATH": "/bin",
        "AICR_RUNNER_WORK_DIR": "/w",
        "aicr_runner_criteria__service": "eks",
        "DOCKER_CONFIG": "/leak",
        "COSIGN_IDENTITY_TOKEN": "t0ken",
        "AICR_LOG_JSON": "1",
        "FAKE_AICR_DEPLOY_FAIL": "nfd",
    }
    assert child_env(base) == {"PATH": "/bin", "AICR_LOG_JSON": "1", "FAKE_AICR_DEPLOY_FAIL": "nfd"}
    assert "DOCKER_CONFIG" in base, "the input mapping is not modified"


def test_child_env_adds_credentials_only_when_given() -> None:
    base = {"PATH": "/bin", "DOCKER_CONFIG": "/ambient"}
    assert child_env(base, docker_config="/publish-auth", identity_token="tok") == {
        "PATH": "/bin",
        "DOCKER_CONFIG": "/publish-auth",
        "COSIGN_IDENTITY_TOKEN": "tok",
    }
    assert child_env(base, docker_config="", identity_token=None) == {"PATH": "/bin"}


@given(
    st.dictionaries(
        st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_abc0123456789", min_size=1, max_size=24),
        st.text(max_size=8),
        max_size=12,
    )
)
def test_child_env_keeps_everything_else_verbatim(base: dict[str, str]) -> None:
    result = child_env(base)
    for key, value in base.items():
        dropped = key.upper().startswith("AICR_RUNNER_") or key in ("DOCKER_CONFIG", "COSIGN_IDENTITY_TOKEN")
        assert (key in result) is not dropped
        if not dropped:
            assert result[key] == value
    assert set(result) <= set(base)


def test_redact_hook_scrubs_the_log_file_and_the_relay(tmp_path: Path) -> None:
    seen: list[str] = []
    runner = SubprocessRunner(redact=lambda line: line.replace("hunter2", "***"))
    result = runner.run(
        [sys.executable, "-c", "print('token=hunter2'); print('plain')"],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "step.log",
        on_line=seen.append,
    )
    assert result.exit_code == 0
    assert seen == ["token=***", "plain"]
    assert (tmp_path / "step.log").read_text() == "token=***\nplain\n"


# -- stopping deploy.sh only between helm operations (aicr_runner.helm.guard) ------------------


def guarded_deploy(tmp_path: Path, helm_seconds: float) -> tuple[list[str], dict[str, str], Path]:
    """A deploy.sh that runs two `helm upgrade` in a row through the guard's shim;
    the "real" helm records its start and end in a journal."""
    from aicr_runner.helm.guard import HelmGuard

    journal = tmp_path / "journal"
    real = tmp_path / "real-helm"
    real.write_text(f'#!/bin/sh\necho "start $3" >> {journal}\nsleep {helm_seconds}\necho "end $3" >> {journal}\n')
    real.chmod(0o755)
    deploy = tmp_path / "deploy.sh"
    deploy.write_text(
        "#!/usr/bin/env bash\ntrap 'exit 130' TERM\n"
        'for c in one two; do echo "component $c"; helm upgrade --install $c chart -n ns; done\n'
    )
    guard = HelmGuard(tmp_path / "guard")
    bin_dir = guard.install(str(real))
    env = {**ENV, "PATH": f"{bin_dir}:{ENV['PATH']}"}
    return ["bash", str(deploy)], env, journal


def test_a_shutdown_stops_deploy_sh_after_the_helm_in_flight_not_during_it(tmp_path: Path) -> None:
    from aicr_runner.helm.guard import HelmGuard

    argv, env, journal = guarded_deploy(tmp_path, helm_seconds=1.5)
    shutdown = ShutdownController()
    runner = SubprocessRunner(shutdown=shutdown, grace_seconds=60)
    lines: list[str] = []
    timer = request_after(shutdown, 0.8)  # the first helm is in flight then
    started = time.monotonic()
    result = runner.run(
        argv,
        env=env,
        cwd=tmp_path,
        log_path=tmp_path / "deploy.log",
        on_line=lines.append,
        safe_stop=HelmGuard(tmp_path / "guard"),
    )
    timer.join()
    elapsed = time.monotonic() - started
    assert journal.read_text().splitlines() == ["start one", "end one"], "helm one ran whole, helm two never started"
    assert result.safe_point
    assert result.stopped
    assert result.exit_code == 130
    assert elapsed < 10, "stopped at the safe point, not after the 60 s grace"
    assert any("helm-guard: helm upgrade one -n ns started" in line for line in lines)
    assert any("helm-guard: helm upgrade one -n ns ended" in line for line in lines)


def test_without_a_helm_in_flight_the_stop_is_immediate(tmp_path: Path) -> None:
    from aicr_runner.helm.guard import HelmGuard

    script = tmp_path / "deploy.sh"
    script.write_text("#!/usr/bin/env bash\ntrap 'exit 130' TERM\nsleep 30 & wait $!\n")
    (tmp_path / "guard-dir").mkdir()
    shutdown = ShutdownController()
    timer = request_after(shutdown, 0.3)
    started = time.monotonic()
    result = SubprocessRunner(shutdown=shutdown, grace_seconds=60).run(
        ["bash", str(script)],
        env=ENV,
        cwd=tmp_path,
        log_path=tmp_path / "deploy.log",
        safe_stop=HelmGuard(tmp_path / "guard-dir"),
    )
    timer.join()
    assert result.safe_point
    assert time.monotonic() - started < 5


def test_the_shim_refuses_a_new_helm_operation_once_the_stop_was_requested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aicr_runner.helm import guard as helmguard

    _, _, journal = guarded_deploy(tmp_path, helm_seconds=0)
    guard = helmguard.HelmGuard(tmp_path / "guard")
    guard.request_stop()
    code = helmguard.main([str(tmp_path / "real-helm"), str(tmp_path / "guard"), "upgrade", "--install", "x", "c"])
    assert code == helmguard.REFUSED_EXIT
    assert "not starting helm upgrade x" in capsys.readouterr().out
    assert not journal.exists()


def test_the_output_pipe_is_widened_as_far_as_the_kernel_allows() -> None:
    """A chatty child fills a 64 KiB pipe in microseconds; a wider one lets it
    run ahead and each read carry more lines."""
    import fcntl

    from aicr_runner.children.process import _PIPE_BYTES, _widen_pipe

    read, write = os.pipe()
    try:
        _widen_pipe(read)
        size = fcntl.fcntl(read, fcntl.F_GETPIPE_SZ)
    finally:
        os.close(read)
        os.close(write)
    assert size == min(_PIPE_BYTES, int(Path("/proc/sys/fs/pipe-max-size").read_text()))
