"""The access log as log records (LOG_FORMAT=json): one line per HTTP request and per
WebSocket connection, with its request id, user and trace id, written by the settings'
LOGGING like every other line (logger `agentops.access`).

daphne writes its own access lines as plain text to stdout (its command line's
AccessLogGenerator); with JSON asked for, `replace_daphnes` stops those so each line of the
output is JSON. The request id is the caller's `X-Request-ID` when it is a sane one (a load
balancer's), else a new one; every log line written while the request is served carries it,
and the response says it back in `X-Request-ID`.
"""

import logging
import re
import sys
import time
import uuid
from typing import Any

from agentkit import logs

log = logging.getLogger("agentops.access")

HEADER = b"x-request-id"
# What a proxy's id looks like (a UUID, a hex or base64 token): anything else is not
# repeated into every log line.
_SANE = re.compile(rb"[A-Za-z0-9._:+/=-]{1,128}")


class AccessLog:
    """ASGI middleware around the whole application (HTTP and WebSocket)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        note: dict[str, Any] = {}
        facts: dict[str, Any] = {"status": None, "bytes": 0}
        started = time.monotonic()

        async def sending(message: dict) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                facts["status"] = message["status"]
                headers = [h for h in message.get("headers", []) if h[0].lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, request_id.encode())]}
            elif kind == "http.response.body":
                facts["bytes"] += len(message.get("body", b""))
            elif kind == "websocket.accept":
                facts["status"] = 101
            elif kind == "websocket.close" and facts["status"] is None:
                facts["status"] = 403  # closed before accepting: refused
            await send(message)

        with logs.bound(request_id=request_id), logs.noting_access(note):
            try:
                await self.app(scope, receive, sending)
            finally:
                _write(scope, facts, note, time.monotonic() - started)


def _request_id(scope: dict) -> str:
    for name, value in scope.get("headers", []):
        if name.lower() == HEADER and _SANE.fullmatch(value):
            return value.decode()
    return uuid.uuid4().hex


def _write(scope: dict, facts: dict, note: dict, seconds: float) -> None:
    method = scope.get("method", "WEBSOCKET")
    path = logs.redact_secrets(scope.get("path", ""))  # a one-tap link's token is a secret
    client = scope.get("client")
    fields = {
        "method": method,
        "path": path,
        "status": facts["status"],
        "bytes": facts["bytes"],
        "duration_ms": round(seconds * 1000, 1),
        "client": f"{client[0]}:{client[1]}" if client else None,
    }
    # What Django knew (the user, once its middleware ran; the trace id of its server span).
    for name in ("user", "trace_id"):
        if note.get(name):
            fields[name] = note[name]
    log.info("%s %s %s", method, path, facts["status"] or "-", extra=fields)


def replace_daphnes() -> None:
    """daphne's command line writes its access lines to stdout unless told otherwise: they
    are this module's log records instead. A file given with `--access-log` keeps its lines.
    daphne builds its access logger after it has imported the application, which calls this
    (agentops/asgi.py); `manage.py up` makes no access logger of its own with JSON."""
    from daphne import cli
    from daphne.access import AccessLogGenerator

    class ToStdoutAsRecords(AccessLogGenerator):
        def write_entry(self, *args: Any, **kwargs: Any) -> None:
            if self.stream is not sys.stdout:
                super().write_entry(*args, **kwargs)

    cli.AccessLogGenerator = ToStdoutAsRecords
