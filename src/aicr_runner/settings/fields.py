"""``setting``: the one definition of a setting (default, description, chart value,
where the chart renders it), the validators a field carries, the number types and
``Group``, the frozen base of every settings group (``settings.groups``,
``settings.model``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
)

from aicr_runner.settings import checks

__all__ = [
    "CHART_DEFAULT",
    "Group",
    "Into",
    "Seconds",
    "SecondsOrZero",
    "WholeNumber",
    "checked",
    "items_as_one",
    "setting",
]


#: Where the chart puts a setting: the Job's pod template (``pod``: part of the install's
#: identity, a change renames the Job) or the runner-settings ConfigMap (``configmap``:
#: may change without a new Job). Neither: the pod template sets it by hand (a
#: ``valueFrom``) or the chart does not set it.
Into = Literal["pod", "configmap"]

#: The key ``setting`` records a chart default under when the chart's differs from the runtime's.
CHART_DEFAULT = "chart_default"


def setting(
    default: Any = ...,
    *,
    doc: str,
    chart: str | None = None,
    legacy: str | None = None,
    chart_doc: str | None = None,
    chart_default: Any = ...,
    into: Into | None = None,
    render: str | None = None,
    omit_default: bool = False,
    **field: Any,
) -> Any:
    """A setting's one definition: default, description (``doc``: the environment table),
    chart value (``chart``: a dotted values path, which ``plan --values`` maps unless it is
    cluster-only) with its chart/values.yaml ``# --`` description (``chart_doc``, else
    ``doc``) and default (``chart_default``, else ``default``), and where the chart renders
    it (``into``), from its value by type or by ``render`` (a template expression).
    ``legacy``: the value's earlier chart path, still honoured (the chart's compatibility
    layer and ``plan --values`` read it when ``chart`` is at its default; both set apart: refused).
    ``scripts/gen-settings.py`` writes the tables, the env map and values.yaml from these.
    ``omit_default``: the chart renders the variable only when its value is not the chart's
    default (a text setting added after fleets installed: their unchanged values must
    render byte for byte what they did, so neither the Job's name nor anything else moves).
    ``default`` left out: none, or ``default_factory``; ``**field``: ``Field``'s own."""
    facts = (
        ("chart", chart),
        ("legacy", legacy),
        ("chart_doc", chart_doc),
        ("into", into),
        ("render", render),
        ("omit_default", omit_default),
    )
    extra: dict[str, Any] = {key: value for key, value in facts if value}
    if chart_default is not ...:
        extra[CHART_DEFAULT] = chart_default
    return Field(default, description=doc, json_schema_extra=extra or None, **field)


def checked(check: Callable[[object], Any]) -> BeforeValidator:
    """``check`` on the raw value, before pydantic's own type validation."""
    return BeforeValidator(check)


def items_as_one(value: object, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list's validation, an item's error raised on the whole list (``checks.ItemRefused``):
    its message shows the list as given, from the environment or from code alike."""
    try:
        return handler(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        context = dict(error.get("ctx") or {})
        if isinstance(context.get("error"), checks.Invalid):
            raise context["error"] from None
        item = next((part for part in error["loc"] if isinstance(part, int)), None)
        raise checks.ItemRefused(error["type"], context, item) from None


#: Numbers: read from plain decimal text by the check, bounded by the field's ``ge``/``le``
#: (``setting(..., ge=1, le=20)``), what they allow worded by ``settings.problems``.
WholeNumber = Annotated[int, checked(checks.whole_number)]
Seconds = Annotated[float, checked(checks.decimal_seconds)]
#: Seconds with ``ge=0``: 0 turns it off; otherwise at least ``MIN_SECONDS``.
SecondsOrZero = Annotated[float, checked(checks.decimal_seconds), AfterValidator(checks.zero_or_measurable)]


class Group(BaseModel):
    """A frozen group of settings; its variables are ``<GROUP>__<NAME>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
