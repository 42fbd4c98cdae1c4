"""pydantic's errors about the settings, as the one-line problems the runner prints.

A ``ValidationError`` names a field path (``('validate', 'phases')``), not a
variable, and words its reasons for programmers. Each error becomes
``NAME='value' (item N): what is allowed``: the path mapped back to its variable,
the value as it was given (cut, escaped, a URL's user and password masked: see
``settings.checks.shown``), and the reason the field's check gave (``settings.checks.Invalid``).
An error no check raised (pydantic's own type checks) keeps pydantic's reason,
never its input echo or documentation link.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError
from pydantic_settings import SettingsError

from aicr_runner.masking import mask_userinfo
from aicr_runner.settings.checks import ENV_PREFIX, Invalid, escaped, problem_line

__all__ = ["rule_violations", "settings_error_lines", "validation_error_lines", "variable"]


def variable(loc: tuple[int | str, ...]) -> str:
    """The variable of a field path: ``('validate', 'phases', 2)`` -> ``AICR_RUNNER_VALIDATE__PHASES``
    (a list index is an item of that variable, not a part of its name)."""
    return ENV_PREFIX + "__".join(str(part).upper() for part in loc if isinstance(part, str))


def _reason(error: Mapping[str, object]) -> Invalid:
    found = error.get("ctx")
    cause = found.get("error") if isinstance(found, Mapping) else None
    if isinstance(cause, Invalid):
        return cause
    loc = error.get("loc")
    item = next((part for part in reversed(loc) if isinstance(part, int)), None) if isinstance(loc, tuple) else None
    return Invalid(str(error.get("msg", "not a valid value")), item=item)


def validation_error_lines(error: ValidationError, given: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(variable, line)`` for each problem of ``RunnerSettings``' ``error`` (its
    paths start at the top of the tree); ``given``: the raw
    values by variable name (what was set, which pydantic may have parsed)."""
    lines: list[tuple[str, str]] = []
    for found in error.errors(include_url=False):
        name = variable(found["loc"])
        raw = given.get(name, found.get("input"))
        lines.append((name, problem_line(name, raw, _reason(found))))
    return lines


def rule_violations(error: ValidationError) -> list[str] | None:
    """The lines of the rules between settings a valid set of them breaks
    (``settings.rules.RuleViolations``), or None when ``error`` is about the values."""
    from aicr_runner.settings.rules import RuleViolations

    found = error.errors(include_url=False)
    context = found[0].get("ctx") if len(found) == 1 else None
    cause = context.get("error") if isinstance(context, Mapping) else None
    return list(cause.lines) if isinstance(cause, RuleViolations) else None


def settings_error_lines(error: SettingsError) -> list[tuple[str, str]]:
    """A source's own error (it words it with the field, not the variable),
    escaped, cut and masked like a value: up to its last '@', which may hide
    its start (a credential never shows)."""
    text = escaped(mask_userinfo(str(error)), limit=400)
    return [(ENV_PREFIX, f"{escaped(ENV_PREFIX)}*: the environment could not be read: {text}")]
