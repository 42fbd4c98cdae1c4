"""Reading the environment into the settings, and the rules between settings.

``load`` reads the ``AICR_RUNNER_`` variables: it looks at the names itself first
(names in any case; an unknown name refused, where pydantic-settings' own
environment source would skip it; a variable set twice in two spellings refused,
where it would let the last one win), hands the known ones to the model through a
pydantic-settings source (prefix dropped, ``__`` nesting), validates them into
``RunnerSettings`` and raises ``ConfigError`` with one line per problem: unknown
variables first, then in the order of the environment table. Then the rules
between settings (``settings.rules``, the model's after-validator): the chart's
render-time guards, repeated for ``docker run``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource, SettingsError

from aicr_runner.errors import ConfigError, InputProblem
from aicr_runner.settings import rules
from aicr_runner.settings.checks import ENV_PREFIX, escaped
from aicr_runner.settings.problems import rule_violations, settings_error_lines, validation_error_lines
from aicr_runner.settings.runner import RunnerSettings, leaves

__all__ = ["env_var_names", "load"]


#: Every variable, in the order of the environment table.
_ORDER: dict[str, int] = {name: index for index, name in enumerate(ENV_PREFIX + name for name, _ in leaves())}


def env_var_names() -> list[str]:
    """Every environment variable the runtime reads (the contract test uses this)."""
    return list(_ORDER)


class _Environment(PydanticBaseSettingsSource):
    """The known variables (``_names`` has checked and spelled them) as the model's input:
    the prefix dropped, ``__`` the nesting, each value the raw string its field's check reads."""

    def __init__(self, known: Mapping[str, str]) -> None:
        super().__init__(RunnerSettings)
        self._known = known

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Required by the base class; __call__ below reads every variable at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, raw in self._known.items():
            *groups, leaf = name.removeprefix(ENV_PREFIX).lower().split("__")
            node = data
            for group in groups:
                node = node.setdefault(group, {})
            node[leaf] = raw
        return data


def _unknown(key: str) -> InputProblem:
    import difflib

    guess = difflib.get_close_matches(key.upper(), _ORDER, n=1, cutoff=0.85)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    line = f"{escaped(key)}: unknown setting{hint}; see docs/configuration.md 'Environment' for the names"
    return InputProblem(line, key)


def _names(env: Mapping[str, str]) -> tuple[dict[str, str], list[InputProblem], list[tuple[int, InputProblem]]]:
    """The known variables (each under its name in capitals, first spelling kept),
    the unknown ones, and the ones set twice in two spellings."""
    known: dict[str, str] = {}
    spelled: dict[str, str] = {}
    unknown: list[InputProblem] = []
    twice: list[tuple[int, InputProblem]] = []
    for key, raw in env.items():
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        if upper not in _ORDER:
            unknown.append(_unknown(key))
        elif upper in spelled:
            line = f"{upper}: set twice, as {spelled[upper]} and {key}; set it once"
            twice.append((_ORDER[upper], InputProblem(line, upper)))
        else:
            spelled[upper] = key
            known[upper] = raw
    return known, unknown, twice


def _validated(
    known: Mapping[str, str], *, local_pack: bool
) -> tuple[RunnerSettings | None, list[InputProblem], list[tuple[int, InputProblem]]]:
    """The settings, or the rules they break, or their problems (by the environment table's order)."""
    context = {rules.RULES: True, rules.LOCAL_PACK: local_pack}
    try:
        return RunnerSettings.model_validate(_Environment(known)(), context=context), [], []
    except ValidationError as exc:
        broken = rule_violations(exc)
        if broken is not None:
            return None, broken, []
        lines = validation_error_lines(exc, known)
    except SettingsError as exc:  # not expected from a mapping of strings; still one line, never a traceback
        lines = settings_error_lines(exc)
    return None, [], [(_ORDER.get(name, len(_ORDER)), InputProblem(line, name)) for name, line in lines]


def load(environ: Mapping[str, str] | None = None, *, local_pack: bool = False) -> RunnerSettings:
    """Read settings from ``environ`` (default ``os.environ``).

    Raises ``ConfigError`` with one readable line per problem, unknown
    variables first, then in the order of the environment table; when there are
    none, with the rules between settings the values break (``settings.rules``).
    """
    known, unknown, twice = _names(os.environ if environ is None else environ)
    settings, broken, found = _validated(known, local_pack=local_pack)
    problems = sorted(unknown) + [problem for _, problem in sorted(twice + found)]
    if problems or broken or settings is None:
        raise ConfigError(problems or broken)
    return settings
