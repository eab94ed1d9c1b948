"""Structured logs: every line about a run says which run, which step, which task and who.

The context lives in contextvars set where it is known (engine, Celery signal, web middleware,
access log); ContextFilter copies it onto every record, JsonFormatter writes one JSON object
per line with a record's `extra=` fields as keys, TextFormatter a readable line.
Why and how: docs/design/modules.md.
"""

import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from celery.signals import task_postrun, task_prerun
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty

from . import tracing

FIELDS = ("run_id", "seq", "task_id", "user", "request_id", "trace_id")
_BOUND = FIELDS[:-1]  # the trace id is read from the current span
_context: dict[str, ContextVar[Any]] = {
    name: ContextVar(f"agentops_log_{name}", default=None) for name in _BOUND
}
_request: ContextVar[HttpRequest | None] = ContextVar("agentops_log_request", default=None)
# What the access log line of the request being served will say besides its own facts (the
# user, the trace id), filled in by Django's middleware (request_context): a dict shared by
# reference, since a sync middleware's thread runs in a copy of the request's context.
_access: ContextVar[dict[str, Any] | None] = ContextVar("agentops_log_access", default=None)
# Attributes every LogRecord has: the rest came with `extra=` (or a filter) and is written out.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Extra attributes Django's loggers add that repeat the line (a request or socket object).
_NOT_WRITTEN = frozenset({"request", "server_time"})


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Log lines inside the block carry these fields (FIELDS)."""
    tokens = [(_context[name], _context[name].set(value)) for name, value in fields.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def about_run(func: Callable[..., Any]) -> Callable[..., Any]:
    """For a function whose first argument is a run id: its log lines carry the run (and the
    seq it sets with set_seq, forgotten when it returns)."""

    @functools.wraps(func)
    def wrapper(run_id: Any, *args: Any, **kwargs: Any) -> Any:
        with bound(run_id=str(run_id), seq=None):
            return func(run_id, *args, **kwargs)

    return wrapper


def set_seq(seq: int | None) -> None:
    """The step being made (inside `about_run`, which forgets it on return)."""
    _context["seq"].set(seq)


def current() -> dict[str, Any]:
    """The context as the next log line would carry it."""
    found = {name: var.get() for name, var in _context.items()}
    if found["user"] is None:
        found["user"] = _username(_request.get())
    found["trace_id"] = tracing.current_trace_id() or None
    return found


@contextmanager
def noting_access(note: dict[str, Any]) -> Iterator[None]:
    """Inside: request_context fills `note` with the user and trace id it knows."""
    token = _access.set(note)
    try:
        yield
    finally:
        _access.reset(token)


def _username(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        # Not looked up by the view yet: a log call must not query the database for it.
        user = object.__getattribute__(user, "_wrapped")
        if user is empty:
            return None
    if user is None or not user.is_authenticated:
        return None
    return str(user.get_username())


class ContextFilter(logging.Filter):
    """Adds run_id, seq, task_id and user to every record (None where unknown); a field
    given with `extra=` wins."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current().items():
            record.__dict__.setdefault(name, value)
        return True


# Paths that carry a secret: a one-tap decision link's token is a credential for one decision.
_SECRET_PATHS = re.compile(r"(/approvals/link/)[^/\s\"']+")
# Refusals a client asked for: worth one line, never a traceback.
_REFUSALS = frozenset({400, 401, 403, 404, 405, 409, 410, 413, 422, 429})


def redact_secrets(text: str) -> str:
    """`text` with every one-tap link's token replaced by `[redacted]`."""
    return _SECRET_PATHS.sub(r"\1[redacted]", text)


class RedactSecrets(logging.Filter):
    """Every log line: a one-tap link's token is replaced by `[redacted]` (the 403 or 410 a
    spent, expired or foreign link gets is logged with its path), and a refused request is
    one short line (django.request logs a PermissionDenied with its traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_secrets(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.name.startswith("django.") and getattr(record, "status_code", 0) in _REFUSALS:
            record.exc_info = record.exc_text = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields that are
    known, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        for name, value in record.__dict__.items():
            # `extra=` fields, at the top so a shipper can filter on them (security_event).
            if name not in _STANDARD and name not in FIELDS and name not in _NOT_WRITTEN:
                if name in line:
                    continue  # time, level, logger, message are the formatter's
                line[name] = value
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The usual line, then the known context fields: `... [run_id=… seq=4]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        known = [
            f"{name}={getattr(record, name)}"
            for name in FIELDS
            if getattr(record, name, None) is not None
        ]
        return f"{line} [{' '.join(known)}]" if known else line


def request_context(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: log lines during a request name its user (once the view knows it); the
    access log line (agentops/access_log.py) learns the user and the request's trace id."""

    def middleware(request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return get_response(request)
        finally:
            note = _access.get()
            if note is not None:
                note["user"] = _username(request)
                note["trace_id"] = tracing.current_trace_id()
            _request.reset(token)

    return middleware


# What each thread put aside when its task started: a task run eagerly inside another puts the
# outer one's id back when it ends. Per thread, and restored with a plain set(): a Token kept by
# task id and reset at the end failed (`ValueError: <Token ...> was created in a different
# Context`) when two threads ran the same task id at once (a redelivered task), the second's
# token reset in the first's context, and the finished id stayed on the thread's later lines.
_started = threading.local()


def _task_started(task_id: str | None = None, **kwargs: Any) -> None:
    if task_id:
        outer = _started.__dict__.setdefault("outer", [])
        outer.append(_context["task_id"].get())
        _context["task_id"].set(task_id)


def _task_ended(task_id: str | None = None, **kwargs: Any) -> None:
    if task_id:
        outer = _started.__dict__.get("outer")
        _context["task_id"].set(outer.pop() if outer else None)


def connect_celery_signals() -> None:
    """Log lines inside a Celery task carry its id (agentops/apps.py, at start-up)."""
    task_prerun.connect(_task_started, dispatch_uid="agentkit.logs.task_started", weak=False)
    task_postrun.connect(_task_ended, dispatch_uid="agentkit.logs.task_ended", weak=False)
