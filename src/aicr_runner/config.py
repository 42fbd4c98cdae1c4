"""The environment contract: every runtime input, typed, in one settings model.

Variables use the prefix ``AICR_RUNNER_``; nested groups are joined with ``__``
(``AICR_RUNNER_VALIDATE__PUBLISH__MODE``); list values are JSON arrays. An empty
string is a value, not "unset" (an empty ConfigMap name turns that capture off, as
in the chart this replaces).

One validation layer: every setting is a field of a frozen settings group
(typed like a dataclass) that carries its check. ``load`` reads each variable on its own, so a problem
names the variable that is actually wrong, with its value (cut and escaped) and
what is allowed; the same checks run when code builds a group directly
(``AicrSettings(version="1.2.0")``). Every pattern is matched whole
(``fullmatch``), every value must be UTF-8 without control characters, JSON lists
are size- and depth-bounded, numbers finite and bounded. Credentials never go in a
URL: a URL with a user or password is refused and shown with them masked.

Only the standard library here (no pydantic): reading the settings is on the path
of every run, and a plan's own time is mostly start-up.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

from aicr_runner import names
from aicr_runner.catalog import SERVICE_ALIASES, release_numbers, version_guards
from aicr_runner.errors import ConfigError
from aicr_runner.masking import mask_userinfo, userinfo_span

__all__ = [
    "ENV_PREFIX",
    "AicrSettings",
    "Arch",
    "Criteria",
    "Invalid",
    "LeaseSettings",
    "LogFormat",
    "Phase",
    "ProvenanceMode",
    "ProvenanceSettings",
    "PublishMode",
    "PublishSettings",
    "RunnerSettings",
    "absolute_path",
    "env_var_names",
    "escaped",
    "load",
    "problem_line",
    "shown",
]

ENV_PREFIX = names.ENV_PREFIX
DEFAULT_RELEASE_BASE_URL = "https://github.com/NVIDIA/aicr/releases/download"

#: Service values that state no concrete service (the aliases aicr maps to
#: ``generic`` in 1.x, ``any`` in 0.x: anchor pain point 3).
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
_HOST_LABEL = r"[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?"
_IPV4 = r"[0-9]{1,3}(\.[0-9]{1,3}){3}"
_PORT = r"[0-9]{1,5}"
_TRUE = frozenset({"true", "1", "yes", "on", "t", "y"})
_FALSE = frozenset({"false", "0", "no", "off", "f", "n"})
#: C0 and C1 controls and DEL; a line break in a one-line value is the usual one.
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"
_CONTROL_BUT_SPACE = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
#: How ``os.environ`` holds bytes that are not UTF-8 (PEP 383), and lone surrogates.
_SURROGATE = r"[\ud800-\udfff]"
_E = TypeVar("_E", bound=Enum)
_T = TypeVar("_T")
_G = TypeVar("_G")


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


class LogFormat(StrEnum):
    CONSOLE = "console"
    JSON = "json"


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


# -- checks ---------------------------------------------------------------------------------


def _text(value: object, *, limit: int = MAX_TEXT_CHARS, whitespace: bool = False) -> str:
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
        text = _text(value, limit=limit)
        if text and (len(text) > limit or not re.fullmatch(regex, text)):
            raise Invalid(f"must be empty or {allowed}")
        return text

    return check


def _k8s_name(limit: int = 253) -> Callable[[object], str]:
    return _pattern(
        _K8S_NAME,
        f"a Kubernetes name (DNS-1123: lowercase letters, digits and '-', starting and ending with a letter "
        f"or digit, at most {limit} characters)",
        limit=limit,
    )


def _k8s_subdomain(limit: int = 253) -> Callable[[object], str]:
    return _pattern(
        _K8S_SUBDOMAIN,
        f"a Kubernetes object name (DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most {limit} "
        "characters)",
        limit=limit,
    )


def _criterion(value: object) -> str:
    return _pattern(
        _CRITERION, "a criteria value (lowercase letters, digits, '-', '.' and '_', at most 63 characters)", limit=63
    )(value)


def _sha256_or_empty(value: object) -> str:
    text = _text(value)
    if text and not re.fullmatch(_SHA256, text):
        raise Invalid("must be empty or 64 hex characters (a sha256 digest)")
    return text.lower()


def _version(value: object) -> str:
    text = _text(value, limit=128)
    if not re.fullmatch(_VERSION, text):
        raise Invalid("must be a release tag such as v1.2.0 (the leading 'v' is optional)")
    return text if text.startswith("v") else f"v{text}"


def _plain_text(value: object) -> str:
    return _text(value)


def _flags(value: object) -> str:
    return _text(value, limit=MAX_FLAGS_CHARS, whitespace=True)


def absolute_path(*, required: bool = False) -> Callable[[object], str]:
    """The check of a path setting: UTF-8, one line, absolute (``required``: not empty)."""

    def check(value: object) -> str:
        text = _text(value)
        if not text and not required:
            return text
        if not text.startswith("/"):
            empty = "" if required else "empty or "
            hint = " (an empty value is not 'here')" if not text else ""
            raise Invalid(f"must be {empty}an absolute path (starting with '/'){hint}")
        return text

    return check


def _host(host: str) -> None:
    """A registry or server host name, IPv4 or [IPv6] address, as a client would resolve it."""
    if host.startswith("["):
        import ipaddress

        try:
            ipaddress.IPv6Address(host[1:-1] if host.endswith("]") else "")
        except ValueError:
            raise Invalid(f"{host!r} is not a valid [IPv6] address") from None
        return
    if re.fullmatch(_IPV4, host):
        if any(int(part) > 255 for part in host.split(".")):
            raise Invalid(f"{host!r} is not a valid IPv4 address")
        return
    if not host.isascii() or any(label.lower().startswith("xn--") for label in host.split(".")):
        # What the HTTP client does with it (httpx encodes with the idna package).
        import idna

        try:
            host = idna.encode(host.lower()).decode("ascii")
        except idna.IDNAError as exc:
            raise Invalid(f"the host is not a valid internationalised domain name ({exc})") from None
    labels = host.removesuffix(".").split(".")
    if len(host) > 253 or not all(re.fullmatch(_HOST_LABEL, label) for label in labels):
        raise Invalid("the host must be a DNS name (letters, digits, '-' per label, at most 63 characters each)")


def _port(text: str) -> None:
    if not re.fullmatch(_PORT, text) or not 1 <= int(text) <= 65535:
        raise Invalid(f"port {text!r} must be a number from 1 to 65535")


def _refuse_credentials(value: object, what: str, hint: str, *, elsewhere: str) -> None:
    """Refuse a value with a user or password (``masking``: an ``@`` before the
    end) before any other check: with a password holding '/', '?' or '#', a
    parser takes a part of it for the host, port or tag, and its reason would
    quote that part. ``elsewhere``: what an ``@`` past the host part may be."""
    if not isinstance(value, str) or (span := userinfo_span(value)) is None:
        return
    refused = f"credentials in the {what} are refused (they would show in logs and reports); {hint}"
    if any(c in "/?#" for c in value[span[0] : span[1]]):
        refused = f"an '@' after a '/', '?' or '#': a password holding one of them, or {elsewhere}; {refused}"
    raise Invalid(refused)


def _url(schemes: tuple[str, ...], credentials_hint: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        _refuse_credentials(value, "URL", credentials_hint, elsewhere="an '@' in the path (write it %40)")
        text = _text(value)
        allowed = " or ".join(f"{s}://" for s in schemes)
        if " " in text:
            raise Invalid(f"a space at position {text.index(' ')}; a URL has none (percent-encode it as %20)")
        scheme, sep, rest = text.partition("://")
        if not sep or scheme.lower() not in schemes:
            raise Invalid(f"must be an {allowed} URL")
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "?" in rest or "#" in rest:
            raise Invalid("must have no query ('?') or fragment ('#')")
        host, port = authority, ""
        if match := re.fullmatch(r"(\[[^\]]*\]|[^:]*)(?::(.*))?", authority):
            host, port = match.group(1), match.group(2) or ""
        if not host:
            raise Invalid(f"must name a host ({allowed}host/...)")
        _host(host)
        if port or authority.endswith(":"):
            _port(port)
        return text.rstrip("/")

    return check


#: What an '@' after the host of a reference may be.
_DIGEST_AT = "a digest not written as @sha256:<64 lowercase hex characters> at the end"


def _oci_reference(value: object) -> str:
    """An OCI push/pull target without a scheme: ``host[:port]/path[:tag|@digest]``."""
    _refuse_credentials(
        value,
        "reference",
        f"give a dockerconfigjson directory ({ENV_PREFIX}VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR; chart: "
        "validate.publish.registrySecret)",
        elsewhere=_DIGEST_AT,
    )
    text = _text(value)
    if not text:
        return text
    if "://" in text:
        raise Invalid("must be an OCI reference without a scheme, like registry.example.com/org/name")
    authority, slash, path = text.partition("/")
    if not slash or not path or any(c.isspace() for c in path):
        raise Invalid("must be host/path, like registry.example.com/org/name (no spaces)")
    host, colon, port = authority.partition(":") if not authority.startswith("[") else (authority, "", "")
    _host(host)
    if colon:
        _port(port)
    return text


def _pack_reference(value: object) -> str:
    _refuse_credentials(
        value,
        "reference",
        f"give a dockerconfigjson file ({ENV_PREFIX}PACK__CREDENTIALS_FILE; chart: dataPackSecret)",
        elsewhere=_DIGEST_AT,
    )
    text = _text(value)
    if text:
        from aicr_runner.reference import InvalidReference, PackReference

        try:
            PackReference.parse(text)
        except InvalidReference as exc:
            raise Invalid(str(exc)) from None
    return text


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise Invalid("allowed: true or false")


def _integer(low: int, high: int) -> Callable[[object], int]:
    allowed = f"allowed: a whole number from {low} to {high}"

    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise Invalid(allowed)
        if isinstance(value, str):
            if not re.fullmatch(_INTEGER, value):
                raise Invalid(allowed)
            value = int(value)
        if not low <= value <= high:
            raise Invalid(allowed)
        return value

    return check


def _seconds(high: float, *, zero: bool = False) -> Callable[[object], float]:
    """A finite number of seconds from MIN_SECONDS to ``high`` (``zero``: or 0)."""
    allowed = f"allowed: {'0 or ' if zero else ''}a number of seconds from {MIN_SECONDS:g} to {high:g}"

    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise Invalid(allowed)
        if isinstance(value, str):
            if not re.fullmatch(_NUMBER, value):
                raise Invalid(f"{allowed} (a plain decimal number; not nan, inf or a unit)")
            value = float(value)
        number = float(value)
        if not math.isfinite(number) or not (MIN_SECONDS <= number <= high or (zero and number == 0)):
            raise Invalid(allowed)
        return number

    return check


def _choice(enum: type[_E]) -> Callable[[object], _E]:
    options = [str(member.value) for member in enum]
    allowed = "allowed: " + (", ".join(repr(o) for o in options[:-1]) + f" or {options[-1]!r}")

    def check(value: object) -> _E:
        if isinstance(value, enum):
            return value
        try:
            return enum(_text(value, limit=64))
        except ValueError:
            raise Invalid(allowed) from None

    return check


def _arch(value: object) -> Arch:
    # The chart renders "" by default: the node's architecture, detected here.
    return _host_arch() if value == "" else _choice(Arch)(value)


_LIST_EXAMPLE = 'list values are JSON arrays, e.g. \'["--nodes", "4"]\''
#: What a JSON value that is not an array is called in a message.
_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _json_array(text: str) -> Any:
    """``text`` parsed as JSON, refused unless it is an array (its items are checked by the caller)."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise Invalid("nested too deeply; list values are flat JSON arrays of strings") from None
    except ValueError as exc:
        # Python's reason helps inside an array or object; for a bare word it says only "Expecting value".
        why = f" ({str(exc).split(':')[0]})" if text.lstrip().startswith(("[", "{")) else ""
        raise Invalid(f"not valid JSON{why}; {_LIST_EXAMPLE}") from None
    if not isinstance(value, list):
        kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
        raise Invalid(f"valid JSON, but {kind}, not an array; {_LIST_EXAMPLE}")
    return value


def _json_list(item: Callable[[object], _T]) -> Callable[[object], list[_T]]:
    """A JSON array (from the environment) or a list, of at most MAX_LIST_ITEMS
    strings; each item passes ``item``."""

    def check(value: object) -> list[_T]:
        if isinstance(value, str):
            value = _json_array(_text(value, limit=MAX_LIST_CHARS, whitespace=True))
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


def _argument(value: object) -> str:
    """One argv entry, verbatim: any character but NUL (no argv can carry one),
    and UTF-8."""
    if not isinstance(value, str):
        raise Invalid(f"must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise Invalid(f"a NUL character (\\x00) at position {value.index(chr(0))}; no argument can carry one")
    if bad := re.search(_SURROGATE, value):
        raise Invalid(f"not valid UTF-8 (the byte or character {_escape_char(bad.group())} at position {bad.start()})")
    return value


def _issuer(value: object) -> str:
    return _url(("https",), "an OIDC issuer needs none")(value)


def _host_arch() -> Arch:
    machine = os.uname().machine.lower()  # what platform.machine() returns, without importing it
    return Arch.ARM64 if machine in ("arm64", "aarch64") else Arch.AMD64


class _Field:
    """One setting of a group: its check, and its default or a factory for it."""

    __slots__ = ("check", "default", "factory", "group", "name")

    def __init__(
        self,
        check: Callable[[object], Any] | None,
        default: Any,
        factory: Callable[[], Any] | None,
        group: type[_Group] | None = None,
    ) -> None:
        self.name = ""
        self.check = check
        self.default = default
        self.factory = factory
        self.group = group

    def initial(self) -> Any:
        return self.factory() if self.factory is not None else self.default


def _check(check: Callable[[object], Any], *, default: Any = None, factory: Callable[[], Any] | None = None) -> Any:
    """A setting checked by ``check`` (when loaded and when built in code)."""
    return _Field(check, default, factory)


def _group(*, factory: Callable[[], _G]) -> _G:
    """A nested group of settings (its variables are ``<GROUP>__<NAME>``)."""
    return _Field(None, None, factory, group=factory)  # type: ignore[arg-type,return-value]


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(_check, _group))
class _Group:
    """Frozen, checked settings: each field's check normalises its value or raises
    ``Invalid``, whether it came from the environment or from code.

    Typed like a frozen dataclass (``dataclass_transform``: mypy checks every
    constructor call), built without one: ``dataclasses`` generates and compiles
    six methods per class, which for the 17 groups was most of this module's
    import time, on the path of every run.
    """

    _fields: ClassVar[tuple[_Field, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = {spec.name: spec for spec in cls._fields}  # inherited ones first, in order
        for name, annotation in inspect.get_annotations(cls).items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            spec = cls.__dict__.get(name)
            if not isinstance(spec, _Field):
                raise TypeError(f"{cls.__name__}.{name}: a setting is declared with _check() or _group()")
            spec.name = name
            found[name] = spec  # an override keeps its place, as in a dataclass
        cls._fields = tuple(found.values())

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - {spec.name for spec in self._fields}
        if unknown:
            raise TypeError(f"{type(self).__name__} has no setting {', '.join(sorted(unknown))}")
        for spec in self._fields:
            value = values[spec.name] if spec.name in values else spec.initial()
            object.__setattr__(self, spec.name, spec.check(value) if spec.check is not None else value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"settings are frozen: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"settings are frozen: cannot delete {name}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, spec.name) for spec in self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Group) and type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in self._fields)
        return f"{type(self).__name__}({shown})"

    def model_copy(self, *, update: Mapping[str, Any]) -> Self:
        """A copy with ``update`` applied and checked (the pydantic spelling, kept
        for callers written against it)."""
        return type(self)(**{**{spec.name: getattr(self, spec.name) for spec in self._fields}, **update})

    @classmethod
    def model_construct(cls, **values: Any) -> Self:
        """Build without checks: tests of a consumer's own defences against a
        value the settings would refuse (the pydantic spelling)."""
        made = object.__new__(cls)
        for spec in cls._fields:
            object.__setattr__(made, spec.name, values[spec.name] if spec.name in values else spec.initial())
        return made

    @classmethod
    def model_validate(cls, data: Mapping[str, Any]) -> Self:
        """Build from a mapping (the pydantic spelling, kept for callers written against it)."""
        return cls(**data)


# -- the settings ---------------------------------------------------------------------------


class Criteria(_Group):
    """Recipe criteria. Empty leaves the flag out."""

    service: str = _check(_criterion, default="")
    accelerator: str = _check(_criterion, default="")
    intent: str = _check(_criterion, default="")
    os: str = _check(_criterion, default="")
    platform: str = _check(_criterion, default="")

    #: The anchor's flag order (R-07): service, accelerator, os, intent, platform.
    FLAG_ORDER: ClassVar[tuple[str, ...]] = names.CRITERIA_FLAG_ORDER

    def stated(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.FLAG_ORDER if getattr(self, name)}

    def summary(self) -> str:
        return ", ".join(f"{name}={getattr(self, name) or '-'}" for name in self.FLAG_ORDER)


class Sha256Pins(_Group):
    amd64: str = _check(_sha256_or_empty, default="")
    arm64: str = _check(_sha256_or_empty, default="")


#: Defaults from aicr's own install script (``cosign verify-blob-attestation`` of
#: ``aicr-attestation.sigstore.json``): the release workflow's OIDC issuer, and the
#: workflow identity, pinned here to the exact tag the runner downloads.
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
AICR_RELEASE_IDENTITY = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}"


class ProvenanceSettings(_Group):
    """How aicr's Sigstore provenance is verified before the binary runs."""

    mode: ProvenanceMode = _check(_choice(ProvenanceMode), default=ProvenanceMode.REQUIRE)
    #: Exact certificate identity (SAN URI); empty: NVIDIA's release workflow at
    #: the pinned tag. ``{version}`` is replaced by the pinned tag.
    identity: str = _check(_plain_text, default="")
    issuer: str = _check(_issuer, default=GITHUB_ACTIONS_ISSUER)
    #: A Sigstore trusted_root.json; empty: the public-good root shipped with the runner.
    trusted_root: str = _check(absolute_path(), default="")


_MIRROR_HINT = (
    "serve the release mirror without a login inside the cluster, or give a preinstalled aicr "
    f"(chart aicrBinary.path, env {ENV_PREFIX}AICR__BINARY, plan --aicr-binary)"
)


class AicrSettings(_Group):
    version: str = _check(_version, default=names.PINNED_AICR_VERSION)
    arch: Arch = _check(_arch, factory=_host_arch)
    sha256: Sha256Pins = _group(factory=Sha256Pins)
    release_base_url: str = _check(_url(("http", "https"), _MIRROR_HINT), default=DEFAULT_RELEASE_BASE_URL)
    #: A preinstalled aicr to use instead of downloading one.
    binary: str = _check(absolute_path(), default="")
    #: sha256 of ``binary``; when set the binary must match it.
    binary_sha256: str = _check(_sha256_or_empty, default="")
    download_attempts: int = _check(_integer(1, 20), default=5)
    download_timeout_seconds: float = _check(_seconds(3600), default=60.0)
    #: Upper bound on the whole download step, retries and back-off included.
    download_budget_seconds: float = _check(_seconds(7200), default=600.0)
    provenance: ProvenanceSettings = _group(factory=ProvenanceSettings)

    @property
    def pin(self) -> str:
        """The strict pin for the selected arch; never another arch's."""
        return str(getattr(self.sha256, self.arch.value))

    @property
    def expected_identity(self) -> str:
        """The signer identity aicr's provenance must carry."""
        template = self.provenance.identity or AICR_RELEASE_IDENTITY
        return template.replace("{version}", self.version)


class PackSettings(_Group):
    #: OCI reference without scheme: host/repo:tag or host/repo@sha256:...
    ref: str = _check(_pack_reference, default="")
    #: Path to a dockerconfigjson file (a mounted Secret's config.json).
    credentials_file: str = _check(absolute_path(), default="")
    plain_http: bool = _check(_boolean, default=False)
    insecure_tls: bool = _check(_boolean, default=False)
    #: Wall-clock bound on the whole pack pull, however slowly the registry answers.
    pull_budget_seconds: float = _check(_seconds(7200), default=600.0)


class StepArgs(_Group):
    """A legacy whitespace-split flags string plus an argv list (list wins, last)."""

    flags: str = _check(_flags, default="")
    args: list[str] = _check(_json_list(_argument), factory=list)


class RecipeExpectations(_Group):
    min_components: int = _check(_integer(0, 100_000), default=0)
    components: list[str] = _check(_json_list(_plain_text), factory=list)
    overlays: list[str] = _check(_json_list(_plain_text), factory=list)

    @property
    def any_set(self) -> bool:
        return bool(self.min_components or self.components or self.overlays)


class RecipeSettings(StepArgs):
    configmap: str = _check(_k8s_name(), default="aicr-recipe")
    expect: RecipeExpectations = _group(factory=RecipeExpectations)


class BundleSettings(StepArgs):
    storage_class: str = _check(_k8s_subdomain(), default="")


class DeploySettings(StepArgs):
    flags: str = _check(_flags, default="--best-effort --no-wait")
    enabled: bool = _check(_boolean, default=True)
    #: A run whose deploy.sh reported failed components fails (exit 1) even under --best-effort.
    fail_on_component_failure: bool = _check(_boolean, default=False)

    @property
    def best_effort(self) -> bool:
        """``--best-effort`` in either the flags string or the args list (anchor R-14)."""
        return "--best-effort" in self.flags.split() or "--best-effort" in self.args


class EnvironmentSettings(_Group):
    preinstalled_driver: bool = _check(_boolean, default=False)


class PublishSettings(_Group):
    enabled: bool = _check(_boolean, default=False)
    mode: PublishMode = _check(_choice(PublishMode), default=PublishMode.SIGNED)
    ref: str = _check(_oci_reference, default="")
    fail_on_error: bool = _check(_boolean, default=False)
    insecure_tls: bool = _check(_boolean, default=False)
    plain_http: bool = _check(_boolean, default=False)
    #: Directory holding a dockerconfigjson ``config.json`` (becomes DOCKER_CONFIG
    #: for the publish call only).
    registry_config_dir: str = _check(absolute_path(), default="")
    #: File holding the short-lived OIDC token for signed mode; read at publish time.
    identity_token_file: str = _check(absolute_path(), default="")


class ValidateSettings(StepArgs):
    enabled: bool = _check(_boolean, default=False)
    phases: list[Phase] = _check(_json_list(_choice(Phase)), factory=lambda: [Phase.DEPLOYMENT])
    fail_on_error: bool = _check(_boolean, default=False)
    emit_evidence: bool = _check(_boolean, default=False)
    result_configmap: str = _check(_k8s_name(), default="aicr-validate-result")
    evidence_configmap: str = _check(_k8s_name(), default="aicr-evidence-bundle")
    publish: PublishSettings = _group(factory=PublishSettings)


class LeaseSettings(_Group):
    """The install Lease: one installer at a time per chart release."""

    #: Lease name in the namespace; empty runs without a Lease (local runs). The
    #: chart derives it from the release name, which may hold dots.
    name: str = _check(_k8s_subdomain(), default="")
    #: This pod's name and its Job's name: together the holder identity. A failed
    #: run also reads its Job's labels to find the Flux HelmRelease that rendered it.
    pod_name: str = _check(_k8s_subdomain(), default="")
    job_name: str = _check(_k8s_subdomain(63), default="")
    #: A holder that stops renewing loses the Lease after this long.
    duration_seconds: int = _check(_integer(5, 3600), default=60)
    #: How long a run waits for another run's Lease before it gives up (exit 31).
    wait_seconds: float = _check(_seconds(86400, zero=True), default=7200.0)

    @property
    def pod_identity(self) -> str:
        """``job/pod`` (either part alone when the other is unknown); empty outside a pod."""
        return "/".join(part for part in (self.job_name, self.pod_name) if part)

    @property
    def holder(self) -> str:
        return self.pod_identity or "aicr-runner"


class ReportsApi(StrEnum):
    AUTO = "auto"
    OPENREPORTS = "openreports"
    WGPOLICY = "wgpolicy"
    NONE = "none"


class ReportsSettings(_Group):
    """The verdict as an OpenReports Report or a wgpolicyk8s PolicyReport (report_writer)."""

    api: ReportsApi = _check(_choice(ReportsApi), default=ReportsApi.AUTO)
    #: One name per release (the chart: ``aicr-<release>``), replaced in place each run.
    name: str = _check(_k8s_subdomain(), default="aicr")
    #: The chart release, as the report's ``aicr.nvidia.com/release`` label; empty: no label.
    release: str = _check(_k8s_subdomain(63), default="")


class RunnerSettings(_Group):
    """Every runtime input. Field docs are the environment table in docs/configuration.md."""

    criteria: Criteria = _group(factory=Criteria)
    pack: PackSettings = _group(factory=PackSettings)
    aicr: AicrSettings = _group(factory=AicrSettings)
    recipe: RecipeSettings = _group(factory=RecipeSettings)
    bundle: BundleSettings = _group(factory=BundleSettings)
    deploy: DeploySettings = _group(factory=DeploySettings)
    environment: EnvironmentSettings = _group(factory=EnvironmentSettings)
    lease: LeaseSettings = _group(factory=LeaseSettings)
    validate: ValidateSettings = _group(factory=ValidateSettings)
    reports: ReportsSettings = _group(factory=ReportsSettings)
    status_configmap: str = _check(_k8s_name(), default="aicr-run-status")
    #: Namespace of the result ConfigMaps; empty: the pod's.
    namespace: str = _check(_k8s_name(63), default="")
    work_dir: str = _check(absolute_path(required=True), default="/tmp/aicr-runner")  # noqa: S108 - the pod mounts an emptyDir there
    log_format: LogFormat = _check(_choice(LogFormat), default=LogFormat.CONSOLE)
    termination_message_path: str = _check(absolute_path(required=True), default="/dev/termination-log")
    #: How long a running child (helm inside deploy.sh) may finish after SIGTERM.
    shutdown_grace_seconds: float = _check(_seconds(3600, zero=True), default=60.0)
    #: How long one Kubernetes API write may keep retrying (429, 5xx, connection errors).
    kube_write_budget_seconds: float = _check(_seconds(3600), default=120.0)

    @property
    def work_path(self) -> Path:
        return Path(self.work_dir)


# -- the environment ------------------------------------------------------------------------


class _Leaf:
    """One variable: where its value goes and how it is checked."""

    __slots__ = ("check", "name", "path")

    def __init__(self, name: str, path: tuple[str, ...], check: Callable[[object], Any]) -> None:
        self.name = name
        self.path = path
        self.check = check


def _leaves(cls: type[_Group], prefix: str, path: tuple[str, ...]) -> Iterator[_Leaf]:
    for spec in cls._fields:
        if spec.group is not None:
            yield from _leaves(spec.group, f"{prefix}{spec.name.upper()}__", (*path, spec.name))
        elif spec.check is not None:
            yield _Leaf(f"{prefix}{spec.name.upper()}", (*path, spec.name), spec.check)


_LEAVES: dict[str, _Leaf] = {leaf.name: leaf for leaf in _leaves(RunnerSettings, ENV_PREFIX, ())}
_ORDER = {name: index for index, name in enumerate(_LEAVES)}


def env_var_names() -> list[str]:
    """Every environment variable the runtime reads (the contract test uses this)."""
    return list(_LEAVES)


def _build(cls: type[_Group], values: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for spec in cls._fields:
        if spec.name in values:
            kwargs[spec.name] = _build(spec.group, values[spec.name]) if spec.group is not None else values[spec.name]
    return cls(**kwargs)


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


def _unknown(key: str) -> str:
    import difflib

    guess = difflib.get_close_matches(key.upper(), _LEAVES, n=1, cutoff=0.85)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    return f"{escaped(key)}: unknown setting{hint}; see docs/configuration.md 'Environment' for the names"


def load(environ: Mapping[str, str] | None = None, *, local_pack: bool = False) -> RunnerSettings:
    """Read settings from ``environ`` (default ``os.environ``).

    Raises ``ConfigError`` with one readable line per problem, unknown
    variables first, then in the order of the environment table.
    """
    env = os.environ if environ is None else environ
    unknown: list[str] = []
    found: list[tuple[int, str]] = []
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, raw in env.items():
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        leaf = _LEAVES.get(upper)
        if leaf is None:
            unknown.append(_unknown(key))
            continue
        if upper in spelled:
            found.append((_ORDER[upper], f"{upper}: set twice, as {spelled[upper]} and {key}; set it once"))
            continue
        spelled[upper] = key
        try:
            value = leaf.check(raw)
        except Invalid as exc:
            found.append((_ORDER[upper], problem_line(upper, raw, exc)))
            continue
        node = values
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        node[leaf.path[-1]] = value
    problems = sorted(unknown) + [line for _, line in sorted(found)]
    if problems:
        raise ConfigError(problems)
    settings: RunnerSettings = _build(RunnerSettings, values)
    cross = _cross_field_problems(settings, local_pack=local_pack)
    if cross:
        raise ConfigError(cross)
    return settings


def _cross_field_problems(s: RunnerSettings, *, local_pack: bool = False) -> list[str]:
    """The chart's render-time guards, repeated so ``docker run`` users get them too.

    ``local_pack``: ``plan --pack-dir`` supplies a pack without a ref.
    """
    return [
        *_criteria_problems(s, local_pack=local_pack),
        *_run_problems(s),
        *_publish_problems(s),
        *_input_problems(s),
    ]


def _criteria_problems(s: RunnerSettings, *, local_pack: bool) -> list[str]:
    """Criteria aicr would refuse or misread."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[str] = []
    numbers = release_numbers(s.aicr.version)
    if not s.aicr.binary and numbers is not None:
        # The release's tag says what aicr does with these values; a preinstalled
        # aicr is asked its version first (the fetch step words them for it).
        problems += version_guards(c.stated(), numbers, f"aicr {s.aicr.version}")
    concrete_service = c.service not in NON_CONCRETE_SERVICES
    if not c.accelerator and not (s.pack.ref or local_pack) and not (concrete_service and c.intent):
        problems.append(
            f"{p}CRITERIA__*: no criteria stated (service={c.service!r}, accelerator='', intent="
            f"{c.intent!r}, pack ref=''); set an accelerator, a pack ref, or a concrete service "
            "together with an intent (e.g. service=bcm, intent=inference)"
        )
    if c.intent and c.service in ("any", ""):
        problems.append(
            f"{p}CRITERIA__INTENT={c.intent!r} with {p}CRITERIA__SERVICE={c.service!r}: a stated "
            "intent needs a service whose overlays declare it (aks, eks, gke, k0s, oke, ...); "
            "name the service or leave the intent empty"
        )
    return problems


def _run_problems(s: RunnerSettings) -> list[str]:
    """What the run does: deploy, validate, or both."""
    p = ENV_PREFIX
    problems: list[str] = []
    v = s.validate
    if not s.deploy.enabled and not v.enabled:
        problems.append(
            f"{p}DEPLOY__ENABLED=false needs {p}VALIDATE__ENABLED=true: a run that neither deploys "
            "nor validates does nothing"
        )
    if v.enabled and not v.phases:
        problems.append(
            f"{p}VALIDATE__PHASES=[]: name at least one phase (deployment, performance, conformance); "
            "an empty list makes aicr run every phase, performance included"
        )
    return problems


def _publish_problems(s: RunnerSettings) -> list[str]:
    """Publishing the evidence needs a validation with evidence, a target and, signed, a token."""
    p = ENV_PREFIX
    problems: list[str] = []
    v = s.validate
    pub = v.publish
    if pub.enabled:
        if not v.enabled:
            problems.append(
                f"{p}VALIDATE__PUBLISH__ENABLED=true needs {p}VALIDATE__ENABLED=true: publishing "
                "needs a validation run to produce the evidence bundle"
            )
        if not v.emit_evidence:
            problems.append(
                f"{p}VALIDATE__PUBLISH__ENABLED=true needs {p}VALIDATE__EMIT_EVIDENCE=true: without "
                "--emit-attestation there is no bundle to publish"
            )
        if not pub.ref:
            problems.append(
                f"{p}VALIDATE__PUBLISH__REF='': publishing needs an OCI push target such as ghcr.io/org/aicr-evidence"
            )
        if pub.mode is PublishMode.SIGNED and not pub.identity_token_file:
            problems.append(
                f"{p}VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE='' with mode=signed: mount a short-lived "
                "OIDC token and give its path, or use mode=unsigned and sign later with "
                "'aicr evidence sign <pointer> --relocate'"
            )
    return problems


def _input_problems(s: RunnerSettings) -> list[str]:
    """Settings that need another one: the binary's hash, the pack's transport, k0s's aicr."""
    p = ENV_PREFIX
    c = s.criteria
    problems: list[str] = []
    if s.aicr.binary_sha256 and not s.aicr.binary:
        problems.append(
            f"{p}AICR__BINARY_SHA256 is set but {p}AICR__BINARY is empty: the hash pins a "
            "preinstalled binary; give its path or drop the hash"
        )
    transport = [
        f"{p}PACK__{name.upper()}"
        for name in ("plain_http", "insecure_tls", "credentials_file")
        if getattr(s.pack, name)
    ]
    if transport and not s.pack.ref:
        problems.append(
            f"{' and '.join(transport)} {'is' if len(transport) == 1 else 'are'} set but {p}PACK__REF is empty: "
            "pack transport settings need a pack"
        )
    if c.service == "k0s" and _version_tuple(s.aicr.version) < (0, 22, 0):
        problems.append(
            f"{p}CRITERIA__SERVICE='k0s' with {p}AICR__VERSION={s.aicr.version!r}: service k0s needs "
            "aicr v0.22.0 or later"
        )
    return problems


def _version_tuple(version: str) -> tuple[int, int, int]:
    major, minor, patch = re.split(r"[.+-]", version.lstrip("v"))[:3]
    return int(major), int(minor), int(patch)
