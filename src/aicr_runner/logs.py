"""Logging: structlog's format, human-readable by default, JSON with one setting.

Every string that reaches a log line passes through ``redact``: credentials read by
the runner (pack and publish registry auth, the identity token) are registered
with ``register_secret`` when they are read, and replaced by ``***`` wherever they
would appear, including in relayed child output.

Relayed child output (deploy.sh can print gigabytes) does not go through
the event path line by line: ``relay`` writes already-redacted blocks of lines
straight to the pod log, rendered the way structlog renders an event in the
configured format (same timestamp, level, ``step`` and ``source``), buffered and
flushed at least every 100 ms (``flush_relay_if_due``), before every structured
event (so the order holds) and at exit. Lines that mean something (deploy
markers, errors) are logged as structured events by the caller.

Events are rendered here the way structlog renders them (console without colours,
or JSON; level, ISO UTC timestamp, every value redacted), without importing
structlog: its import (and asyncio's) was a large part of a quick plan's own
time. Every module logs through ``get_logger``; records of the standard
library's loggers (oras, urllib3) get the same rendering, configured the moment
``logging`` is imported.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, TextIO

from aicr_runner.settings.config import LogFormat

__all__ = [
    "SECRETS",
    "SecretRegistry",
    "configure",
    "flush_relay",
    "flush_relay_if_due",
    "format_relayed_line",
    "get_logger",
    "protected_bytes",
    "redact",
    "register_dockerconfig_secrets",
    "register_secret",
    "relay",
    "write_traceback",
]

_MASK = "***"
#: Shorter values would mask ordinary words; registry passwords are not this short.
_MIN_SECRET_LENGTH = 4


class SecretRegistry:
    """Values never to print: every log line and relayed block is redacted with them.

    Registration is rare and takes the lock; redaction is hot and reads tuples
    that are replaced whole (atomically), without the lock. ``isolated`` is the
    one seam for tests: whatever a test registers is gone when it ends.
    """

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        #: Longest first, so a secret containing another is masked whole.
        self._ordered_bytes: tuple[bytes, ...] = ()
        #: (secret, witness): the shortest registered secret inside it. Where the
        #: witness is absent the secret is too, so a password and its
        #: ``user:password`` cost one scan of the text, not two.
        self._plan: tuple[tuple[str, str], ...] = ()

    def register(self, value: str) -> None:
        """Never print ``value`` again, in any log line or relayed output.

        Output is redacted line by line, so each line of a multi-line value is
        registered too: a value cut by a line break still leaves no piece behind.
        """
        value = value.strip()
        candidates = [value, *(line.strip() for line in value.splitlines())] if "\n" in value else [value]
        with self._lock:
            self._secrets.update(c for c in candidates if len(c) >= _MIN_SECRET_LENGTH)
            self._rebuild()

    def _rebuild(self) -> None:
        """Derive the lock-free views of the set (call with the lock held)."""
        ordered = tuple(sorted(self._secrets, key=len, reverse=True))
        self._ordered_bytes = tuple(secret.encode() for secret in ordered)
        self._plan = tuple((secret, min((o for o in ordered if o in secret), key=len)) for secret in ordered)

    def redact(self, text: str) -> str:
        """``text`` with every registered secret masked; ``text`` may hold many lines."""
        absent: set[str] = set()
        for secret, witness in self._plan:
            if witness in absent:
                continue
            # The (shorter) witness first: usually absent, and then so is the secret.
            if secret is not witness and witness not in text:
                absent.add(witness)
            elif secret in text:
                text = text.replace(secret, _MASK)
            elif secret is witness:
                absent.add(witness)
        return text

    def protected_bytes(self) -> Sequence[bytes]:
        """The registered secrets as UTF-8: where a too-long line is cut, no cut may
        fall inside one of these (each piece is redacted on its own)."""
        return self._ordered_bytes

    @contextlib.contextmanager
    def isolated(self, secrets: Iterable[str] | None = None) -> Iterator[None]:
        """Within the block, the registry holds ``secrets`` exactly as given (None:
        what it holds now); afterwards, what it held before, whatever was registered."""
        with self._lock:
            saved = set(self._secrets)
            if secrets is not None:
                self._secrets = set(secrets)
                self._rebuild()
        try:
            yield
        finally:
            with self._lock:
                self._secrets = saved
                self._rebuild()


#: The process's registry: credentials are registered where they are read.
SECRETS = SecretRegistry()


def register_secret(value: str) -> None:
    """Never print ``value`` again (see ``SecretRegistry.register``)."""
    SECRETS.register(value)


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
    """``text`` with every registered secret masked; ``text`` may hold many lines."""
    return SECRETS.redact(text)


def protected_bytes() -> Sequence[bytes]:
    """The registered secrets as UTF-8 (see ``SecretRegistry.protected_bytes``)."""
    return SECRETS.protected_bytes()


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


def format_relayed_line(line: str) -> str:
    """aicr logs JSON with ``--log-json``; show such lines as ``msg k=v`` for people.

    A re-rendered record is redacted again: JSON escapes (``\\u0041``) can hide a
    secret from the pass over the raw text, and parsing undoes them."""
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
    return redact(f"{prefix}{record['msg']}" + (f" {extras}" if extras else ""))


#: Printable ASCII that JSON leaves as it is (no quote, no backslash).
_JSON_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


def _needs_no_escape(body: str) -> bool:
    """Whether every line of ``body`` is already a valid JSON string body, so
    escaping would change nothing: one C-level ``translate`` over the block."""
    return body.isascii() and not body.encode("ascii").translate(None, _JSON_PLAIN).strip(b"\n")


class _Relay:
    """Relayed child output, straight to the pod log in the configured format.

    Takes blocks of already-redacted lines (each ending in a newline) and
    renders each line as structlog would render ``info(line, source=...)`` with
    ``step`` bound, but with a handful of C-level operations per block instead
    of a processor chain per line. All lines of one block arrived in one read,
    so they share one timestamp. The block is rendered as UTF-8 bytes and
    written to the stream's byte buffer: ``bytes.replace`` is about four times
    faster than ``str.replace`` here, and the text layer's encoding pass is saved.
    """

    #: Flush when this much is buffered, or when the oldest buffered line is this old.
    MAX_BUFFERED_BYTES = 256 * 1024
    MAX_DELAY_SECONDS = 0.1

    def __init__(self, fmt: LogFormat, stream: TextIO | None) -> None:
        self.fmt = fmt
        #: None: whatever sys.stderr is at write time (tests swap it).
        self.stream = stream
        self._parts: list[bytes | memoryview] = []
        self._size = 0
        self._since: float | None = None

    def write(self, text: str, *, step: str, source: str, json_plain: bool | None = None) -> None:
        """``json_plain``: whether every line is already a valid JSON string body,
        when the caller knows (``blockscan`` found it in its pass over the block)."""
        if not text:
            return
        if not text.endswith("\n"):
            text += "\n"
        # Every value is redacted, as render_event does for an event:
        # a secret that happens to read like the date, the level or the step
        # name is masked there too.
        stamp = redact(datetime.now(UTC).isoformat().replace("+00:00", "Z"))
        step, source, level = redact(step), redact(source), redact("info")
        if self.fmt is LogFormat.JSON:
            head = f'{{"step": "{step}", "source": "{source}", "event": '
            tail = f', "level": "{level}", "timestamp": "{stamp}"}}\n'
            if json_plain is None:
                json_plain = _needs_no_escape(text[:-1])
            if json_plain:  # helm output mostly: each line is its own JSON string
                self._add_lines(_utf8(text), _utf8(head + '"'), _utf8('"' + tail))
            elif "\\" in text:  # a backslash makes "\\n" ambiguous after escaping: line by line
                lines = (tail + head).join(map(encode_basestring_ascii, text[:-1].split("\n")))
                self._add(_utf8(head + lines + tail))
            else:  # escape the block once; each escaped newline becomes a record boundary
                escaped = encode_basestring_ascii(text[:-1]).replace("\\n", f'"{tail}{head}"')
                self._add(_utf8(head + escaped + tail))
        else:
            self._add_lines(_utf8(text), _utf8(f"{stamp} [{level:<9}] "), _utf8(f" source={source} step={step}\n"))

    def _add_lines(self, block: bytes, head: bytes, tail: bytes) -> None:
        """Each line of ``block`` (ending in a newline) between ``head`` and ``tail``:
        one ``replace``; the head it leaves after the last line is cut by a view, not a copy."""
        rendered = block.replace(b"\n", tail + head)
        self._add(head, memoryview(rendered)[: len(rendered) - len(head)])

    def _add(self, *parts: bytes | memoryview) -> None:
        self._parts += parts
        self._size += sum(map(len, parts))
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if self._size >= self.MAX_BUFFERED_BYTES or now - self._since >= self.MAX_DELAY_SECONDS:
            self.flush()

    def flush_if_due(self) -> None:
        if self._since is not None and time.monotonic() - self._since >= self.MAX_DELAY_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._parts:
            return
        stream = self.stream if self.stream is not None else sys.stderr
        data = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._since = None
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a text-only stream (tests' StringIO)
            stream.write(data.decode())
            stream.flush()
            return
        stream.flush()  # whatever the text layer holds goes first
        buffer.write(data)
        buffer.flush()


def _utf8(text: str) -> bytes:
    """The pod log's bytes; a lone surrogate (from a JSON escape) shown as stderr shows it."""
    return text.encode("utf-8", "backslashreplace")


_relay = _Relay(LogFormat.CONSOLE, None)


def relay(text: str, *, step: str, source: str, json_plain: bool | None = None) -> None:
    """Write redacted child output (whole lines) to the pod log; see ``_Relay``."""
    _relay.write(text, step=step, source=source, json_plain=json_plain)


def flush_relay() -> None:
    _relay.flush()


atexit.register(flush_relay)


def flush_relay_if_due() -> None:
    """Called by the child pump at least every poll interval while a child runs."""
    _relay.flush_if_due()


#: Longest level name structlog's console renderer pads to ("exception").
_LEVEL_WIDTH = 9
#: Methods and the level each logs at; debug is below the INFO threshold.
_LEVELS = {"info": "info", "warning": "warning", "warn": "warning", "error": "error", "exception": "error"}
_LEVELS |= {"critical": "critical", "fatal": "critical", "msg": "info"}


class _Output:
    """Where structured events go and how they look (set by ``configure``)."""

    def __init__(self, fmt: LogFormat, stream: TextIO | None) -> None:
        self.fmt = fmt
        #: None: whatever sys.stderr is at write time.
        self.stream = stream
        self.lock = threading.Lock()


_output = _Output(LogFormat.CONSOLE, None)


def _console_value(value: Any) -> str:
    """structlog's ConsoleRenderer: plain strings bare, others (and strings with
    spaces, quotes or '=') as repr."""
    if isinstance(value, str) and not (set(value) & {" ", "\t", "=", "\r", "\n", '"', "'"}):
        return value
    return repr(value)


def render_event(level: str, event: Any, context: Mapping[str, Any], fmt: LogFormat | None = None) -> str:
    """One event as structlog renders it in this runner's configuration (the same
    processors: level, ISO UTC timestamp, every value redacted; then the console
    renderer without colours or the JSON renderer), relayed lines flushed first."""
    _relay.flush()
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    values = {**context, "event": event, "level": level, "timestamp": stamp}
    values = {key: _redact_value(value) for key, value in values.items()}
    if (fmt or _output.fmt) is LogFormat.JSON:
        return json.dumps(values, default=repr)
    head = [str(values.pop("timestamp")), f"[{values.pop('level'):<{_LEVEL_WIDTH}}]", str(values.pop("event"))]
    rest = [f"{key}={_console_value(values[key])}" for key in sorted(values)]
    return " ".join(part for part in head + rest if part).rstrip(" ")


def _write(line: str) -> None:
    stream = _output.stream if _output.stream is not None else sys.stderr
    with _output.lock:
        stream.write(line + "\n")
        stream.flush()


class BoundLogger:
    """structlog's bound-logger API, filtering at INFO, without importing
    structlog: its import (asyncio with it) cost a quick plan 0.1-0.2 s of CPU."""

    __slots__ = ("_context",)

    def __init__(self, context: Mapping[str, Any]) -> None:
        self._context = dict(context)

    def bind(self, **values: Any) -> BoundLogger:
        return BoundLogger({**self._context, **values})

    def debug(self, event: Any = None, **values: Any) -> None:
        return

    def __getattr__(self, method: str) -> Any:
        level = _LEVELS.get(method)
        if level is None:
            raise AttributeError(method)

        def log(event: Any = None, **values: Any) -> None:
            _write(render_event(level, event, {**self._context, **values}))

        return log


class _ConfigureOnImport:
    """A meta path finder that configures a module the moment something imports
    it: the standard library's logging (oras and urllib3 log with it). A run
    that needs none of them, like a ``plan``, never pays for importing it."""

    def __init__(self, name: str, configure: Callable[[Any], None]) -> None:
        self.name = name
        self.configure = configure

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            self.configure(module)

        loader.exec_module = exec_module
        return spec


def _configure_on_import(name: str, configure: Callable[[Any], None]) -> None:
    """``configure(module)`` now if ``name`` is imported, else the moment it is."""
    if name in sys.modules:
        configure(sys.modules[name])
    elif not any(isinstance(finder, _ConfigureOnImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _ConfigureOnImport(name, configure))


def _configure_logging(logging: Any) -> None:
    """Records of the standard library's loggers (oras, urllib3) rendered as events."""

    class Handler(logging.Handler):  # type: ignore[misc]
        def emit(self, record: Any) -> None:
            _log_record(record)

    root = logging.getLogger()
    root.handlers[:] = [Handler()]
    root.setLevel(logging.WARNING)


def _log_record(record: Any) -> None:
    """A stdlib logging record (oras, urllib3), rendered like an event."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError):
        message = str(record.msg)
    if record.exc_info:
        import traceback

        message += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    _write(render_event(record.levelname.lower(), message, {}))


def configure(fmt: LogFormat = LogFormat.CONSOLE, stream: TextIO | None = None) -> None:
    """Configure events and relayed output and, once anything imports it, the
    standard library's logging (oras, urllib3)."""
    global _relay, _output  # noqa: PLW0603 - one pod log per process
    _relay.flush()
    _relay = _Relay(fmt, stream)
    _output = _Output(fmt, stream)
    _configure_on_import("logging", _configure_logging)


def get_logger(**initial: Any) -> BoundLogger:
    return BoundLogger(initial)


def write_traceback(work: Path) -> str:
    """The exception being handled, redacted, to ``work/logs/traceback.txt``;
    returns where it went (or that it went nowhere), for the one line an
    internal error gets. Never raises: it runs inside an error handler."""
    import traceback  # only for a bug: not on every run's path

    details = work / "logs" / "traceback.txt"
    try:
        details.parent.mkdir(parents=True, exist_ok=True)
        details.write_text(redact(traceback.format_exc()), errors="backslashreplace")
    except OSError:
        return "no traceback written (the work directory is not writable)"
    return f"traceback in {details}"
