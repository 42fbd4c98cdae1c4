"""The fast relay keeps every guarantee of the line-by-line one.

The property test drives the real path (a child process, ``SubprocessRunner``
with the logs module's redaction, the deploy and aicr relays (``relays``), the
pod-log writer in both formats) with random secrets at random positions in
random line streams, including lines longer than the split limit, and looks at
every output: the pod log, the per-step log files, the deploy markers and the
kept tail.
"""

from __future__ import annotations

import io
import json
import re
import resource
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicr_runner import logs
from aicr_runner.aicr import classify, progress
from aicr_runner.aicr.relays import deploy_relay
from aicr_runner.children import blockscan
from aicr_runner.children.lines import LineSplitter
from aicr_runner.children.process import SubprocessRunner, _Delivery
from aicr_runner.kube.sink import DirectorySink
from aicr_runner.run.machine import Machine, State
from aicr_runner.settings.config import LogFormat, load
from aicr_runner.steps.context import Mode, RunConfig, RunContext, RunExternals

#: No "*": the mask must not be able to form a secret; no whitespace: secrets are stripped.
SECRET_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:=+/.é─✓"
TEXT_ALPHABET = SECRET_ALPHABET + " \t\r\\\"'{}[]"
MARKER_FRAGMENTS = [
    "┌─ [1/3] gpu-operator  →  gpu-operator",
    "└─ ✓ gpu-operator installed",
    "└─ ✗ ",
    " FAILED (after 1 attempts)",
    "Deployment completed with failures:",
    "DRA kubelet plugin restart blocked, retry needed for: ",
    "Error: ",
    '{"level":"ERROR","msg":"command failed","error":"',
    "  ↺ nfd: attempt 1/5 failed, retrying in 5s...",
    "Installing nfd (node-feature-discovery)...",
    "Applying manifests for skyhook-customizations...",
    "RETRY: nfd helm install failed (attempt 1/5), retrying in 5s...",
    "ERROR: nfd helm install failed after 6 attempts",
    "Deployment complete.",
]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logs.configure(LogFormat.CONSOLE)


def _context(work: Path, limit: int, one_pass_bytes: int = 64 * 1024) -> RunContext:
    settings = load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100", "AICR_RUNNER_WORK_DIR": str(work)})
    return RunContext(
        config=RunConfig(settings=settings, mode=Mode.RUN, environ={"PATH": "/usr/bin:/bin"}),
        externals=RunExternals(
            sink=DirectorySink(work / "results"),
            processes=SubprocessRunner(max_line_bytes=limit, one_pass_bytes=one_pass_bytes),
        ),
        report=Machine.new_report(runner_version="t", aicr_version="v1.2.0", criteria={}),
    )


secret_text = st.one_of(
    st.text(alphabet=SECRET_ALPHABET, min_size=4, max_size=40),
    # Few letters: secrets overlapping each other and themselves, one a prefix of another.
    st.text(alphabet="ab0é", min_size=4, max_size=12),
    # Never only ASCII: the runner's own words are (event and field names, timestamps,
    # digests), and a "secret" such as ``step`` or ``ab0a`` is in them whatever the
    # stream held (Hypothesis found ``step`` in ``step=deploy``). What is tested is
    # that a secret the stream carries never comes out.
).filter(lambda secret: not secret.isascii())
plain_text = st.text(alphabet=TEXT_ALPHABET, max_size=30)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[str], bytes, int]:
    secrets = draw(st.lists(secret_text, min_size=1, max_size=3, unique=True))
    part = st.one_of(plain_text, st.sampled_from(secrets), st.sampled_from(MARKER_FRAGMENTS))
    lines = draw(st.lists(st.lists(part, max_size=12).map("".join), max_size=25))
    # Sometimes an over-long line made of secrets, so cuts fall near or inside them.
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "".join(draw(st.lists(st.sampled_from(secrets), min_size=5))))
    ending = draw(st.sampled_from(["\n", "\r\n", ""]))
    stream = ("\n".join(lines) + ending).encode()
    return secrets, stream, draw(st.sampled_from([16, 48, 1024]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=streams(),
    fmt=st.sampled_from([LogFormat.CONSOLE, LogFormat.JSON]),
    # 0: every block takes the flood path (one blockscan pass finds the secrets).
    one_pass_bytes=st.sampled_from([0, 64 * 1024]),
)
def test_random_secrets_never_reach_any_output(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[Any, ...], fmt: LogFormat, one_pass_bytes: int
) -> None:
    secrets, stream, limit = case
    work = tmp_path_factory.mktemp("relay")
    for secret in secrets:
        logs.register_secret(secret)
    pod_log = io.StringIO()
    logs.configure(fmt, stream=pod_log)
    (work / "stream.bin").write_bytes(stream)
    bundle = work / "bundle"
    bundle.mkdir()
    (bundle / "deploy.sh").write_text(f"cat {work / 'stream.bin'}\n")
    ctx = _context(work, limit, one_pass_bytes)
    markers = classify.DeployMarkers()
    ctx.run_child(State.DEPLOY, ["bash", str(bundle / "deploy.sh")], on_block=deploy_relay(State.DEPLOY.value, markers))
    tail: deque[str] = deque(maxlen=60)
    seen: list[str] = []
    ctx.run_child(State.RECIPE, ["cat", str(work / "stream.bin")], tail=tail, on_line=seen.append)
    logs.flush_relay()

    outputs = {
        "pod log": pod_log.getvalue(),
        "deploy.log": (work / "logs" / "deploy.log").read_text(),
        "recipe.log": (work / "logs" / "recipe.log").read_text(),
        "markers": "\n".join(
            [*markers.started, *markers.installed, *markers.failed, *markers.reported_failed, *markers.deferred]
        ),
        "tail": "\n".join(tail),
        "lines": "\n".join(seen),
    }
    for secret in secrets:
        for where, text in outputs.items():
            assert secret not in text, f"{secret!r} leaked into the {where}"
    for name in ("deploy.log", "recipe.log"):
        for line in outputs[name].splitlines():
            assert len(line.encode()) <= limit, f"{name}: a {len(line.encode())}-byte line over the {limit} limit"
    if fmt is LogFormat.JSON:
        for line in outputs["pod log"].splitlines():
            assert isinstance(json.loads(line), dict)


#: Blanks ``str.isspace`` knows beyond ASCII's (feed strips them before a line start).
UNICODE_BLANKS = "\x1c\x85\xa0\u2003\u3000"


@given(
    text=st.text(alphabet=TEXT_ALPHABET + UNICODE_BLANKS + "\n", max_size=400),
    fragments=st.lists(st.sampled_from([*MARKER_FRAGMENTS, "\xa0 Error: x", "\x1b[31mred\x1b[0m"]), max_size=6),
)
def test_scanning_a_block_reads_the_markers_as_feeding_every_line(text: str, fragments: list[str]) -> None:
    block = "\n".join([text, *fragments, "└─ ✓ nfd installed", "⚠ nfd install failed, continuing (--best-effort)"])
    block += "\n"
    assert blockscan.scan(block).json_plain == logs._needs_no_escape(block[:-1])
    # 0.11's mode scans for every candidate, its own lines' too.
    by_line = classify.DeployMarkers(results_reported=False)
    expected = []
    at = 0
    for line in block[:-1].split("\n"):
        level = by_line.feed(line)
        if level is not None:
            expected.append((at, at + len(line), level))
        at += len(line) + 1
    by_block = classify.DeployMarkers(results_reported=False)
    assert by_block.scan(block) == expected
    assert by_block == by_line


def test_every_marker_contains_a_scan_candidate_or_starts_as_a_line_start() -> None:
    """``scan`` only feeds lines holding a candidate or starting with a line start;
    a marker with neither would be missed."""
    literals = [*classify.FAILURE_REPORT_MARKERS, classify.DRA_DEFERRED_MARKER, *classify._PREFLIGHT_FAILED]
    for literal in literals:
        assert any(candidate in literal for candidate in blockscan.ANYWHERE), literal
    # feed's error lines start with these, and progress.component_line's one literal is 0.11's
    assert classify.LINE_STARTS == classify._ERROR_PREFIXES
    assert "Deployment complete." in classify.LEGACY_LINE_STARTS
    for pattern, _kind, legacy in progress._PATTERNS:
        starts = classify.LINE_STARTS + (classify.LEGACY_LINE_STARTS if legacy else ())
        anywhere = any(candidate in pattern for candidate in blockscan.ANYWHERE)
        at_start = any(pattern.startswith("^" + start) for start in starts)
        assert anywhere or at_start, pattern


@pytest.mark.parametrize("results_reported", [True, False], ids=["1.x", "0.11"])
def test_a_line_start_is_found_after_blanks_on_any_line_of_a_block_and_nowhere_else(results_reported: bool) -> None:
    block = "Error: first\nplain\n \t\rERROR: blanks first\nnot an Error: mid-line\nInstalling nfd (nfd)...\n"
    found = classify.DeployMarkers(results_reported=results_reported).scan(block)
    legacy = [] if results_reported else ["Installing nfd (nfd)..."]
    assert [block[start:end] for start, end, _level in found] == ["Error: first", " \t\rERROR: blanks first", *legacy]


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_relayed_lines_render_as_structlog_renders_an_event(fmt: LogFormat) -> None:
    lines = ["plain", 'with "quotes" and \\ backslash', "tab\there", "unicode é ─ ✓"]
    fast, slow = io.StringIO(), io.StringIO()
    logs.configure(fmt, stream=fast)
    logs.relay("\n".join(lines) + "\n", step="deploy", source="deploy.sh")
    logs.flush_relay()
    logs.configure(fmt, stream=slow)
    log = logs.get_logger().bind(step="deploy")
    for line in lines:
        log.info(line, source="deploy.sh")
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
    assert stamp.sub("T", fast.getvalue()) == stamp.sub("T", slow.getvalue())
    if fmt is LogFormat.JSON:
        assert [json.loads(line)["event"] for line in fast.getvalue().splitlines()] == lines


def test_relayed_lines_come_before_a_later_event_and_are_flushed_at_step_end() -> None:
    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    logs.relay("first\n", step="deploy", source="deploy.sh")
    assert out.getvalue() == ""  # buffered ...
    logs.get_logger().info("marker")  # ... until the next structured event
    logs.relay("second\n", step="deploy", source="deploy.sh")
    logs.flush_relay_if_due()
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["first", "marker"]
    logs._relay._since = 0.0  # the oldest buffered line is now over 100 ms old
    logs.flush_relay_if_due()
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["first", "marker", "second"]


def test_a_cut_never_falls_inside_a_secret_or_a_character() -> None:
    splitter = LineSplitter(10, lambda: [b"SECRET-42"])
    out = splitter.feed(b"abcdefSECRET-42xyz") + splitter.finish()
    assert out.split(b"\n")[:-1] == [b"abcdef", b"SECRET-42x", b"yz"]
    splitter = LineSplitter(4, lambda: [])
    out = splitter.feed("aé─b".encode()) + splitter.finish()
    assert [piece.decode() for piece in out.split(b"\n")[:-1]] == ["aé", "─b"]


def test_a_secret_longer_than_the_limit_is_one_piece() -> None:
    splitter = LineSplitter(4, lambda: [b"LONGSECRET"])
    out = b"".join(splitter.feed(bytes([c])) for c in b"LONGSECRET!") + splitter.finish()
    assert out == b"LONGSECRET\n!\n"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["version"], {}),
        (["--help"], {}),
        (["plan"], {"AICR_RUNNER_LOG_FORMAT": "bogus"}),
        (["run"], {"AICR_RUNNER_NO_SUCH_SETTING": "1"}),
    ],
)
def test_version_help_and_bad_input_never_import_the_heavy_clients(args: list[str], env: dict[str, str]) -> None:
    probe = (
        "import sys\n"
        "from aicr_runner.cli import main\n"
        "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
        "heavy = ['kubernetes', 'oras', 'httpx', 'requests']\n"
        "print(code, [name for name in heavy if name in sys.modules], file=sys.stderr)\n"
    )
    if args[0] in ("version", "--help"):  # not even the settings or logging libraries
        probe = probe.replace("'requests']", "'requests', 'importlib.metadata', 'pydantic', 'structlog']")
    result = subprocess.run(
        [sys.executable, "-c", probe, *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )
    code, imported = result.stderr.strip().splitlines()[-1].split(" ", 1)
    assert code == ("2" if env else "0")
    assert imported == "[]"


def test_waiting_for_a_secret_never_hides_the_next_line_from_the_length_check() -> None:
    splitter = LineSplitter(16, lambda: [b"0000"])
    stream = b"0" * 20 + b"\n" + b"0" * 13 + "└─ ✗ \n".encode()
    out = b"".join(splitter.feed(stream[at : at + 16]) for at in range(0, len(stream), 16)) + splitter.finish()
    lines = out.split(b"\n")[:-1]
    assert b"".join(lines) == stream.replace(b"\n", b"")
    assert all(len(line) <= 16 for line in lines), lines


@pytest.mark.parametrize(
    ("secrets", "stream", "limit", "expected"),
    [
        # A secret overlapping itself: the cut fell at the start of its second
        # occurrence, inside the first, leaving 5 bytes of it on a 4-byte line.
        (["bbabbbba"], "bbabbbbabbbba\n", 4, ["***", "bbbb", "a"]),
        # One secret inside another and both overlapping a third: moving the cut
        # back for one put it inside another, and after eight moves the cut was
        # left where it was, 9 bytes of an 11-byte secret on a 5-byte line.
        (["bbbaaaaaaab", "ababbaab", "abab"], "bbbaaaaaaababab\n", 5, ["***", "***"]),
        # A secret that is a prefix of another: the longer one is kept whole.
        (["TOKEN-1234", "TOKEN"], "xxTOKEN-1234yy\n", 8, ["xx", "***", "yy"]),
        # Two secrets overlapping at the limit: the cut goes before both.
        (["abcdef", "defghi"], "xxxabcdefghiyyy\n", 8, ["xxx", "***", "ghiyyy"]),
    ],
)
@pytest.mark.parametrize("chunk", [1, 3, None])
def test_overlapping_secrets_never_put_a_cut_inside_a_secret(
    secrets: list[str], stream: str, limit: int, expected: list[str], chunk: int | None
) -> None:
    for secret in secrets:
        logs.register_secret(secret)
    splitter = LineSplitter(limit, logs.protected_bytes)
    data = stream.encode()
    size = chunk or limit
    out = b"".join(splitter.feed(data[at : at + size]) for at in range(0, len(data), size)) + splitter.finish()
    lines = [logs.redact(piece) for piece in out.decode().split("\n")[:-1]]
    assert lines == expected
    assert all(len(line.encode()) <= limit for line in lines), lines


@pytest.mark.parametrize("fmt", [LogFormat.CONSOLE, LogFormat.JSON])
def test_a_secret_reading_like_the_date_level_or_step_is_masked_in_relayed_lines(fmt: LogFormat) -> None:
    """The relay writes the timestamp, level, step and source itself; they are
    values of the event, masked as structlog's processor masks them."""
    year = datetime.now(UTC).year
    for secret in (str(year), str(year + 1), "info", "deploy"):
        logs.register_secret(secret)
    fast, slow = io.StringIO(), io.StringIO()
    logs.configure(fmt, stream=fast)
    logs.relay("one\ntwo\n", step="deploy", source="deploy.sh")
    logs.flush_relay()
    logs.configure(fmt, stream=slow)
    log = logs.get_logger().bind(step="deploy")
    for line in ("one", "two"):
        log.info(line, source="deploy.sh")
    # The year may be masked inside the time too (microseconds 2026xx).
    stamp = re.compile(r"\*\*\*-\d\d-\d\dT[0-9:.*]+Z")
    assert stamp.sub("T", fast.getvalue()) == stamp.sub("T", slow.getvalue())
    for secret in (str(year), "info", "deploy"):
        assert secret not in fast.getvalue()


def test_an_isolated_registry_holds_what_it_is_given_and_then_what_it_held() -> None:
    logs.register_secret("kept-secret")
    with logs.SECRETS.isolated(["only-this"]):
        logs.register_secret("gone-after")
        assert logs.redact("kept-secret only-this gone-after") == "kept-secret *** ***"
        assert logs.protected_bytes() == (b"gone-after", b"only-this")
    assert logs.redact("kept-secret only-this gone-after") == "*** only-this gone-after"
    with logs.SECRETS.isolated():
        logs.register_secret("gone-after")
        assert logs.redact("kept-secret gone-after") == "*** ***"
    assert logs.redact("kept-secret gone-after") == "*** gone-after"


def test_an_over_long_line_inside_a_big_chunk_is_cut() -> None:
    """Reads may be longer than the limit: every line in a chunk is checked, not
    only the one continuing the held-back remainder."""
    splitter = LineSplitter(8, lambda: [])
    out = splitter.feed(b"ab\n" + b"x" * 20 + b"\ncd\nefghijklmn") + splitter.finish()
    assert out.split(b"\n")[:-1] == [b"ab", b"x" * 8, b"x" * 8, b"x" * 4, b"cd", b"efghijkl", b"mn"]


def test_relaying_reuses_its_memory_instead_of_faulting_it_in_per_read(tmp_path: Path) -> None:
    """With glibc's defaults every read's blocks were fresh pages from the
    kernel: about 45 000 page faults for these 512 reads of 64 KiB in the JSON
    format. The heap now keeps them: a few hundred faults in all."""
    with (tmp_path / "pod.log").open("w") as pod_log:
        logs.configure(LogFormat.JSON, stream=pod_log)
        line = "helm.go:84: [debug] Created tunnel using local port: '40593' upgrade.go:142: preparing upgrade"
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        SubprocessRunner().run(
            ["bash", "-c", f"yes '{line}' | head -c {32 * 1024 * 1024}"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
            log_path=tmp_path / "deploy.log",
            on_block=lambda text: logs.relay(text, step="deploy", source="deploy.sh"),
        )
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        logs.flush_relay()
    assert (tmp_path / "deploy.log").stat().st_size >= 32 * 1024 * 1024
    assert faults < 2048, f"{faults} page faults relaying 512 reads"


@settings(max_examples=60, deadline=None)
@given(secrets=st.lists(secret_text, min_size=1, max_size=3, unique=True), invalid=st.booleans(), data=st.data())
def test_one_pass_redacts_a_block_exactly_as_redact_does(
    tmp_path_factory: pytest.TempPathFactory, secrets: list[str], invalid: bool, data: st.DataObject
) -> None:
    """The flood path (one blockscan pass, ``redact`` only where a secret is) writes
    the same log and hands the relay the same text as redacting every block,
    with CRLF line ends and bytes that are not UTF-8 too."""
    # Hypothesis runs many examples in one test: each gets exactly its own secrets.
    with logs.SECRETS.isolated(secrets):
        part = st.one_of(plain_text, st.sampled_from(secrets), st.sampled_from([*MARKER_FRAGMENTS, "\r\n", "\n"]))
        raw = ("".join(data.draw(st.lists(part, max_size=30))) + "\n").encode() + (b"\xff\xfe\n" if invalid else b"")
        work = tmp_path_factory.mktemp("one-pass")
        results = []
        for one_pass_bytes in (0, len(raw) + 1):
            seen: list[str] = []
            with (work / f"{one_pass_bytes}.log").open("wb") as log:
                _Delivery(log, logs.redact, on_line=None, on_block=seen.append, one_pass_bytes=one_pass_bytes)(raw)
            results.append(((work / f"{one_pass_bytes}.log").read_bytes(), seen))
    assert results[0] == results[1]
    for secret in secrets:
        assert secret not in results[0][0].decode(errors="replace")


def test_only_the_lines_that_mean_something_become_structlog_events() -> None:
    """The relay's plain lines never reach structlog (its per-event path is the
    cost the relay avoids); an error line does, with the step and source."""
    from structlog.testing import capture_logs

    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    on_block = deploy_relay("deploy", classify.DeployMarkers(results_reported=True))
    with capture_logs() as events:
        on_block("plain one\nError: chart not found\nplain two\n")
        logs.flush_relay()
    assert events == [
        {"step": "deploy", "source": "deploy.sh", "event": "Error: chart not found", "log_level": "error"}
    ]
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["plain one", "plain two"]
