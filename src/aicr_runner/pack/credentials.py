"""The pack registry's credential, from the runner's credentials file only.

A Docker config (``auths``) is read for the one registry host of the pack
reference, with the host's aliases (``localhost``/``127.0.0.1``, Docker Hub's
names); never ``~/.docker/config.json``, ``$DOCKER_CONFIG``, credential helpers
or ``~/.netrc``. Every secret found is registered for redaction as it is read.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from aicr_runner.errors import PackAuthError
from aicr_runner.logs import register_dockerconfig_secrets, register_secret

__all__ = [
    "entry_for",
    "load_registry_credential",
]


def _host_aliases(host: str) -> set[str]:
    host = host.lower()
    aliases = {host}
    if host.startswith("localhost"):
        aliases.add(host.replace("localhost", "127.0.0.1", 1))
    elif host.startswith("127.0.0.1"):
        aliases.add(host.replace("127.0.0.1", "localhost", 1))
    docker_hub = {"docker.io", "index.docker.io", "registry-1.docker.io"}
    if host in docker_hub:
        aliases |= docker_hub
    return aliases


def _config_key_host(key: str) -> str:
    """``https://index.docker.io/v1/`` -> ``index.docker.io``; ``host:5000`` stays."""
    key = key.strip()
    if "://" in key:
        key = key.split("://", 1)[1]
    return key.split("/", 1)[0].lower()


def entry_for(entries: dict[str, Any], host: str) -> Any:
    """The value of ``entries`` (a docker config's ``auths`` or ``credHelpers``) for ``host``,
    by any of its aliases; None when there is none."""
    wanted = _host_aliases(host)
    return next((v for k, v in entries.items() if _config_key_host(str(k)) in wanted), None)


def load_registry_credential(path: Path, host: str) -> str:
    """The base64 ``user:password`` for ``host`` from a dockerconfigjson file.

    Only inline ``auth`` or ``username``/``password`` entries count: credential
    helpers are not available in the pod. No usable entry for ``host`` is an error,
    never an anonymous pull.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PackAuthError(f"registry {host}: cannot read the credentials file {path}: {exc.strerror or exc}") from exc
    register_dockerconfig_secrets(raw)
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise PackAuthError(f"registry {host}: credentials file {path} is not valid JSON") from exc
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        raise PackAuthError(f"registry {host}: credentials file {path} has no 'auths' object")
    entry = entry_for(auths, host)
    if entry is None:
        known = ", ".join(sorted(_config_key_host(str(k)) for k in auths)) or "none"
        raise PackAuthError(
            f"registry {host}: credentials file {path} has no entry for this registry (entries: {known}); "
            "refusing to pull anonymously"
        )
    return _entry_credential(entry, host, path)


def _entry_credential(entry: Any, host: str, path: Path) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            decoded = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise PackAuthError(f"registry {host}: the 'auth' entry in {path} is not base64") from exc
        if ":" not in decoded:
            raise PackAuthError(f"registry {host}: the 'auth' entry in {path} is not base64 of user:password")
        return str(entry["auth"])
    if isinstance(entry, dict) and entry.get("username") and entry.get("password"):
        encoded = base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
        register_secret(encoded)
        return encoded
    raise PackAuthError(
        f"registry {host}: the entry in {path} has neither 'auth' nor 'username'/'password' "
        "(identity tokens and credential helpers are not supported)"
    )
