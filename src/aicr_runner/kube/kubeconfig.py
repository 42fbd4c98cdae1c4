"""A kubeconfig read once, checked at the boundary, for ``fleet``.

kubectl's rules: ``--kubeconfig`` names one file; else ``KUBECONFIG`` lists
files (``:``-separated, missing ones skipped, the first definition of a name
wins, and so does the first ``current-context``); else ``~/.kube/config``.

Read as an unkind environment would hand it over: only a regular file (a FIFO
or ``/dev/zero`` would block or never end), at most ``MAX_BYTES``, UTF-8, YAML
parsed by libyaml, at most ``MAX_NODES`` nodes once aliases are expanded (an
alias bomb is a few hundred bytes), and the shape checked (a mapping; clusters,
users and contexts lists of named mappings; base64 where the format says
base64). Anything else is a ``ConfigError`` of one line naming the file and
what is wrong, never its contents. Relative file paths are made absolute
against the file that names them, as kubectl does. The userinfo of a server
URL (``https://user:password@host``) is registered with the redacting log
before anything can print it, and so are the token, password, key and
auth-provider tokens of the users of the contexts to read
(``register_credentials``, once they are chosen).
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aicr_runner import logs
from aicr_runner.errors import ConfigError
from aicr_runner.masking import userinfo_span

__all__ = ["MAX_BYTES", "MAX_NODES", "Kubeconfig", "kubeconfig_paths", "read_kubeconfig", "register_credentials"]

#: Far above any real kubeconfig (200 contexts with CA data are about 1 MB); a
#: bigger file is refused before it is parsed.
MAX_BYTES = 8 * 1024 * 1024
#: Nodes once aliases are expanded: an alias bomb is refused, a real file is far below.
MAX_NODES = 1_000_000
_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))
_BASE64 = {
    "cluster": ("certificate-authority-data",),
    "user": ("client-certificate-data", "client-key-data"),
}
_PATHS = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


@dataclass
class Kubeconfig:
    """The merged kubeconfig: each section's entries by name, the current context."""

    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    current: str = ""
    #: The folder of the first file (relative paths the fields above do not cover).
    base: str = ""

    def section(self, name: str) -> dict[str, dict[str, Any]]:
        sections: dict[str, dict[str, dict[str, Any]]] = {
            "clusters": self.clusters,
            "users": self.users,
            "contexts": self.contexts,
        }
        return sections[name]


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> tuple[str, list[Path]]:
    """How the kubeconfig was named (for messages) and its files, kubectl's way."""
    if flag:
        return f"--kubeconfig={flag}", [Path(flag)]
    listed = environ.get("KUBECONFIG", "")
    if listed:
        existing = [Path(p).expanduser() for p in listed.split(os.pathsep) if p and Path(p).expanduser().exists()]
        if not existing:
            raise ConfigError([f"KUBECONFIG={listed}: none of its files exists"])
        return f"KUBECONFIG={listed}", existing
    return "~/.kube/config", [Path("~/.kube/config").expanduser()]


def read_kubeconfig(flag: str | None, environ: Mapping[str, str]) -> Kubeconfig:
    """The kubeconfig, every file read once; ``ConfigError`` (one line) when it cannot be used."""
    _, paths = kubeconfig_paths(flag, environ)
    merged = Kubeconfig(base=str(paths[0].parent))
    for path in paths:
        document = _load(path)
        _merge(merged, document, path)
    return merged


def _problem(path: Path, what: str) -> ConfigError:
    return ConfigError([f"kubeconfig {_shown(str(path))}: {what}"])


def _shown(text: str) -> str:
    """``text`` on one printable ASCII line: control characters and non-ASCII escaped."""
    return text.encode("unicode_escape").decode("ascii")[:300]


def _load(path: Path) -> Mapping[str, Any]:
    """One file's YAML document, bounded in bytes and nodes."""
    try:
        info = path.stat()
    except OSError as exc:
        raise _problem(path, f"cannot be read ({exc.strerror or type(exc).__name__})") from exc
    if not stat.S_ISREG(info.st_mode):
        raise _problem(path, "not a regular file (a FIFO, a device or a directory is never read)")
    if info.st_size > MAX_BYTES:
        raise _problem(path, f"{info.st_size} bytes, over the {MAX_BYTES}-byte limit")
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _problem(path, f"cannot be read ({exc.strerror or type(exc).__name__})") from exc
    if len(raw) > MAX_BYTES:
        raise _problem(path, f"over the {MAX_BYTES}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _problem(path, f"not UTF-8 (byte {exc.start})") from exc
    document = _parse(path, text)
    if document is None:
        raise _problem(path, "empty")
    if not isinstance(document, Mapping):
        raise _problem(path, f"a YAML {type(document).__name__}, not a mapping (apiVersion, kind, clusters, ...)")
    _count_nodes(path, document)
    return document


def _parse(path: Path, text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (libyaml's when present)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _problem(path, f"not YAML{where}") from exc
    except RecursionError as exc:
        raise _problem(path, "nested too deeply") from exc


def _count_nodes(path: Path, document: Any) -> None:
    """Refuse a document whose aliases expand past ``MAX_NODES`` (counted, never expanded)."""
    seen = 0
    stack = [document]
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise _problem(path, f"over {MAX_NODES} YAML nodes once its aliases are expanded")
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _merge(merged: Kubeconfig, document: Mapping[str, Any], path: Path) -> None:
    for section, body_key in _SECTIONS:
        entries = document.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise _problem(path, f"{section} is a {type(entries).__name__}, not a list")
        for index, entry in enumerate(entries):
            name, body = _entry(path, section, body_key, index, entry)
            _check_body(path, f"{section}[{name}]", body_key, body)
            merged.section(section).setdefault(name, _absolute(body, body_key, path.parent))
    current = document.get("current-context")
    if current is not None and not isinstance(current, str):
        raise _problem(path, "current-context is not a string")
    if current and not merged.current:
        merged.current = current


def _entry(path: Path, section: str, body_key: str, index: int, entry: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(entry, Mapping):
        raise _problem(path, f"{section}[{index}] is not a mapping")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise _problem(path, f"{section}[{index}] has no name")
    body = entry.get(body_key)
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise _problem(path, f"{_shown(f'{section}[{name}]')}.{body_key} is not a mapping")
    return name, dict(body)


def _check_body(path: Path, where: str, body_key: str, body: Mapping[str, Any]) -> None:
    for key in _BASE64.get(body_key, ()):
        if key in body and not _is_base64(body[key]):
            raise _problem(path, f"{_shown(where)}.{key} is not base64")
    for key, value in body.items():
        if key in ("cluster", "user", "namespace", "server", "token", "username", "password") and not isinstance(
            value, str
        ):
            raise _problem(path, f"{_shown(where)}.{key} is not a string")
    server = body.get("server")
    if isinstance(server, str):
        _register_userinfo(server)
    if "exec" in body and not isinstance(body["exec"], Mapping):
        raise _problem(path, f"{_shown(where)}.exec is not a mapping")


def _is_base64(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _register_userinfo(server: str) -> None:
    """A password in a server URL may hold any character: the whole userinfo,
    and the password alone, are never printed."""
    span = userinfo_span(server)
    if span is None:
        return
    userinfo = server[span[0] : span[1]]
    logs.register_secret(userinfo)
    if ":" in userinfo:
        logs.register_secret(userinfo.split(":", 1)[1])


#: A user entry's credentials, and an auth provider's (oidc, azure, gcp): never printed.
_USER_SECRETS = ("token", "password", "client-key-data")
_PROVIDER_SECRETS = ("id-token", "refresh-token", "client-secret", "access-token")


def register_credentials(config: Kubeconfig, contexts: Iterable[str]) -> None:
    """The credentials of the users of ``contexts`` registered with the redacting
    log at once: whatever a library logs about them (the client, urllib3, an
    auth provider's refresh) is printed without them."""
    values: list[str] = []
    for context in contexts:
        user = config.users.get(str(config.contexts.get(context, {}).get("user") or "")) or {}
        provider = user.get("auth-provider")
        provider_config = provider.get("config") if isinstance(provider, Mapping) else None
        found = [user.get(key) for key in _USER_SECRETS]
        found += [provider_config.get(key) for key in _PROVIDER_SECRETS] if isinstance(provider_config, Mapping) else []
        values += [value for value in found if isinstance(value, str) and value]
    logs.SECRETS.register_many(values)


def _absolute(body: dict[str, Any], body_key: str, folder: Path) -> dict[str, Any]:
    """Relative file paths made absolute against the file that names them."""
    for key in _PATHS.get(body_key, ()):
        value = body.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[key] = str(folder / value)
    plugin = body.get("exec")
    if isinstance(plugin, Mapping):
        command = plugin.get("command")
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            body["exec"] = {**plugin, "command": str(folder / command)}
    return body
