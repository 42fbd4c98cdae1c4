"""Logging: structlog, human-readable by default, JSON with one setting.

Every string that reaches a log line passes through ``redact``: credentials read by
the runner (pack and publish registry auth, the identity token) are registered
with ``register_secret`` when they are read, and replaced by ``***`` wherever they
would appear, including in relayed child output.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from aicr_runner.config import LogFormat

__all__ = [
    "configure",
    "format_relayed_line",
    "get_logger",
    "redact",
    "register_dockerconfig_secrets",
    "register_secret",
]

_MASK = "***"
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
#: Shorter values would mask ordinary words; registry passwords are not this short.
_MIN_SECRET_LENGTH = 4


def register_secret(value: str) -> None:
    """Never print ``value`` again, in any log line or relayed output."""
    value = value.strip()
    if len(value) >= _MIN_SECRET_LENGTH:
        with _secrets_lock:
            _secrets.add(value)


def register_dockerconfig_secrets(raw: str | bytes) -> None:
    """Register every credential found in a dockerconfigjson document.

    The encoded ``auth`` value, its decoded ``user:password`` form and the password
    alone are all registered, since a tool may echo any of them.
    """
    try:
        document = json.loads(raw)
    except (ValueError, TypeError):
        # Not JSON: the whole thing is the credential as far as we know.
        register_secret(raw.decode(errors="replace") if isinstance(raw, bytes) else raw)
        return
    auths = document.get("auths", {}) if isinstance(document, dict) else {}
    for entry in auths.values() if isinstance(auths, dict) else ():
        if not isinstance(entry, dict):
            continue
        for key in ("auth", "password", "identitytoken", "registrytoken"):
            if isinstance(entry.get(key), str):
                register_secret(entry[key])
        if isinstance(entry.get("auth"), str):
            try:
                decoded = base64.b64decode(entry["auth"]).decode(errors="replace")
            except ValueError:
                continue
            register_secret(decoded)
            if ":" in decoded:
                register_secret(decoded.split(":", 1)[1])


def redact(text: str) -> str:
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


def _redact_processor(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    return {key: _redact_value(value) for key, value in event_dict.items()}


def format_relayed_line(line: str) -> str:
    """aicr logs JSON with ``--log-json``; show such lines as ``msg k=v`` for people."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return line.rstrip("\n")
    try:
        record = json.loads(stripped)
    except ValueError:
        return line.rstrip("\n")
    if not isinstance(record, dict) or "msg" not in record:
        return line.rstrip("\n")
    skip = {"time", "msg", "module", "version", "level"}
    extras = " ".join(f"{k}={v}" for k, v in record.items() if k not in skip)
    level = str(record.get("level", "")).upper()
    prefix = f"{level} " if level and level != "INFO" else ""
    return f"{prefix}{record['msg']}" + (f" {extras}" if extras else "")


def configure(fmt: LogFormat = LogFormat.CONSOLE, stream: TextIO | None = None) -> None:
    """Configure structlog (and route stdlib loggers such as oras/urllib3 through it)."""
    output = stream if stream is not None else sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact_processor,
    ]
    renderer: Any
    if fmt is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.dict_tracebacks)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(output)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)


def secrets_snapshot() -> Iterable[str]:
    """For tests: the registered secrets."""
    with _secrets_lock:
        return frozenset(_secrets)
