"""The checks of the settings: each one normalises a raw value or raises
``Invalid`` saying what is allowed; the enums; and the message helpers that
show a value (cut, escaped, a URL's user and password masked).

Only what pydantic does not check: text, patterns, JSON lists, numbers as plain
text (hosts, URLs, references and the credentials in them: ``settings.addresses``).
Bounds, choices and booleans are pydantic's (worded in ``settings.problems``).

Standard library only: what needs only a name, an enum or a check (the log
format, a values file refused before any setting is read, the command line's
path checks) does not pay for pydantic. ``settings.groups`` puts the checks on
the fields of the settings model.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from enum import Enum, StrEnum
from typing import Any, TypeVar

from aicr_runner.masking import mask_userinfo
from aicr_runner.settings import names
from aicr_runner.settings.criteria_catalog import SERVICE_ALIASES

__all__ = [
    "DEFAULT_RELEASE_BASE_URL",
    "ENV_PREFIX",
    "MAX_FLAGS_CHARS",
    "MAX_LINE_CHARS",
    "MAX_LIST_CHARS",
    "MAX_LIST_ITEMS",
    "MAX_PROBLEMS",
    "MAX_TEXT_CHARS",
    "MIN_SECONDS",
    "NON_CONCRETE_SERVICES",
    "SHOW_CHARS",
    "Arch",
    "HelmApply",
    "Invalid",
    "ItemRefused",
    "LogFormat",
    "OutOfRange",
    "Phase",
    "ProvenanceMode",
    "PublishMode",
    "ReportsApi",
    "UnknownPolicy",
    "absolute_path",
    "bounded_text",
    "escaped",
    "problem_line",
    "shown",
]

ENV_PREFIX = names.ENV_PREFIX
DEFAULT_RELEASE_BASE_URL = "https://github.com/NVIDIA/aicr/releases/download"

#: Service values that state no concrete service (the aliases aicr maps to
#: ``generic`` in 1.x, ``any`` in 0.x; the bash chart let them through unchecked,
#: docs/criteria.md).
NON_CONCRETE_SERVICES = ("", "any", *SERVICE_ALIASES)

#: Longest value shown in a message; the rest is counted, not printed.
SHOW_CHARS = 80
#: At most this many problems are printed; the rest are counted.
MAX_PROBLEMS = 20
#: Bounds on what one variable may hold. A path is at most PATH_MAX; a JSON list
#: of arguments at most what one argv string may be (Linux: 128 KiB).
MAX_TEXT_CHARS = 4096
MAX_FLAGS_CHARS = 16_384
MAX_LIST_CHARS = 65_536
MAX_LIST_ITEMS = 512
#: Shortest duration a setting takes: smaller is a typo (or a denormal like 1e-320).
MIN_SECONDS = 0.001

# Patterns are strings, compiled by ``re``'s cache on first use: a run that
# sets few variables compiles few of them.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_K8S_NAME = _DNS_LABEL
_K8S_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_CRITERION = r"[a-z0-9]([-a-z0-9._]*[a-z0-9])?"
_SHA256 = r"[0-9a-fA-F]{64}"
#: ASCII digits only: ``\d`` takes any Unicode digit (fullwidth ones), which int() reads.
_VERSION = r"v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?"
_INTEGER = r"[+-]?[0-9]{1,12}"
_NUMBER = r"[+-]?([0-9]{1,12}(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?"
#: C0 and C1 controls and DEL; a line break in a one-line value is the usual one.
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"
_CONTROL_BUT_SPACE = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
#: How ``os.environ`` holds bytes that are not UTF-8 (PEP 383), and lone surrogates.
_SURROGATE = r"[\ud800-\udfff]"
_T = TypeVar("_T")


class Arch(StrEnum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class Phase(StrEnum):
    DEPLOYMENT = "deployment"
    PERFORMANCE = "performance"
    CONFORMANCE = "conformance"


class PublishMode(StrEnum):
    SIGNED = "signed"
    UNSIGNED = "unsigned"


class ProvenanceMode(StrEnum):
    #: Fail closed (exit 29) unless aicr's provenance verifies.
    REQUIRE = "require"
    #: Verify and report, but run aicr even when verification fails.
    WARN = "warn"
    #: Do not verify.
    OFF = "off"


class HelmApply(StrEnum):
    """How deploy.sh's helm applies a release's objects (``helm install``/``upgrade``)."""

    #: ``--server-side=false``: what the chart this replaces did (its Helm 3 knows no other).
    CLIENT = "client"
    #: ``--server-side=true``: Helm 4 only.
    SERVER = "server"
    #: No flag: Helm 4's own default (server-side for a new release, an upgrade keeps
    #: the release's earlier method).
    AUTO = "auto"


class LogFormat(StrEnum):
    CONSOLE = "console"
    JSON = "json"


class ReportsApi(StrEnum):
    """Which report object the verdict is written to (docs/reports.md)."""

    AUTO = "auto"
    OPENREPORTS = "openreports"
    WGPOLICY = "wgpolicy"
    NONE = "none"


class UnknownPolicy(StrEnum):
    """What an upgrade does with a component ``aicr upgrade-check`` cannot judge (unknown, unversioned)."""

    STOP = "stop"
    WARN = "warn"


class Invalid(ValueError):
    """A value a setting does not take; the message says what it takes.

    ``item``: which element of a list is wrong."""

    def __init__(self, reason: str, *, item: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.item = item


# -- showing values -------------------------------------------------------------------------


def _escape_char(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (PEP 383): show the byte
        return f"\\x{code - 0xDC00:02x}"
    if char in "'\\":
        return "\\" + char
    if char.isprintable():
        return char
    return repr(char)[1:-1]


def shown(value: object, *, limit: int = SHOW_CHARS, secret_userinfo: bool = True) -> str:
    """``value`` for a message: quoted, escaped (control characters, non-UTF-8
    bytes, quotes), cut at ``limit`` characters, a URL's credentials masked
    (``masking``: up to the last ``@``, whatever the characters before it)."""
    if not isinstance(value, str):
        value = json.dumps(value, default=str)
    # Masked whole, then cut: a cut before the '@' would leave the password unmasked.
    text = mask_userinfo(value) if secret_userinfo else value
    body = "".join(_escape_char(c) for c in text[:limit])
    more = f"... ({len(text)} characters)" if len(text) > limit else ""
    return f"'{body}'{more}"


#: Longest problem line; a reason that quotes a value is cut too.
MAX_LINE_CHARS = 600


def escaped(text: str, limit: int = SHOW_CHARS) -> str:
    """``text`` (a variable's name) escaped and cut, without quotes."""
    return "".join(_escape_char(c) for c in text[:limit]) + ("..." if len(text) > limit else "")


def problem_line(name: str, raw: object, exc: Invalid) -> str:
    """``NAME='value' (item N): reason``: the one line a bad value gets."""
    where = f" (item {exc.item})" if exc.item is not None else ""
    line = f"{escaped(name)}={shown(raw)}{where}: {exc.reason}"
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."


# -- checks ---------------------------------------------------------------------------------


def bounded_text(value: object, *, limit: int = MAX_TEXT_CHARS, whitespace: bool = False) -> str:
    """A string of at most ``limit`` characters, valid UTF-8, no control characters
    (``whitespace``: tabs and line breaks allowed, as between flags)."""
    if not isinstance(value, str):
        raise Invalid(f"must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise Invalid(f"at most {limit} characters are allowed (this value has {len(value)})")
    if bad := re.search(_SURROGATE, value):
        raise Invalid(f"not valid UTF-8 (the byte or character {_escape_char(bad.group())} at position {bad.start()})")
    if bad := re.search(_CONTROL_BUT_SPACE if whitespace else _CONTROL, value):
        what = "a line break" if bad.group() in "\r\n" else "a control character"
        raise Invalid(
            f"{what} ({_escape_char(bad.group())}) at position {bad.start()}; the value must be one plain line"
        )
    return value


def _pattern(regex: str, allowed: str, *, limit: int = MAX_TEXT_CHARS) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = bounded_text(value, limit=limit)
        if text and (len(text) > limit or not re.fullmatch(regex, text)):
            raise Invalid(f"must be empty or {allowed}")
        return text

    return check


def k8s_name(limit: int = 253) -> Callable[[object], str]:
    return _pattern(
        _K8S_NAME,
        f"a Kubernetes name (DNS-1123: lowercase letters, digits and '-', starting and ending with a letter "
        f"or digit, at most {limit} characters)",
        limit=limit,
    )


def k8s_subdomain(limit: int = 253) -> Callable[[object], str]:
    return _pattern(
        _K8S_SUBDOMAIN,
        f"a Kubernetes object name (DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most {limit} "
        "characters)",
        limit=limit,
    )


#: One acknowledged move: ``<component>:<from>:<to>`` (the chart joins upgradeCheck.acknowledge's fields).
_MOVE = r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?:[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}:[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}"
_MOVE_ALLOWED = (
    "a move '<component>:<from version>:<to version>' (a component name, then two versions: letters, digits, "
    "'.', '+', '_' and '-')"
)


def acknowledged_move(value: object) -> str:
    text = bounded_text(value, limit=320)
    if not re.fullmatch(_MOVE, text):
        raise Invalid(f"must be {_MOVE_ALLOWED}")
    return text


def criterion(value: object) -> str:
    return _pattern(
        _CRITERION, "a criteria value (lowercase letters, digits, '-', '.' and '_', at most 63 characters)", limit=63
    )(value)


def sha256_or_empty(value: object) -> str:
    text = bounded_text(value)
    if text and not re.fullmatch(_SHA256, text):
        raise Invalid("must be empty or 64 hex characters (a sha256 digest)")
    return text.lower()


def version(value: object) -> str:
    text = bounded_text(value, limit=128)
    if not re.fullmatch(_VERSION, text):
        raise Invalid("must be a release tag such as v1.2.0 (the leading 'v' is optional)")
    return text if text.startswith("v") else f"v{text}"


def plain_text(value: object) -> str:
    return bounded_text(value)


def flags(value: object) -> str:
    return bounded_text(value, limit=MAX_FLAGS_CHARS, whitespace=True)


def absolute_path(*, required: bool = False) -> Callable[[object], str]:
    """The check of a path setting: UTF-8, one line, absolute (``required``: not empty)."""

    def check(value: object) -> str:
        text = bounded_text(value)
        if not text and not required:
            return text
        if not text.startswith("/"):
            empty = "" if required else "empty or "
            hint = " (an empty value is not 'here')" if not text else ""
            raise Invalid(f"must be {empty}an absolute path (starting with '/'){hint}")
        return text

    return check


class ItemRefused(Invalid):
    """pydantic's error about one item of a list (``kind`` and ``context``: its ``type`` and
    ``ctx``), raised on the whole list so a message shows the list as given."""

    def __init__(self, kind: str, context: dict[str, Any], item: int | None) -> None:
        super().__init__(kind, item=item)
        self.kind = kind
        self.context = context


class OutOfRange(Invalid):
    """A number outside its field's bounds (``Field(ge=, le=)``), or no number: the reason,
    what the field allows, is worded from those bounds (``settings.problems``).
    ``syntax``: the text is no plain decimal number."""

    def __init__(self, *, syntax: bool = False) -> None:
        super().__init__("not a number in the allowed range")
        self.syntax = syntax


def whole_number(value: object) -> int:
    """A whole number, or its plain decimal text: not ``' 5'``, ``'1_000'`` or ``'5.0'``,
    which pydantic's own parsing reads. Its bounds are its field's."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise OutOfRange
    if isinstance(value, str):
        if not re.fullmatch(_INTEGER, value):
            raise OutOfRange
        return int(value)
    return value


def decimal_seconds(value: object) -> float:
    """A number of seconds, or its plain decimal text (not nan, inf or a unit). Its bounds
    are its field's; nan and inf from code fail them."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise OutOfRange
    if isinstance(value, str):
        if not re.fullmatch(_NUMBER, value):
            raise OutOfRange(syntax=True)
        return float(value)
    return float(value)


def zero_or_measurable(value: float) -> float:
    """After ``Field(ge=0)``: 0 (off) or at least MIN_SECONDS (smaller is a typo)."""
    if 0 < value < MIN_SECONDS:
        raise OutOfRange
    return value


def allowed_numbers(kind: object, low: float | None, high: float | None, *, syntax: bool = False) -> str:
    """What a number field allows, from its type and bounds: a whole number from ``low`` to
    ``high``, or seconds (``low`` 0: or 0, else from MIN_SECONDS)."""
    if kind is int:
        return f"allowed: a whole number from {low} to {high}"
    zero = "0 or " if low == 0 else ""
    allowed = f"allowed: {zero}a number of seconds from {MIN_SECONDS:g} to {high:g}"
    return f"{allowed} (a plain decimal number; not nan, inf or a unit)" if syntax else allowed


def arch(value: object) -> object:
    # The chart renders "" by default: the node's architecture, detected here; another value
    # is pydantic's to check against the enum.
    return host_arch() if value == "" else value


_LIST_EXAMPLE = 'list values are JSON arrays, e.g. \'["--nodes", "4"]\''
#: What a JSON value that is not an array is called in a message.
_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}


class _NotJson(ValueError):
    """What Python's json reads and JSON has not (NaN, Infinity), or a number Python will not
    convert; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _no_constant(name: str) -> None:
    raise _NotJson(f"{name} is not JSON")


def _json_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # longer than Python converts (sys.get_int_max_str_digits())
        raise _NotJson(f"a number of {len(text.lstrip('-'))} digits, too long to read") from None


def _json_array(text: str) -> Any:
    """``text`` parsed as JSON, refused unless it is an array (its items are checked by the caller)."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=_json_int)
    except RecursionError:
        raise Invalid("nested too deeply; list values are flat JSON arrays of strings") from None
    except (json.JSONDecodeError, _NotJson) as exc:
        # Python's reason helps inside an array or object; for a bare word it says only "Expecting value".
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.reason
        why = f" ({reason})" if text.lstrip().startswith(("[", "{")) else ""
        raise Invalid(f"not valid JSON{why}; {_LIST_EXAMPLE}") from None
    if not isinstance(value, list):
        kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
        raise Invalid(f"valid JSON, but {kind}, not an array; {_LIST_EXAMPLE}")
    return value


def json_list(item: Callable[[object], _T]) -> Callable[[object], list[_T]]:
    """A JSON array (from the environment) or a list, of at most MAX_LIST_ITEMS
    strings; each item passes ``item``."""

    def check(value: object) -> list[_T]:
        if isinstance(value, str):
            value = _json_array(bounded_text(value, limit=MAX_LIST_CHARS, whitespace=True))
        if not isinstance(value, list | tuple):
            raise Invalid("must be a JSON array of strings")
        if len(value) > MAX_LIST_ITEMS:
            raise Invalid(f"at most {MAX_LIST_ITEMS} items are allowed (this list has {len(value)})")
        checked: list[_T] = []
        for index, element in enumerate(value):
            if isinstance(element, list | dict):
                raise Invalid("must be a string; list values are flat JSON arrays of strings", item=index)
            if not isinstance(element, str | Enum):
                kind = "null" if element is None else type(element).__name__
                raise Invalid(f"must be a string, not {kind}", item=index)
            try:
                checked.append(item(element))
            except Invalid as exc:
                raise Invalid(exc.reason, item=index) from None
        return checked

    return check


def argument(value: object) -> str:
    """One argv entry, verbatim: any character but NUL (no argv can carry one),
    and UTF-8."""
    if not isinstance(value, str):
        raise Invalid(f"must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise Invalid(f"a NUL character (\\x00) at position {value.index(chr(0))}; no argument can carry one")
    if bad := re.search(_SURROGATE, value):
        raise Invalid(f"not valid UTF-8 (the byte or character {_escape_char(bad.group())} at position {bad.start()})")
    return value


#: A snapshot agent's ``--node-selector`` (``key=value``, aicr's own form).
_NODE_SELECTOR = r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?=[A-Za-z0-9._-]*"
#: A snapshot agent's ``--toleration`` (``key=value:Effect`` or ``key:Effect``, aicr's own form).
_TOLERATION = (
    r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(=[A-Za-z0-9._-]*)?"
    r":(NoSchedule|PreferNoSchedule|NoExecute)"
)


def snapshot_image(value: object) -> str:
    return _pattern(
        r"[a-z0-9][a-z0-9.-]*(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]{1,128})?(@sha256:[0-9a-f]{64})?",
        "an image reference like ghcr.io/nvidia/aicr:v0.11.1 (registry/path[:tag][@sha256:digest])",
    )(value)


def node_selector(value: object) -> str:
    return _whole(value, _NODE_SELECTOR, "a node selector key=value (a label key and a label value)", limit=316)


def toleration(value: object) -> str:
    allowed = "a toleration key=value:Effect or key:Effect (Effect: NoSchedule, PreferNoSchedule or NoExecute)"
    return _whole(value, _TOLERATION, allowed, limit=340)


def _whole(value: object, regex: str, allowed: str, *, limit: int) -> str:
    """A list item that must match ``regex`` (an empty one too: it is not "unset")."""
    text = bounded_text(value, limit=limit)
    if not re.fullmatch(regex, text):
        raise Invalid(f"must be {allowed}")
    return text


def host_arch() -> Arch:
    machine = os.uname().machine.lower()  # what platform.machine() returns, without importing it
    return Arch.ARM64 if machine in ("arm64", "aarch64") else Arch.AMD64
