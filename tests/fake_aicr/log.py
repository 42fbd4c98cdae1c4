"""Logging, structured errors and flag parsing of the fake aicr.

Mirrors aicr's behaviour (contract sections 3 and 4): every record goes to
stderr; ``--log-json`` prints slog JSON (time, level, msg, module, version plus
the event's keys); ``--debug`` prints slog text; the default CLI format is
``[cli] <msg>: k=v k=v`` with no level. A failure ends with the record
``command failed`` carrying ``error="[CODE] message"`` and ``exitCode``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

#: FAKE_AICR_VERSION=0.11.1 makes the fake behave as a 0.11-style aicr (see legacy()).
VERSION = os.environ.get("FAKE_AICR_VERSION", "").strip() or "1.2.0"
#: Says what this is wherever the runner reports the aicr version (the offline demo).
COMMIT = "test-stand-in"
BUILD_DATE = "2026-05-04T00:00:00Z"

#: pkg/errors: the outermost code decides the exit code.
EXIT_CODES = {
    "INVALID_REQUEST": 2,
    "METHOD_NOT_ALLOWED": 2,
    "CONFLICT": 2,
    "NOT_FOUND": 3,
    "UNAUTHORIZED": 4,
    "TIMEOUT": 5,
    "SERVICE_UNAVAILABLE": 6,
    "POLICY_FETCH": 6,
    "RATE_LIMIT_EXCEEDED": 7,
    "INTERNAL": 8,
}
EXIT_ABORTED = 9

_GREEN = "\033[32m"
_RED = "\033[31m"
_RESET = "\033[0m"


class AicrError(Exception):
    """A structured error: ``[CODE] message`` or ``[CODE] message: cause``."""

    def __init__(self, code: str, message: str, cause: object | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.cause = cause

    def __str__(self) -> str:
        if self.cause is not None:
            return f"[{self.code}] {self.message}: {self.cause}"
        return f"[{self.code}] {self.message}"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.code, 1)


class UsageError(Exception):
    """A flag-parse error: unstructured, so it exits 1 (urfave/cli behaviour)."""


class Aborted(Exception):
    """SIGINT/SIGTERM reached a running command (1.x exits 9)."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def legacy() -> bool:
    """A 0.x aicr (FAKE_AICR_VERSION=0.11.1): no bundle --storage-class, no validate
    --emit-attestation/--data, no ``evidence`` command, a verify that is not
    closed-world, and deploy.sh's 0.11 markers (no per-component result lines)."""
    return VERSION.startswith("0.")


def skips_output(command: str) -> bool:
    """FAKE_AICR_SKIP_OUTPUT=<command>: exit 0 without writing --output (a broken aicr)."""
    return os.environ.get("FAKE_AICR_SKIP_OUTPUT", "").strip() == command


def log_style() -> str:
    """``1.x`` (default) or ``0.11`` (FAKE_AICR_LOG_STYLE=0.11, or a 0.x version) for the text format."""
    if legacy():
        return "0.11"
    return "0.11" if os.environ.get("FAKE_AICR_LOG_STYLE", "").strip() in ("0.11", "0.11.1") else "1.x"


@dataclass
class Logger:
    json_mode: bool = False
    debug_mode: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)

    def _emit(self, level: str, msg: str, attrs: dict[str, Any]) -> None:
        if level == "DEBUG" and not self.debug_mode:
            return
        if self.json_mode:
            record: dict[str, Any] = {
                "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
                "level": level,
                "msg": msg,
                "module": "aicr",
                "version": VERSION,
            }
            record.update(attrs)
            line = json.dumps(record, ensure_ascii=False, default=str)
        elif self.debug_mode:
            parts = [
                f"time={datetime.now(UTC).isoformat(timespec='milliseconds').replace('+00:00', 'Z')}",
                f"level={level}",
                f"msg={_quote(msg)}",
                "module=aicr",
                f"version={VERSION}",
            ]
            parts.extend(f"{key}={_quote(_text(value))}" for key, value in attrs.items())
            line = " ".join(parts)
        else:
            prefix = os.environ.get("AICR_LOG_PREFIX") or "cli"
            line = f"[{prefix}] {msg}"
            if attrs:
                line += ": " + " ".join(f"{key}={_text(value)}" for key, value in attrs.items())
            if log_style() == "0.11":
                # 0.11.1 coloured every line, TTY or not.
                line = (_RED if level == "ERROR" else _GREEN) + line + _RESET
            elif self.stream.isatty() and not os.environ.get("NO_COLOR"):
                line = (_RED if level == "ERROR" else _GREEN) + line + _RESET
        self.stream.write(line + "\n")
        self.stream.flush()

    def debug(self, msg: str, **attrs: Any) -> None:
        self._emit("DEBUG", msg, attrs)

    def info(self, msg: str, **attrs: Any) -> None:
        self._emit("INFO", msg, attrs)

    def warn(self, msg: str, **attrs: Any) -> None:
        self._emit("WARN", msg, attrs)

    def error(self, msg: str, **attrs: Any) -> None:
        self._emit("ERROR", msg, attrs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + " ".join(_text(item) for item in value) + "]"
    return str(value)


def _quote(value: str) -> str:
    if value == "" or any(ch in value for ch in ' ="\n'):
        return json.dumps(value)
    return value


# ---------------------------------------------------------------------------
# Flag parsing (urfave/cli-like: --flag value, --flag=value, -f value, bool
# flags with optional =true/false, interspersed positionals, "--" ends flags).
# ---------------------------------------------------------------------------


def go_log_error(error: str, exit_code: int) -> None:
    """The record 0.11.1 prints when a command fails before its logger exists (a
    flag-parse error): Go's default log format, whatever --log-json says."""
    stamp = datetime.now(UTC).strftime("%Y/%m/%d %H:%M:%S")
    sys.stderr.write(f"{stamp} ERROR command failed error={json.dumps(error)} exitCode={exit_code}\n")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    kind: str = "str"  # str | bool | list | int
    default: Any = None
    #: The flag's line in ``--help``.
    usage: str = ""

    @property
    def key(self) -> str:
        return self.names[0]


@dataclass
class Parsed:
    values: dict[str, Any]
    positionals: list[str]
    counts: dict[str, int]

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def given(self, key: str) -> bool:
        return self.counts.get(key, 0) > 0


def parse_flags(args: Sequence[str], flags: Sequence[Flag]) -> Parsed:
    by_name = {name: flag for flag in flags for name in flag.names}
    values: dict[str, Any] = {
        flag.key: list(flag.default or []) if flag.kind == "list" else flag.default for flag in flags
    }
    counts: dict[str, int] = {}
    positionals: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positionals.extend(args[index:])
            break
        if not arg.startswith("-") or arg == "-":
            positionals.append(arg)
            continue
        name, has_value, inline = arg.lstrip("-").partition("=")
        flag = by_name.get(name)
        if flag is None:
            raise UsageError(f"flag provided but not defined: -{name}")
        counts[flag.key] = counts.get(flag.key, 0) + 1
        if flag.kind == "bool":
            values[flag.key] = _bool_value(name, inline) if has_value else True
            continue
        if not has_value:
            if index >= len(args):
                raise UsageError(f"flag needs an argument: -{name}")
            inline = args[index]
            index += 1
        _store(values, flag, name, inline)
    return Parsed(values=values, positionals=positionals, counts=counts)


def _bool_value(name: str, text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise UsageError(f'invalid value "{text}" for flag -{name}: parse error')  # urfave/cli's words (0.11.1)
    return text.lower() in ("true", "1")


def _store(values: dict[str, Any], flag: Flag, name: str, text: str) -> None:
    if flag.kind == "list":
        values[flag.key].append(text)
    elif flag.kind == "int":
        try:
            values[flag.key] = int(text)
        except ValueError as exc:
            raise UsageError(f'invalid value "{text}" for flag -{name}: parse error') from exc
    else:
        values[flag.key] = text
