"""The settings on pydantic-settings: its errors as the runner's lines, and where pydantic is paid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from aicr_runner.settings.config import ENV_PREFIX
from aicr_runner.settings.model import PackSettings
from aicr_runner.settings.problems import settings_error_lines, validation_error_lines, variable
from aicr_runner.settings.runner import RunnerSettings


def lines(build: object, given: dict[str, str] | None = None) -> list[tuple[str, str]]:
    assert callable(build)
    with pytest.raises(ValidationError) as caught:
        build()
    return validation_error_lines(caught.value, given or {})


def test_a_field_path_is_its_variable_and_a_list_index_is_not_part_of_the_name() -> None:
    assert variable(("validate", "publish", "mode")) == f"{ENV_PREFIX}VALIDATE__PUBLISH__MODE"
    assert variable(("validate", "phases", 2)) == f"{ENV_PREFIX}VALIDATE__PHASES"


def test_a_check_in_code_is_the_same_line_as_from_the_environment() -> None:
    found = lines(lambda: RunnerSettings.model_validate({"validate": {"phases": ["deployment", "smoke"]}}))
    assert found == [
        (
            f"{ENV_PREFIX}VALIDATE__PHASES",
            f"""{ENV_PREFIX}VALIDATE__PHASES='["deployment", "smoke"]' (item 1): allowed: 'deployment', """
            "'performance' or 'conformance'",
        )
    ]


def test_the_value_shown_is_the_one_given_not_what_pydantic_holds() -> None:
    given = {f"{ENV_PREFIX}AICR__DOWNLOAD_ATTEMPTS": "7 tries"}
    found = lines(lambda: RunnerSettings.model_validate({"aicr": {"download_attempts": 70}}), given)
    assert found == [
        (
            f"{ENV_PREFIX}AICR__DOWNLOAD_ATTEMPTS",
            f"{ENV_PREFIX}AICR__DOWNLOAD_ATTEMPTS='7 tries': allowed: a whole number from 1 to 20",
        )
    ]


def test_an_error_no_check_raised_keeps_pydantic_s_reason_without_its_echo_or_link() -> None:
    [(name, line)] = lines(lambda: PackSettings.model_validate({"bogus": "https://user:hunter2@example.com/x"}))
    assert name == f"{ENV_PREFIX}BOGUS"
    assert line == f"{ENV_PREFIX}BOGUS='https://***@example.com/x': Extra inputs are not permitted"
    assert "hunter2" not in line
    assert "errors.pydantic.dev" not in line


def test_a_credential_in_a_url_is_masked_in_the_line() -> None:
    url = "https://me:p/ss#w@mirror.example.com/aicr"
    [(_, line)] = lines(lambda: RunnerSettings.model_validate({"aicr": {"release_base_url": url}}))
    assert "p/ss" not in line
    assert "me:" not in line
    assert line.startswith(f"{ENV_PREFIX}AICR__RELEASE_BASE_URL='https://***@mirror.example.com/aicr': ")


def test_settings_built_in_code_never_read_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"{ENV_PREFIX}LOG_FORMAT", "json")
    monkeypatch.setenv(f"{ENV_PREFIX}AICR__DOWNLOAD_ATTEMPTS", "not a number")
    built = RunnerSettings()
    assert built.log_format.value == "console"
    assert built.aicr.download_attempts == 5


def test_the_names_and_checks_do_not_import_pydantic_and_the_settings_do() -> None:
    probe = (
        "import sys\n"
        "from aicr_runner.settings.config import ENV_PREFIX, Invalid, LogFormat, absolute_path, load\n"
        "from aicr_runner.settings.config import problem_line, shown\n"
        "before = 'pydantic' in sys.modules or 'pydantic_settings' in sys.modules\n"
        "from aicr_runner.settings.config import RunnerSettings\n"
        "print(before, 'pydantic_settings' in sys.modules, RunnerSettings.__module__)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.split() == ["False", "True", "aicr_runner.settings.runner"]


def test_a_refused_values_file_never_imports_pydantic(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text('dataPackPlainHTTP: "yes"\n')
    probe = (
        "import sys\n"
        "from aicr_runner.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(code, [m for m in ('pydantic', 'pydantic_settings') if m in sys.modules], file=sys.stderr)\n"
    )
    argv = ["plan", "--values", str(values), "--output", str(tmp_path / "plan")]
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert "dataPackPlainHTTP" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "2 []", result.stderr


def test_a_source_error_is_one_escaped_masked_line() -> None:
    error = SettingsError('error parsing value for field "ref" from source "https://me:pw@host/x\nnext"')
    [(name, line)] = settings_error_lines(error)
    assert name == ENV_PREFIX
    assert line == f'{ENV_PREFIX}*: the environment could not be read: ***@host/x\\nnext"'
    plain = SettingsError('error parsing value for field "steps" from source "EnvSettingsSource"')
    assert settings_error_lines(plain)[0][1].endswith('for field "steps" from source "EnvSettingsSource"')
