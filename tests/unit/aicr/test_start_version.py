"""The start line's question to a preinstalled aicr, against tiny real programs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from aicr_runner.aicr import start_version
from aicr_runner.settings.config import load


def program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "aicr"
    path.write_text(f"#!{sys.executable}\nimport os, sys, time\n{body}\n")
    path.chmod(0o755)
    return path


#: Settings load only with criteria stated.
CRITERIA = {"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"}


def ask(
    binary: Path | str, *, provenance: str = "off", env: dict[str, str] | None = None, sha256: str = ""
) -> start_version.StartVersion:
    settings = load(
        {
            **CRITERIA,
            "AICR_RUNNER_AICR__BINARY": str(binary),
            "AICR_RUNNER_AICR__PROVENANCE__MODE": provenance,
            "AICR_RUNNER_AICR__BINARY_SHA256": sha256,
        }
    )
    return start_version.ask(settings, env if env is not None else dict(os.environ))


def test_a_released_binary_is_named_by_its_version_and_its_lines_kept(tmp_path: Path) -> None:
    aicr = program(tmp_path, "print('aicr version 1.2.0 (commit: abc, date: 2026-05-04T00:00:00Z)')")
    assert ask(aicr).answer() == ("v1.2.0", ("aicr version 1.2.0 (commit: abc, date: 2026-05-04T00:00:00Z)",))


def test_the_question_runs_while_the_caller_goes_on(tmp_path: Path) -> None:
    """``ask`` returns with the binary still running; ``answer`` waits for it. The
    binary waits for a file the test writes only after ``ask`` returned: had ``ask``
    waited, the binary would have given up (after 30 s) and said another version."""
    gate = tmp_path / "gate"
    aicr = program(
        tmp_path,
        f"end = time.monotonic() + 30\n"
        f"while not os.path.exists({str(gate)!r}) and time.monotonic() < end: time.sleep(0.01)\n"
        f"print('aicr version 1.2.0' if os.path.exists({str(gate)!r}) else 'aicr version 0.0.1')",
    )
    question = ask(aicr)
    gate.touch()
    assert question.answer()[0] == "v1.2.0"


def test_the_question_carries_no_runner_setting_or_credential(tmp_path: Path) -> None:
    seen = tmp_path / "env"
    aicr = program(
        tmp_path, f"open({str(seen)!r}, 'w').write('\\n'.join(sorted(os.environ)))\nprint('aicr version 1.2.0')"
    )
    env = {"PATH": os.environ["PATH"], "AICR_RUNNER_PACK__PASSWORD": "s3cret", "DOCKER_CONFIG": "/x", "KEEP": "1"}
    ask(aicr, env=env).answer()
    names = set(seen.read_text().split("\n"))
    assert {"KEEP", "PATH"} <= names
    assert not names & {"AICR_RUNNER_PACK__PASSWORD", "DOCKER_CONFIG"}


def test_a_build_without_version_data_is_said_unknown_and_its_lines_kept(tmp_path: Path) -> None:
    aicr = program(tmp_path, "print('aicr version dev (commit: unknown)')")
    said, printed = ask(aicr).answer()
    assert (
        said
        == "unknown version ('aicr version dev (commit: unknown)'), capabilities detected from flags by the fetch step"
    )
    assert printed == ("aicr version dev (commit: unknown)",)


def test_a_failing_binary_is_said_unknown_with_its_exit_code(tmp_path: Path) -> None:
    aicr = program(tmp_path, "sys.exit(3)")
    assert ask(aicr).answer() == (f"unknown (preinstalled {aicr} --version exited 3)", None)


def test_a_binary_that_cannot_start_is_left_to_the_fetch_step(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-aicr"
    assert ask(missing).answer() == (f"unknown (preinstalled {missing}; the fetch step checks it)", None)


def test_a_binary_that_does_not_answer_is_stopped_and_left_to_the_fetch_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(start_version, "_ANSWER_SECONDS", 0.2)
    aicr = program(tmp_path, "time.sleep(600)")
    question = ask(aicr)
    assert question.answer() == (f"unknown (preinstalled {aicr}; the fetch step checks it)", None)
    process = question._question
    assert process is not None
    assert process.returncode is not None, "killed and reaped"


def test_a_binary_whose_provenance_is_to_be_verified_is_not_run(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    aicr = program(tmp_path, f"open({str(ran)!r}, 'w')")
    said, printed = ask(aicr, provenance="require").answer()
    assert (said, printed) == (f"preinstalled {aicr} (version reported once its provenance is verified)", None)
    assert not ran.exists()


def test_a_binary_pinned_to_a_sha256_is_not_run_before_the_fetch_step_checks_it(tmp_path: Path) -> None:
    """Its checksum fails closed: a swapped binary must not run, not even for --version."""
    ran = tmp_path / "ran"
    aicr = program(tmp_path, f"open({str(ran)!r}, 'w')")
    said, printed = ask(aicr, sha256="0" * 64).answer()
    assert (said, printed) == (f"preinstalled {aicr} (version reported once its sha256 is checked)", None)
    assert not ran.exists()


def test_without_a_preinstalled_binary_the_release_tag_is_said() -> None:
    settings = load(CRITERIA)
    assert start_version.ask(settings, {}).answer() == (
        f"{settings.aicr.version} (release tag, checked after download)",
        None,
    )


def test_a_shutdown_request_ends_the_wait_at_once(tmp_path: Path) -> None:
    """SIGTERM while the binary has not answered: killed and reaped, not waited for
    (its deadline is ten seconds away); the fetch step, which a shutdown stops, is left the version."""
    aicr = program(tmp_path, "time.sleep(600)")
    question = ask(aicr)
    started = time.monotonic()
    assert question.answer(interrupted=lambda: True) == (
        f"unknown (preinstalled {aicr}; the fetch step checks it)",
        None,
    )
    assert time.monotonic() - started < start_version._ANSWER_SECONDS
    process = question._question
    assert process is not None
    assert process.returncode is not None, "killed and reaped"
