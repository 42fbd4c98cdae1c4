"""Logging: structured events on structlog, human-readable by default, JSON with one setting.

Every string that reaches a log line passes through ``redact``: credentials read by
the runner (pack and publish registry auth, the identity token) are registered
with ``register_secret`` when they are read, and replaced by ``***`` wherever they
would appear, including in relayed child output.

Events go through structlog, configured by ``configure``: the level, an ISO UTC
timestamp, any traceback as text, every value redacted, then the console
renderer without colours or the JSON renderer. Records of the standard
library's loggers (oras, urllib3) get the same processors. Each module holds
its logger (``log = logs.get_logger()`` at module level); structlog is imported
and configured when one is first used, so ``version`` and ``--help`` never pay
for it, and structlog caches each assembled logger from then on
(``cache_logger_on_first_use``). What a whole stretch of work shares is bound
once in context variables (the step runner binds ``step`` around each step,
``structlog.contextvars.bound_contextvars``) and merged into every event.

Relayed child output (deploy.sh can print gigabytes) stays off structlog's
per-event path: ``relay`` writes already-redacted blocks of lines straight to
the pod log, in the shape the renderer gives ``info(line, source=...)`` with
``step`` bound (same timestamp, level, ``step`` and ``source``), buffered and
flushed at least every 100 ms (``flush_relay_if_due``), before every structured
event (so the order holds) and at exit. Lines that mean something (deploy
markers, errors) are logged as structured events by the caller.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from aicr_runner.settings.config import LogFormat

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

__all__ = [
    "SECRETS",
    "SecretRegistry",
    "configure",
    "flush_relay",
    "flush_relay_if_due",
    "format_relayed_line",
    "get_logger",
    "merge_context",
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
        self.register_many([value])

    def register_many(self, values: Iterable[str]) -> None:
        """``register`` each of ``values``, with one rebuild of the lookup (a
        kubeconfig of a thousand users registers a thousand tokens at once)."""
        candidates: list[str] = []
        for raw in values:
            value = raw.strip()
            candidates += [value, *(line.strip() for line in value.splitlines())] if "\n" in value else [value]
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


#: One writer at a time on the pod log: the child pump relays while other threads
#: (a status write's retries, oras) log events, and a line split by another
#: thread's write is a line no log shipper can parse. Reentrant: an event
#: flushes the relay buffer first, under the same lock.
_POD_LOG_LOCK = threading.RLock()


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
        when the caller knows (``blockscan`` found it in its pass over the block);
        False is checked again on ``text``, one C-level pass."""
        if not text:
            return
        if not text.endswith("\n"):
            text += "\n"
        # Every value is redacted, as the event processors redact them: a secret
        # that happens to read like the date, the level or the step name is masked here too.
        stamp = redact(datetime.now(UTC).isoformat().replace("+00:00", "Z"))
        step, source, level = redact(step), redact(source), redact("info")
        if self.fmt is LogFormat.JSON:
            head = f'{{"step": "{step}", "source": "{source}", "event": '
            tail = f', "level": "{level}", "timestamp": "{stamp}"}}\n'
            # The caller's False is about its whole block: this part of it (the
            # lines between two markers, mostly) may still need no escaping.
            if not json_plain:
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
        with _POD_LOG_LOCK:
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
        with _POD_LOG_LOCK:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._parts:
            return
        stream = self.stream if self.stream is not None else sys.stderr
        parts, self._parts = self._parts, []
        self._size = 0
        self._since = None
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a text-only stream (tests' StringIO)
            stream.write(b"".join(parts).decode())
            stream.flush()
            return
        stream.flush()  # whatever the text layer holds goes first
        # Part by part, not joined: a rendered block is the bulk of the bytes and
        # goes to the file descriptor as it is (the buffer copies only the short
        # heads), where a join would copy every byte once more.
        for part in parts:
            buffer.write(part)
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


class _PodLog:
    """structlog's output end: each rendered event on its own line, relayed lines
    flushed first (so the order holds), to the configured stream."""

    def __init__(self, stream: TextIO | None) -> None:
        #: None: whatever sys.stderr is at write time (tests swap it);
        #: ``configure`` changes it in place (cached loggers hold this object).
        self.stream = stream

    def msg(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        with _POD_LOG_LOCK:
            _relay.flush()
            stream.write(line + "\n")
            stream.flush()

    # structlog calls the method named like the level; all of them write alike.
    debug = info = warning = warn = error = exception = critical = fatal = msg


def _redact_event(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The processor that masks every registered secret in every value of an event
    (its timestamp, level and exception text included)."""
    return {key: _redact_value(value) for key, value in event_dict.items()}


def merge_context(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's ``merge_contextvars`` with the bound context first, where
    ``bind`` puts it: a step's JSON line leads with its ``step``, as a relayed
    line does. The first processor of events and of the standard library's
    records (tests capturing events pass it to ``capture_logs``)."""
    from structlog.contextvars import merge_contextvars  # imported by now: a lookup

    context = merge_contextvars(logger, method, {})
    return {**context, **event_dict} if context else event_dict


#: The one processor chain and the one output end. structlog caches each
#: assembled logger on first use, and a cached logger keeps references to both:
#: ``configure`` changes them in place, so every logger, cached or not, renders
#: with the latest configuration (``structlog.testing.capture_logs`` swaps the
#: chain in place the same way).
_PROCESSORS: list[Any] = []
_POD_LOG = _PodLog(None)


class _Events:
    """The structured-event path: structlog, configured by ``setup`` (called by
    ``configure``, or by the first logger used before any ``configure``).

    structlog is imported the first time a logger is configured or used,
    never by ``version`` or ``--help``."""

    def __init__(self, fmt: LogFormat) -> None:
        self.fmt = fmt
        self.ready = False

    def setup(self) -> None:
        import logging

        import structlog

        shared: list[Any] = [
            merge_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # The traceback as text before redaction: the renderers would format it after.
            structlog.processors.format_exc_info,
            _redact_event,
        ]
        renderer: Any = (
            structlog.processors.JSONRenderer()
            if self.fmt is LogFormat.JSON
            else structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
        )
        _PROCESSORS[:] = [*shared, renderer]
        structlog.configure(
            processors=_PROCESSORS,
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            logger_factory=_pod_log,
            cache_logger_on_first_use=True,
        )
        formatter = structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
        _route_stdlib_logging(logging, formatter, _POD_LOG)
        self.ready = True


def _pod_log(*_args: Any) -> _PodLog:
    return _POD_LOG


def _route_stdlib_logging(logging: Any, formatter: Any, out: _PodLog) -> None:
    """Records of the standard library's loggers (oras, urllib3), from WARNING up,
    rendered by the same processors as events."""

    class Handler(logging.Handler):  # type: ignore[misc]
        def emit(self, record: Any) -> None:
            try:
                line = self.format(record)
            except (TypeError, ValueError):  # a message whose arguments do not fit it
                record.msg, record.args = str(record.msg), ()
                line = self.format(record)
            out.msg(line)

    handler = Handler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


_events = _Events(LogFormat.CONSOLE)


def configure(fmt: LogFormat = LogFormat.CONSOLE, stream: TextIO | None = None) -> None:
    """Events (structlog), the standard library's loggers (oras, urllib3) and
    relayed output, in ``fmt`` on ``stream`` (None: stderr). Loggers already
    made, cached or not, follow (see ``_PROCESSORS``)."""
    global _relay  # noqa: PLW0603 - one pod log per process
    _relay.flush()
    _relay = _Relay(fmt, stream)
    _POD_LOG.stream = stream
    _events.fmt = fmt
    _events.setup()


class _ModuleLogger:
    """A module's logger, made when the module is imported without importing
    structlog: the first call configures structlog if nothing did yet, then
    structlog's logger (assembled once and cached by structlog) does the work."""

    __slots__ = ("_initial", "_logger")

    def __init__(self, initial: dict[str, Any]) -> None:
        self._initial = initial
        self._logger: Any = None

    def __getattr__(self, name: str) -> Any:
        logger = self._logger
        if logger is None:
            if not _events.ready:
                _events.setup()
            import structlog

            logger = self._logger = structlog.get_logger(**self._initial)
        return getattr(logger, name)


def get_logger(**initial: Any) -> FilteringBoundLogger:
    """A logger with ``initial`` bound, filtering at INFO; cheap enough to call at
    module level (``log = logs.get_logger()``): structlog waits for the first call."""
    return cast("FilteringBoundLogger", _ModuleLogger(initial))


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
