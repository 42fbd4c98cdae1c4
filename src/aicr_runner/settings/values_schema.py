"""The chart's ``values.schema.json``, checked offline for ``plan --values``.

``helm install`` refuses a values file that does not meet the chart's schema
(a typo such as ``accelerater``, a string where an object goes); ``plan --values``
must refuse the same file with the same words, without a chart: the image has
none. ``data/values.schema.json`` is a copy of ``chart/values.schema.json`` (a
test keeps them identical), and this module validates against it the subset of
JSON Schema 2020-12 the chart uses, wording each problem the way Helm's validator
(santhosh-tekuri/jsonschema v6) does:

    - at '/accelerator': value must be one of '', 'h100', ...
    - at '/validate': validation failed
      - at '/validate/phases': got object {}, want null or array

Two differences from Helm's words: a type error names the value (Helm says
only ``got object``), and a value or key that may be a URL or registry
reference is shown with its user and password masked (``masking``; Helm quotes
it whole). Helm prints the problems in a random order; here they come in
document order.
A keyword this module does not know is refused by a test, not skipped silently.

Only the standard library here: this runs before the heavy imports.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

__all__ = ["KEYWORDS", "SCHEMA_PATH", "Problem", "load_schema", "normalised", "problems", "render"]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "data" / "values.schema.json"

#: Keywords that only annotate (never refuse a value).
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated"})
#: Keywords that refuse values; every one is implemented below.
ASSERTIONS = frozenset(
    {
        "type",
        "enum",
        "const",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "minItems",
        "maxItems",
    }
)
KEYWORDS = ANNOTATIONS | ASSERTIONS
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


def _is_type(value: Any, name: str) -> bool:
    kind = _json_type(value)
    if name == "integer":
        return kind == "number" and (isinstance(value, int) or float(value).is_integer())
    return kind == name


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


#: Number bounds: keyword, and when it refuses (value, bound).
_BOUNDS: tuple[tuple[str, Callable[[float, float], bool]], ...] = (
    ("minimum", lambda v, b: v < b),
    ("maximum", lambda v, b: v > b),
    ("exclusiveMinimum", lambda v, b: v <= b),
    ("exclusiveMaximum", lambda v, b: v >= b),
)


def _check(schema: Mapping[str, Any], value: Any, where: str) -> list[Problem]:  # noqa: PLR0912 - one branch per keyword reads best
    """Every problem ``schema`` finds in ``value`` at ``where``."""
    types = schema.get("type")
    if types is not None:
        wanted = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, name) for name in wanted):
            want = " or ".join(sorted(wanted, key=_TYPE_ORDER.index))
            return [Problem(where, f"got {_json_type(value)} {_shown(value, where)}, want {want}")]
    found: list[Problem] = []
    if "const" in schema and value != schema["const"]:
        found.append(Problem(where, f"value must be {_literal(schema['const'])}"))
    if "enum" in schema and not any(_json_equal(value, option) for option in schema["enum"]):
        found.append(Problem(where, "value must be one of " + ", ".join(_literal(o) for o in schema["enum"])))
    if isinstance(value, str):
        length = len(value)
        if "minLength" in schema and length < schema["minLength"]:
            found.append(Problem(where, f"minLength: got {length}, want {schema['minLength']}"))
        if "maxLength" in schema and length > schema["maxLength"]:
            found.append(Problem(where, f"maxLength: got {length}, want {schema['maxLength']}"))
        if "pattern" in schema and not _matches(schema["pattern"], value):
            found.append(Problem(where, f"{_shown(value, where)} does not match pattern {quote(schema['pattern'])}"))
    if _json_type(value) == "number":
        for keyword, refused in _BOUNDS:
            if keyword in schema and refused(value, schema[keyword]):
                found.append(Problem(where, f"{keyword}: got {_number(value)}, want {_number(schema[keyword])}"))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(Problem(where, f"minItems: got {len(value)}, want {schema['minItems']}"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(Problem(where, f"maxItems: got {len(value)}, want {schema['maxItems']}"))
        if isinstance(schema.get("items"), Mapping):
            for index, item in enumerate(value):
                found.extend(_one(schema["items"], item, _pointer(where, index)))
    if isinstance(value, Mapping):
        found.extend(_object(schema, value, where))
    return found


def _object(schema: Mapping[str, Any], value: Mapping[str, Any], where: str) -> list[Problem]:
    found: list[Problem] = []
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        noun = "property" if len(missing) == 1 else "properties"
        found.append(Problem(where, f"missing {noun} " + ", ".join(quote(m) for m in missing)))
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    refused: list[str] = []
    for key, item in value.items():
        if key in properties:
            found.extend(_one(properties[key], item, _pointer(where, key)))
        elif extra is False:
            refused.append(key)
        elif isinstance(extra, Mapping):
            found.extend(_one(extra, item, _pointer(where, key)))
    if refused:
        names = ", ".join(_shown(name, _pointer(where, name)) for name in refused[:20])
        more = f" (and {len(refused) - 20} more)" if len(refused) > 20 else ""
        found.append(Problem(where, f"additional properties {names}{more} not allowed"))
    return found


def _one(schema: Mapping[str, Any], value: Any, where: str) -> list[Problem]:
    """A subschema's problems as the validator reports them: one, or a group."""
    found = _check(schema, value, where)
    if len(found) > 1:
        return [Problem(where, "validation failed", found)]
    return found


def _json_equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    return bool(left == right)


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
    found = _check(schema, without_nulls(normalised(values)), "")
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
