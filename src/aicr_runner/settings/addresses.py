"""The checks of where things are fetched from: hosts (DNS names, IPv4, [IPv6],
internationalised names as the HTTP client encodes them), ports, URLs and OCI and pack
references, each refusing a user or password in the value before anything else
(``refuse_credentials``: a credential never shows in a message). ``settings.checks``
holds the other checks; ``settings.mirror_checks`` builds the mirror's on these.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from aicr_runner.masking import userinfo_span
from aicr_runner.settings.checks import ENV_PREFIX, Invalid, bounded_text

__all__ = ["host", "issuer", "oci_reference", "pack_reference", "port", "refuse_credentials", "url"]

_HOST_LABEL = r"[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?"
_IPV4 = r"[0-9]{1,3}(\.[0-9]{1,3}){3}"
_PORT = r"[0-9]{1,5}"


def host(name: str) -> None:
    """A registry or server host name, IPv4 or [IPv6] address, as a client would resolve it."""
    if name.startswith("["):
        import ipaddress

        try:
            ipaddress.IPv6Address(name[1:-1] if name.endswith("]") else "")
        except ValueError:
            raise Invalid(f"{name!r} is not a valid [IPv6] address") from None
        return
    if re.fullmatch(_IPV4, name):
        if any(int(part) > 255 for part in name.split(".")):
            raise Invalid(f"{name!r} is not a valid IPv4 address")
        return
    if not name.isascii() or any(label.lower().startswith("xn--") for label in name.split(".")):
        # What the HTTP client does with it (httpx encodes with the idna package).
        import idna

        try:
            name = idna.encode(name.lower()).decode("ascii")
        except idna.IDNAError as exc:
            raise Invalid(f"the host is not a valid internationalised domain name ({exc})") from None
    labels = name.removesuffix(".").split(".")
    if len(name) > 253 or not all(re.fullmatch(_HOST_LABEL, label) for label in labels):
        raise Invalid("the host must be a DNS name (letters, digits, '-' per label, at most 63 characters each)")


def port(text: str) -> None:
    if not re.fullmatch(_PORT, text) or not 1 <= int(text) <= 65535:
        raise Invalid(f"port {text!r} must be a number from 1 to 65535")


def refuse_credentials(value: object, what: str, hint: str, *, elsewhere: str) -> None:
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


def url(schemes: tuple[str, ...], credentials_hint: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        refuse_credentials(value, "URL", credentials_hint, elsewhere="an '@' in the path (write it %40)")
        text = bounded_text(value)
        allowed = " or ".join(f"{s}://" for s in schemes)
        if " " in text:
            raise Invalid(f"a space at position {text.index(' ')}; a URL has none (percent-encode it as %20)")
        scheme, sep, rest = text.partition("://")
        if not sep or scheme.lower() not in schemes:
            raise Invalid(f"must be an {allowed} URL")
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "?" in rest or "#" in rest:
            raise Invalid("must have no query ('?') or fragment ('#')")
        name, number = authority, ""
        if match := re.fullmatch(r"(\[[^\]]*\]|[^:]*)(?::(.*))?", authority):
            name, number = match.group(1), match.group(2) or ""
        if not name:
            raise Invalid(f"must name a host ({allowed}host/...)")
        host(name)
        if number or authority.endswith(":"):
            port(number)
        return text.rstrip("/")

    return check


#: What an '@' after the host of a reference may be.
_DIGEST_AT = "a digest not written as @sha256:<64 lowercase hex characters> at the end"


def oci_reference(value: object) -> str:
    """An OCI push/pull target without a scheme: ``host[:port]/path[:tag|@digest]``."""
    refuse_credentials(
        value,
        "reference",
        f"give a dockerconfigjson directory ({ENV_PREFIX}VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR; chart: "
        "validate.publish.registrySecret)",
        elsewhere=_DIGEST_AT,
    )
    text = bounded_text(value)
    if not text:
        return text
    if "://" in text:
        raise Invalid("must be an OCI reference without a scheme, like registry.example.com/org/name")
    authority, slash, path = text.partition("/")
    if not slash or not path or any(c.isspace() for c in path):
        raise Invalid("must be host/path, like registry.example.com/org/name (no spaces)")
    name, colon, number = authority.partition(":") if not authority.startswith("[") else (authority, "", "")
    host(name)
    if colon:
        port(number)
    return text


def pack_reference(value: object) -> str:
    refuse_credentials(
        value,
        "reference",
        f"give a dockerconfigjson file ({ENV_PREFIX}PACK__CREDENTIALS_FILE; chart: pack.secret)",
        elsewhere=_DIGEST_AT,
    )
    text = bounded_text(value)
    if text:
        from aicr_runner.net.reference import InvalidReference, PackReference

        try:
            PackReference.parse(text)
        except InvalidReference as exc:
            raise Invalid(str(exc)) from None
    return text


def issuer(value: object) -> str:
    return url(("https",), "an OIDC issuer needs none")(value)
