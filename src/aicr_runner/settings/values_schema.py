"""The chart's ``values.schema.json``, checked offline for ``plan --values``.

``helm install`` refuses a values file that does not meet the chart's schema
(a typo such as ``accelerater``, a string where an object goes); ``plan --values``
must refuse the same file with the same words, without a chart: the image has
none. ``data/values.schema.json`` is a copy of ``chart/values.schema.json``
(``scripts/gen-settings.py`` writes it; a test keeps them identical). The
``jsonschema`` library validates against it (the validator of the draft the schema
declares, with Go's meaning of ``$`` in a pattern), and this module words each of its
errors (its keyword, path and value) the way Helm's validator
(santhosh-tekuri/jsonschema v6) does, grouped and ordered as Helm groups them:

    - at '/accelerator': value must be one of '', 'h100', ...
    - at '/validate': validation failed
      - at '/validate/phases': got object {}, want null or array

Two differences from Helm's words: a type error names the value (Helm says
only ``got object``), and a value or key that may be a URL or registry
reference is shown with its user and password masked (``masking``; Helm quotes
it whole). Helm prints the problems in a random order; here they come in
document order.
A keyword this module does not word is refused by a test, not skipped silently.
``jsonschema`` is imported on the first check, never by a command that reads no
values file.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

__all__ = ["KEYWORDS", "SCHEMA_PATH", "Problem", "load_schema", "normalised", "problems", "render"]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "data" / "values.schema.json"

#: Keywords that only annotate (never refuse a value).
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated"})
#: Keywords whose refusals are worded here, in the order Helm lists them at one place.
WORDED = (
    "type",
    "const",
    "enum",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "required",
    "additionalProperties",
)
#: Keywords that refuse through the values they hold (their problems are their children's).
APPLICATORS = frozenset({"properties", "additionalProperties", "items"})
KEYWORDS = ANNOTATIONS | APPLICATORS | frozenset(WORDED)
#: JSON types in the order the validator names them ("want null or array").
_TYPE_ORDER = ("null", "boolean", "number", "integer", "string", "array", "object")
#: Longest value quoted in a message (Helm quotes it whole; a plan bounds what it prints).
QUOTE_CHARS = 80


@dataclass
class Problem:
    """One refusal at ``location`` (a JSON pointer), or a group of them."""

    location: str
    message: str
    causes: list[Problem] = field(default_factory=list)

    def lines(self, indent: int = 0) -> Iterator[str]:
        yield f"{'  ' * indent}- at {quote(_masked_pointer(self.location))}: {self.message}"
        for cause in self.causes:
            yield from cause.lines(indent + 1)


def _masked_pointer(pointer: str) -> str:
    """A JSON pointer with each key masked on its own (a user's key under a
    free-form map may be a URL with a password)."""
    from aicr_runner.masking import mask_userinfo

    return "/".join(mask_userinfo(part) for part in pointer.split("/"))


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def quote(text: str, limit: int | None = None) -> str:
    """Go's ``%q`` in single quotes, as the validator quotes values and patterns."""
    cut = text if limit is None or len(text) <= limit else text[:limit]
    body = []
    for char in cut:
        code = ord(char)
        if char == "\\":
            body.append("\\\\")
        elif char == "'":
            body.append("\\'")
        elif char in "\a\b\f\n\r\t\v":
            body.append(
                {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[char]
            )
        elif 0xDC80 <= code <= 0xDCFF:
            body.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            body.append(char)
        elif code < 0x10000:
            body.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
        else:
            body.append(f"\\U{code:08x}")
    more = f"...({len(text)} characters)" if cut is not text else ""
    return "'" + "".join(body) + "'" + more


def _pointer(parent: str, key: str | int) -> str:
    return f"{parent}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _number(value: float) -> str:
    if isinstance(value, int):  # however large: no float conversion
        text = str(value)
    else:
        text = str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


#: Values that carry a credential (or are where one gets pasted by mistake): their
#: problems name the key and what is wrong, never the value, whatever its type.
SECRET_POINTERS = (
    "/dataPackAuth",
    "/dataPackSecret",
    "/job/extraEnv",
    "/pack/auth",
    "/pack/secret",
    "/validate/publish/identityTokenSecret",
    "/validate/publish/registrySecret",
)
#: What a problem says instead of a secret-bearing value.
NOT_SHOWN = "(value not shown: a secret-bearing setting)"


def _secret(where: str) -> bool:
    return any(where == pointer or where.startswith(pointer + "/") for pointer in SECRET_POINTERS)


def _shown(value: Any, where: str) -> str:
    """``_value``, or ``NOT_SHOWN`` under a secret-bearing key."""
    return NOT_SHOWN if _secret(where) else _value(value)


def _value(value: Any) -> str:
    """A value from the user's file, for a message: cut, quoted, a URL's or
    reference's user and password masked (Helm quotes it whole; a plan's lines
    go to the pod log and CI logs). A list or mapping is shown as JSON."""
    from aicr_runner.masking import mask_userinfo

    if isinstance(value, str):
        return quote(mask_userinfo(value), QUOTE_CHARS)
    # Masked whole, then cut: a cut before the '@' would leave the password unmasked.
    text = mask_userinfo(json.dumps(value, default=str))
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


def _literal(value: Any) -> str:
    """A schema constant as Helm's validator prints it (Go's ``%v``: null is ``<nil>``)."""
    if value is None:
        return "<nil>"
    return quote(value, QUOTE_CHARS) if isinstance(value, str) else json.dumps(value)


def _ecma(pattern: str) -> re.Pattern[str]:
    """A schema pattern (ECMA-262, searched) as a Python regex with Go's meaning
    of ``$``: the end of the text, never before a final line break."""
    out, in_class, escaped = [], False, False
    for char in pattern:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            out.append(char)
            escaped = True
        elif char == "[":
            in_class = True
            out.append(char)
        elif char == "]":
            in_class = False
            out.append(char)
        elif char == "$" and not in_class:
            out.append(r"\Z")
        else:
            out.append(char)
    return re.compile("".join(out))


_compiled: dict[str, re.Pattern[str]] = {}


def _matches(pattern: str, text: str) -> bool:
    regex = _compiled.get(pattern)
    if regex is None:
        regex = _compiled[pattern] = _ecma(pattern)
    return regex.search(text) is not None


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """The ``pattern`` keyword with Go's ``$`` (Helm's validator is Go): jsonschema's own
    uses Python's, which also matches before a final line break."""
    from jsonschema import ValidationError

    if isinstance(instance, str) and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator_class(draft: str) -> Any:
    from jsonschema import validators

    declared = validators.validator_for({"$schema": draft})
    return validators.extend(declared, {"pattern": _go_pattern})


def _errors(schema: Mapping[str, Any], values: Any) -> list[Any]:
    """jsonschema's errors for ``values``, by the validator of the draft ``schema`` declares."""
    return list(_validator_class(str(schema.get("$schema", "")))(schema).iter_errors(values))


@dataclass
class _Node:
    """The errors at one place of the values, and the places under it."""

    errors: list[Any] = field(default_factory=list)
    children: dict[str | int, _Node] = field(default_factory=dict)


def _tree(errors: list[Any]) -> _Node:
    root = _Node()
    for error in errors:
        node = root
        for key in error.absolute_path:
            node = node.children.setdefault(key, _Node())
        node.errors.append(error)
    return root


def _worded(error: Any, value: Any, where: str) -> str:  # noqa: PLR0911 - one wording per keyword
    """One error as Helm words it."""
    keyword, bound = error.validator, error.validator_value
    if keyword == "type":
        wanted = [bound] if isinstance(bound, str) else list(bound)
        want = " or ".join(sorted(wanted, key=_TYPE_ORDER.index))
        return f"got {_json_type(value)} {_shown(value, where)}, want {want}"
    if keyword == "const":
        return f"value must be {_literal(bound)}"
    if keyword == "enum":
        return "value must be one of " + ", ".join(_literal(option) for option in bound)
    if keyword in ("minLength", "maxLength"):
        return f"{keyword}: got {len(value)}, want {bound}"
    if keyword == "pattern":
        return f"{_shown(value, where)} does not match pattern {quote(bound)}"
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{keyword}: got {_number(value)}, want {_number(bound)}"
    if keyword in ("minItems", "maxItems"):
        return f"{keyword}: got {len(value)}, want {bound}"
    return str(error.message)


def _own(node: _Node, value: Any, where: str) -> tuple[list[Problem], list[Problem]]:
    """The problems of the keywords at one place: before its children's, and after them
    (the additional properties, named in the order of the values)."""
    errors = sorted(node.errors, key=lambda e: WORDED.index(e.validator) if e.validator in WORDED else len(WORDED))
    if any(error.validator == "type" for error in errors):
        return [Problem(where, _worded(errors[0], value, where))], []
    before: list[Problem] = []
    after: list[Problem] = []
    missing = [name for e in errors if e.validator == "required" for name in e.validator_value if name not in value]
    for error in errors:
        if error.validator == "required":
            continue
        if error.validator == "additionalProperties":
            after.append(Problem(where, _additional(error.schema, value, where)))
        else:
            before.append(Problem(where, _worded(error, value, where)))
    if missing:
        noun = "property" if len(dict.fromkeys(missing)) == 1 else "properties"
        before.append(Problem(where, f"missing {noun} " + ", ".join(quote(m) for m in dict.fromkeys(missing))))
    return before, after


def _additional(schema: Mapping[str, Any], value: Mapping[str, Any], where: str) -> str:
    refused = [key for key in value if key not in schema.get("properties", {})]
    names = ", ".join(_shown(name, _pointer(where, name)) for name in refused[:20])
    more = f" (and {len(refused) - 20} more)" if len(refused) > 20 else ""
    return f"additional properties {names}{more} not allowed"


def _problems(node: _Node, value: Any, where: str) -> list[Problem]:
    """Every problem at ``where`` and under it: its keywords', then its children's in the
    order of the values (each child's as one group when it has several)."""
    before, after = _own(node, value, where)
    if any(error.validator == "type" for error in node.errors):
        return before  # nothing else is said of a value of the wrong type
    keys = range(len(value)) if isinstance(value, list) else list(value) if isinstance(value, Mapping) else []
    children: list[Problem] = []
    for key in keys:
        if key in node.children:
            children.extend(_one(node.children[key], value[key], _pointer(where, key)))
    return before + children + after


def _one(node: _Node, value: Any, where: str) -> list[Problem]:
    """A place's problems as the validator reports them: one, or a group."""
    found = _problems(node, value, where)
    if len(found) > 1:
        return [Problem(where, "validation failed", found)]
    return found


def normalised(value: Any) -> Any:
    """YAML as Helm sees it after its YAML-to-JSON step: keys are strings, dates
    are strings. Raises ValueError for what JSON cannot hold (NaN, infinity)."""
    if isinstance(value, Mapping):
        return {_key(k): normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a JSON number (.nan and .inf have no JSON form)")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


def without_nulls(value: Any) -> Any:
    """Helm drops a key whose value is null before it validates (a user's null
    removes the chart default)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def problems(values: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> list[Problem]:
    """What the chart's schema refuses in ``values`` (a user's values file, parsed)."""
    schema = load_schema() if schema is None else schema
    document = without_nulls(normalised(values))
    found = _problems(_tree(_errors(schema, document)), document, "")
    # Helm lists the causes of the one failing group, not the group itself.
    while len(found) == 1 and found[0].causes:
        found = found[0].causes
    return found


def render(found: list[Problem], *, chart: str = "nvidia-aicr", max_lines: int = 40) -> list[str]:
    """Helm's report of ``found``, at most ``max_lines`` lines."""
    lines = [
        "values don't meet the specifications of the schema(s) in the following chart(s):",
        f"{chart}:",
    ]
    body = [line for problem in found for line in problem.lines()]
    if len(body) > max_lines:
        body = [*body[:max_lines], f"... and {len(body) - max_lines} more lines"]
    return lines + body
