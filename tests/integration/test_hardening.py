"""Regression tests, one per case of the hardening report (hostile inputs).

Each used to end in a traceback, a silent fallback, a blamed sibling or minutes
of retries; each is now exit 2 with one line naming the input, before anything
is downloaded or run. (The mirror-URL credential case is test_mirror_credentials.py;
the generated suite over every setting is tests/unit/settings/test_bad_inputs.py.)
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.aicr import provenance
from aicr_runner.cli import main
from aicr_runner.errors import ConfigError, ProvenanceError
from aicr_runner.kube.sink import DirectorySink
from aicr_runner.settings import config
from aicr_runner.settings.values_file import env_from_values
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import clean_env
from tests.support.hostile_server import ReleaseServer

ROOT = Path(__file__).resolve().parents[2]
P = config.ENV_PREFIX


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReleaseServer]:
    with ReleaseServer(tmp_path / "releases") as srv:
        yield srv


def port_of(server: ReleaseServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def refused(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; it must refuse with exit 2 and no traceback. Returns stderr."""
    code = main(argv, environ=env)
    captured = capsys.readouterr()
    assert code == 2, captured.err[-2000:]
    assert "Traceback" not in captured.err + captured.out
    return captured.err


def plan(tmp_path: Path, *extra: str) -> list[str]:
    return ["plan", "--output", str(tmp_path / "plan"), *extra]


# -- 3. tracebacks instead of exit 2 -------------------------------------------------------------


@pytest.mark.parametrize("where", ["a file", "/proc/nope", "/dev/null/x"])
def test_a_work_dir_that_cannot_be_one_is_bad_input(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "a-file" if where == "a file" else Path(where)
    (tmp_path / "a-file").write_text("x")
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_WORK_DIR=str(work)), capsys)
    assert f"{P}WORK_DIR='{work}': " in err
    assert any(reason in err for reason in ("is not a directory", "cannot be created"))


def test_plan_output_dev_null_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = clean_env(tmp_path)
    err = refused(["plan", "--output", "/dev/null"], env, capsys)
    assert "invalid setting: --output='/dev/null': exists and is not a directory" in err


def test_recipe_args_of_60000_brackets_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_RECIPE__ARGS="[" * 60_000), capsys)
    assert f"{P}RECIPE__ARGS='[[[[" in err
    assert "(60000 characters)" in err
    assert len(err) < 1000


def test_recipe_args_nested_5000_deep_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_RECIPE__ARGS="[" * 5000 + "]" * 5000), capsys)
    assert "nested too deeply; list values are flat JSON arrays of strings" in err


def test_a_values_file_with_byte_ff_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "values.yaml"
    values.write_bytes(b"accelerator: h100\nservice: eks\xff\n")
    err = refused(plan(tmp_path, "--values", str(values)), clean_env(tmp_path), capsys)
    assert f"--values {values}: not valid UTF-8 (byte 0xff at offset 30); save it as UTF-8" in err


def test_non_utf8_criteria_and_work_dir_are_bad_input_not_a_crash_in_the_results_writer(tmp_path: Path) -> None:
    """Real bytes in a real environment (Python holds them as surrogates)."""
    env = {os.fsencode(k): os.fsencode(v) for k, v in clean_env(tmp_path).items()}
    cases = {
        b"AICR_RUNNER_CRITERIA__ACCELERATOR": b"h100\xff",
        b"AICR_RUNNER_WORK_DIR": os.fsencode(tmp_path) + b"/work\xfe",
    }
    for name, value in cases.items():
        result = subprocess.run(
            [sys.executable, "-m", "aicr_runner", "plan", "--output", str(tmp_path / "plan")],
            env={**env, name: value},
            capture_output=True,
            timeout=60,
            check=False,
        )
        err = result.stderr.decode("utf-8", "backslashreplace")
        assert result.returncode == 2, err
        assert "Traceback" not in err
        assert f"{name.decode()}=" in err
        assert "not valid UTF-8 (the byte or character \\x" in err


def test_the_results_writer_never_fails_on_text_that_is_not_utf8(tmp_path: Path) -> None:
    DirectorySink(tmp_path).put("status", data={"summary.txt": "criteria: accelerator=h100\udcff\n"})
    assert (tmp_path / "status" / "summary.txt").read_bytes() == b"criteria: accelerator=h100\\udcff\n"


# -- 4. a bad JSON list names the wrong variable -------------------------------------------------

#: The chart renders every sibling; a Job sees them all.
_CHART_VALUES = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
CHART_ENV = env_from_values({**_CHART_VALUES, "criteria": {**_CHART_VALUES["criteria"], "accelerator": "h100"}})


@pytest.mark.parametrize(
    ("name", "value", "sibling"),
    [
        ("RECIPE__ARGS", "notjson", "RECIPE__FLAGS"),
        ("DEPLOY__ARGS", "notjson", "DEPLOY__ENABLED"),
        ("VALIDATE__PHASES", "deployment", "VALIDATE__ENABLED"),
        ("VALIDATE__ARGS", "[", "VALIDATE__FLAGS"),
        ("RECIPE__EXPECT__COMPONENTS", "{}", "RECIPE__EXPECT__MIN_COMPONENTS"),
    ],
)
def test_a_bad_json_list_names_itself_not_its_sibling(name: str, value: str, sibling: str) -> None:
    env = {**CHART_ENV, f"{P}RECIPE__FLAGS": "--x", f"{P}{name}": value}
    assert f"{P}{sibling}" in env
    with pytest.raises(ConfigError) as caught:
        config.load(env)
    assert len(caught.value.problems) == 1, caught.value.problems
    assert caught.value.problems[0].startswith(f"{P}{name}={value!r}"), caught.value.problems


# -- 5. a trailing newline passed the $-anchored checks ------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "AICR__VERSION",
        "PACK__REF",
        "RECIPE__CONFIGMAP",
        "VALIDATE__RESULT_CONFIGMAP",
        "VALIDATE__EVIDENCE_CONFIGMAP",
        "STATUS_CONFIGMAP",
        "LEASE__NAME",
    ],
)
def test_a_trailing_newline_is_refused_before_anything_is_fetched(
    name: str, server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"AICR__VERSION": "v1.2.0", "PACK__REF": f"127.0.0.1:{port_of(server)}/acme/pack:1.0"}.get(name, "aicr-x")
    env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=server.url, **{f"{P}{name}": good + "\n"})
    err = refused(plan(tmp_path), env, capsys)
    assert f"{P}{name}='{good}\\n': a line break (\\n) at position {len(good)}" in err
    assert server.requests == []


# -- 6. settings not validated up front ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("NAMESPACE", "UPPER;rm -rf /", "must be empty or a Kubernetes name (DNS-1123"),
        ("WORK_DIR", "", "must be an absolute path (starting with '/') (an empty value is not 'here')"),
        ("WORK_DIR", "relative/work", "must be an absolute path"),
    ],
)
def test_settings_are_checked_up_front(
    name: str, value: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(plan(tmp_path), clean_env(tmp_path, **{f"{P}{name}": value}), capsys)
    assert f"{P}{name}={value!r}: {reason}" in err


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/a b", "a space at position"),
        ("/a\n", "a line break (\\n)"),
        (None, "port '99999' must be a number from 1 to 65535"),
        ("xn--a", "the host is not a valid internationalised domain name"),
        ("☃", "the host is not a valid internationalised domain name"),
    ],
)
def test_a_bad_mirror_url_is_refused_at_once_not_retried(
    path: str | None, reason: str, server: ReleaseServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if path is None:
        url = "http://127.0.0.1:99999/x"
    elif path.startswith("/"):
        url = server.url + path
    else:
        url = f"http://{path}.example:{port_of(server)}/x"
    started = time.monotonic()
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=url), capsys)
    assert f"{P}AICR__RELEASE_BASE_URL=" in err
    assert reason in err
    assert server.requests == []
    assert time.monotonic() - started < 10, "no retries"


# -- 7. an unwritable output reported success ----------------------------------------------------


@pytest.mark.parametrize("flag", ["--output", "--results-dir"])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(
    flag: str, fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "results"
    command = "plan" if flag == "--output" else "run"
    err = refused([command, "--aicr-binary", str(fake), flag, str(target)], clean_env(tmp_path), capsys)
    assert f"{flag}='{target}': cannot be created (Not a directory)" in err
    assert not (tmp_path / "work" / "logs").exists(), "refused before any step ran"


def test_a_report_that_did_not_land_fails_the_run(
    fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DirectorySink.put

    def full_disk(self: DirectorySink, name: str, **kw: Any) -> None:
        if name == "aicr-run-status":
            from aicr_runner.errors import CaptureError

            raise CaptureError(f"writing {self.root / name} failed: No space left on device")
        original(self, name, **kw)

    monkeypatch.setattr(DirectorySink, "put", full_disk)
    code = main(["plan", "--aicr-binary", str(fake), "--output", str(tmp_path / "plan")], environ=clean_env(tmp_path))
    out = capsys.readouterr()
    assert code == 26, out.err[-2000:]
    assert re.search(r"the run report \(\S+aicr-run-status\) was not written: writing", out.out + out.err)
    assert "No space left on device" in out.out + out.err


# -- 8. plan --values skipped the chart's schema -------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("accelerater: h200\n", "- at '': additional properties 'accelerater' not allowed"),
        ("accelerator: h100\naicr:\n  download: fast\n", "- at '/aicr/download': got string 'fast', want object"),
        # An earlier name (aicr.download's) takes null too: null drops a default, as it did.
        ("accelerator: h100\naicrDownload: fast\n", "- at '/aicrDownload': got string 'fast', want null or object"),
    ],
)
def test_plan_values_refuses_what_helm_install_refuses(
    body: str, line: str, fake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(body)
    err = refused(plan(tmp_path, "--aicr-binary", str(fake), "--values", str(values)), clean_env(tmp_path), capsys)
    assert err.splitlines()[:3] == [
        f"aicr-runner: --values {values}: values don't meet the specifications of the schema(s) in the "
        "following chart(s):",
        "nvidia-aicr:",
        line,
    ]


# -- 9. smaller ones ---------------------------------------------------------------------------------


def test_nan_seconds_are_refused_as_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS="nan"), capsys)
    assert (
        f"{P}AICR__DOWNLOAD_BUDGET_SECONDS='nan': allowed: a number of seconds from 0.001 to 7200 "
        "(a plain decimal number; not nan, inf or a unit)"
    ) in err


def test_a_budget_of_1e_320_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(plan(tmp_path), clean_env(tmp_path, AICR_RUNNER_PACK__PULL_BUDGET_SECONDS="1e-320"), capsys)
    assert f"{P}PACK__PULL_BUDGET_SECONDS='1e-320': allowed: a number of seconds from 0.001 to 7200" in err


def test_an_aicr_refused_by_provenance_is_no_longer_executable(tmp_path: Path) -> None:
    work = tmp_path / "work"
    downloaded = work / "aicr-release" / "aicr"
    downloaded.parent.mkdir(parents=True)
    downloaded.write_bytes(b"\x7fELF")
    downloaded.chmod(0o755)
    elsewhere = tmp_path / "opt" / "aicr"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"\x7fELF")
    elsewhere.chmod(0o755)
    settings = config.AicrSettings()
    for binary in (downloaded, elsewhere):
        with pytest.raises(ProvenanceError, match=r"no aicr-attestation\.sigstore\.json"):
            provenance.check_provenance(binary, None, settings, verifier=None, work=work)  # type: ignore[arg-type]
    assert stat.S_IMODE(downloaded.stat().st_mode) == 0o644, "the refused download cannot run"
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755, "an operator's binary is left alone"


def test_a_yaml_alias_bomb_is_refused_in_a_few_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    levels = [f"l0: &l0 [{', '.join(['x'] * 10)}]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    values = tmp_path / "bomb.yaml"
    values.write_text("\n".join(levels) + "\nrecipeArgs: *l8\n")
    started = time.monotonic()
    err = refused(plan(tmp_path, "--values", str(values)), clean_env(tmp_path), capsys)
    assert time.monotonic() - started < 10
    assert "more than 100000 values once YAML aliases are expanded (an alias bomb?)" in err
    assert len(err) < 1000
