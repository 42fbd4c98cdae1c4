"""Start-up checks that answered late or in the wrong words (issue 26, items 2 to 4).

Each is exit 2 before any step, on one line naming the input, its value and
what is allowed: a results directory whose report subdirectory is a file (the
plan used to run through and end with exit 26), a values-file type error that
names the value, a JSON value that is not an array, a trusted root that is a
directory, a work directory that takes no file for a reason other than
permissions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aicr_runner import cli
from aicr_runner.settings.config import shown

P = "AICR_RUNNER_"


def base_env(tmp: Path) -> dict[str, str]:
    """A plan that would pass but for the case's input; a value wrongly taken fails
    fast (the preinstalled aicr does not exist: exit 27)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        f"{P}CRITERIA__ACCELERATOR": "h100",
        f"{P}AICR__BINARY": "/nonexistent/aicr",
        f"{P}AICR__PROVENANCE__MODE": "off",
        f"{P}WORK_DIR": str(tmp / "work"),
        f"{P}TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }


def refused(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``argv`` is refused with (exit 2)."""
    code = cli.main(argv, environ=env)
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- item 2: a results directory that cannot take the run report ------------------------------------


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ("STATUS_CONFIGMAP", "aicr-run-status"),
        ("RECIPE__CONFIGMAP", "aicr-recipe"),
        ("VALIDATE__RESULT_CONFIGMAP", "aicr-validate-result"),
        ("VALIDATE__EVIDENCE_CONFIGMAP", "aicr-evidence-bundle"),
    ],
)
def test_a_result_subdirectory_that_is_a_file_is_refused_before_any_work(
    setting: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "plan"
    output.mkdir()
    (output / name).write_text("not a directory")
    line = refused(["plan", "--output", str(output)], base_env(tmp_path), capsys)
    assert line == (
        f"aicr-runner: invalid setting: --output={shown(str(output))}: {name}/ in it exists and is not a "
        f"directory; the results {P}{setting} names go there: remove it or choose another --output"
    )
    assert sorted(p.name for p in output.iterdir()) == [name], "no step ran"


def test_the_results_directory_of_a_run_is_checked_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "aicr-run-status").symlink_to(tmp_path / "nowhere")
    line = refused(["run", "--results-dir", str(results)], base_env(tmp_path), capsys)
    assert line.startswith(
        f"aicr-runner: invalid setting: --results-dir={shown(str(results))}: aicr-run-status/ in it "
    )
    assert "choose another --results-dir" in line


def test_a_renamed_or_disabled_result_is_checked_under_its_own_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "plan"
    output.mkdir()
    (output / "aicr-run-status").write_text("an old file, not this run's")
    env = {**base_env(tmp_path), f"{P}STATUS_CONFIGMAP": "my-status"}
    (output / "my-status").write_text("x")
    assert f"--output={shown(str(output))}: my-status/ in it exists" in refused(
        ["plan", "--output", str(output)], env, capsys
    )
    (output / "my-status").unlink()
    # The name in use is a directory-to-be: the plan runs (and stops at the missing aicr, exit 27).
    assert cli.main(["plan", "--output", str(output)], environ=env) == 27
    assert (output / "my-status" / "report.json").is_file()
    capsys.readouterr()


# -- item 3: a values-file type error names the value ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"validate: {phases: deployment}\n", "- at '/validate/phases': got string 'deployment', want null or array"),
        (b"aicr: {download: {attempts: '3'}}\n", "- at '/aicr/download/attempts': got string '3', want integer"),
        (b"recipeArgs: [--nodes, 4]\n", "- at '/recipeArgs/1': got number 4, want string"),
        (b"aicr: {download: [fast]}\n", "- at '/aicr/download': got array [\"fast\"], want object"),
        # An earlier name takes null too (null drops a default, as it did before the regrouping).
        (b"aicrDownload: [fast]\n", "- at '/aicrDownload': got array [\"fast\"], want null or object"),
        (b"aicrReleaseBaseUrl: {u: 'https://u:pa/ss@h'}\n", "- at '/aicrReleaseBaseUrl': got object ***@h\"}, want"),
    ],
)
def test_a_type_error_in_a_values_file_names_the_value(
    body: bytes, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "values.yaml").write_bytes(b"accelerator: h100\n" + body)
    argv = ["plan", "--output", str(tmp_path / "plan"), "--values", str(tmp_path / "values.yaml")]
    assert cli.main(argv, environ=base_env(tmp_path)) == 2
    err = capsys.readouterr().err
    assert expected in err.splitlines()[2], err
    assert "pa/ss" not in err


# -- item 4: the words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{}", "valid JSON, but an object, not an array"),
        ('{"a": 1}', "valid JSON, but an object, not an array"),
        ('"--nodes"', "valid JSON, but a string, not an array"),
        ("4", "valid JSON, but a number, not an array"),
        ("true", "valid JSON, but true or false, not an array"),
        ("null", "valid JSON, but null, not an array"),
        ("--nodes 4", "not valid JSON; list values are JSON arrays"),
        ("[NaN]", "not valid JSON (NaN is not JSON)"),
        ('["a",]', "not valid JSON (Expecting value)"),
        # The decoder's own reason, its position left out, whatever it holds (a ':' too).
        ('[{"a" 1}]', "not valid JSON (Expecting ':' delimiter)"),
        ("[1" + "0" * 5000 + "]", "not valid JSON (a number of 5001 digits, too long to read)"),
    ],
)
def test_json_that_is_not_an_array_is_not_called_invalid_json(
    value: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**base_env(tmp_path), f"{P}BUNDLE__ARGS": value}
    line = refused(["plan", "--output", str(tmp_path / "plan")], env, capsys)
    assert line.startswith(f"aicr-runner: invalid setting: {P}BUNDLE__ARGS='")
    assert f": {reason}" in line
    assert """list values are JSON arrays, e.g. '["--nodes", "4"]'""" in line


@pytest.mark.parametrize("mode", ["require", "warn"])
def test_a_trusted_root_that_is_a_directory_is_refused_at_start(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**base_env(tmp_path), f"{P}AICR__PROVENANCE__MODE": mode}
    env[f"{P}AICR__PROVENANCE__TRUSTED_ROOT"] = str(tmp_path)
    line = refused(["plan", "--output", str(tmp_path / "plan")], env, capsys)
    assert line == (
        f"aicr-runner: invalid setting: {P}AICR__PROVENANCE__TRUSTED_ROOT={shown(str(tmp_path))}: is a directory; "
        "give a Sigstore trusted_root.json file, or leave it empty for the shipped public-good root"
    )
    env[f"{P}AICR__PROVENANCE__TRUSTED_ROOT"] = str(tmp_path / "missing.json")
    assert ": does not exist; give a Sigstore" in refused(["plan", "--output", str(tmp_path / "plan")], env, capsys)


def test_a_trusted_root_is_not_checked_when_provenance_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**base_env(tmp_path), f"{P}AICR__PROVENANCE__TRUSTED_ROOT": str(tmp_path)}
    # Not read, so not refused: the plan runs into the missing aicr (exit 27).
    assert cli.main(["plan", "--output", str(tmp_path / "plan")], environ=env) == 27
    capsys.readouterr()


def test_a_work_directory_that_takes_no_file_says_why_not_that_it_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """/proc/1 is a directory; creating a file there fails with ENOENT, which
    used to read "is not writable (No such file or directory)"."""
    env = {**base_env(tmp_path), f"{P}WORK_DIR": "/proc/1"}
    line = refused(["plan", "--output", str(tmp_path / "plan")], env, capsys)
    assert line == (
        f"aicr-runner: invalid setting: {P}WORK_DIR='/proc/1': takes no file: creating one failed with "
        "'No such file or directory', as in /proc and other special file systems"
    )
