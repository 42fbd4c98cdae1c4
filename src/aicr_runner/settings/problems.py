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
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import SettingsError

from aicr_runner.errors import InputProblem
from aicr_runner.masking import mask_userinfo
from aicr_runner.settings.checks import (
    ENV_PREFIX,
    Invalid,
    ItemRefused,
    OutOfRange,
    allowed_numbers,
    escaped,
    problem_line,
)

__all__ = ["rule_violations", "settings_error_lines", "validation_error_lines", "variable"]


def variable(loc: tuple[int | str, ...]) -> str:
    """The variable of a field path: ``('validate', 'phases', 2)`` -> ``AICR_RUNNER_VALIDATE__PHASES``
    (a list index is an item of that variable, not a part of its name)."""
    return ENV_PREFIX + "__".join(str(part).upper() for part in loc if isinstance(part, str))


#: pydantic's error types for a number outside a field's ``Field(ge=, le=)``.
_BOUNDS = frozenset({"greater_than_equal", "less_than_equal", "greater_than", "less_than"})
#: pydantic's error types for a boolean it cannot read (its strings are ours: true/false, 1/0,
#: yes/no, on/off, t/f, y/n, in any case).
_BOOLEAN = frozenset({"bool_parsing", "bool_type"})


def _field(loc: tuple[int | str, ...]) -> FieldInfo | None:
    """The settings field at ``loc`` (list indexes skipped)."""
    from aicr_runner.settings.runner import RunnerSettings

    model: type[BaseModel] | None = RunnerSettings
    field = None
    for part in (part for part in loc if isinstance(part, str)):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        kind = field.annotation
        model = kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None
    return field


def _allowed_numbers(loc: tuple[int | str, ...], *, syntax: bool) -> str:
    field = _field(loc)
    if field is None:
        return "not a number in the allowed range"
    low = next((bound.ge for bound in field.metadata if hasattr(bound, "ge")), None)
    high = next((bound.le for bound in field.metadata if hasattr(bound, "le")), None)
    return allowed_numbers(field.annotation, low, high, syntax=syntax)


def _reason(error: Mapping[str, Any]) -> Invalid:
    """What a field allows, for one of pydantic's errors: its check's reason, or pydantic's
    error ``type`` and ``ctx`` worded as the checks word them (the one place they are)."""
    loc = tuple(error.get("loc", ()))
    found = error.get("ctx")
    context: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    cause = context.get("error")
    item = next((part for part in reversed(loc) if isinstance(part, int)), None)
    kind = error.get("type")
    if isinstance(cause, OutOfRange) or kind in _BOUNDS:
        syntax = isinstance(cause, OutOfRange) and cause.syntax
        return Invalid(_allowed_numbers(loc, syntax=syntax), item=item)
    if isinstance(cause, ItemRefused):
        return _reason({"type": cause.kind, "ctx": cause.context, "loc": (*loc, cause.item)})
    if isinstance(cause, Invalid):
        return cause
    if kind == "enum":
        return Invalid(f"allowed: {context.get('expected')}", item=item)
    if kind in _BOOLEAN:
        return Invalid("allowed: true or false", item=item)
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


def rule_violations(error: ValidationError) -> list[InputProblem] | None:
    """The rules between settings a valid set of them breaks
    (``settings.rules.RuleViolations``), or None when ``error`` is about the values."""
    from aicr_runner.settings.rules import RuleViolations

    found = error.errors(include_url=False)
    context = found[0].get("ctx") if len(found) == 1 else None
    cause = context.get("error") if isinstance(context, Mapping) else None
    return list(cause.problems) if isinstance(cause, RuleViolations) else None


def settings_error_lines(error: SettingsError) -> list[tuple[str, str]]:
    """A source's own error (it words it with the field, not the variable),
    escaped, cut and masked like a value: up to its last '@', which may hide
    its start (a credential never shows)."""
    text = escaped(mask_userinfo(str(error)), limit=400)
    return [(ENV_PREFIX, f"{escaped(ENV_PREFIX)}*: the environment could not be read: {text}")]
