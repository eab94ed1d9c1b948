"""The gateway API of agentops, from an agent that runs elsewhere (standard library only).

    client = AgentopsClient(base_url, token)
    session = client.session("my-run")
    decision = session.request_approval("tool", {"arg": 1}, hints=..., summary=...)

`request_approval` blocks until a person decides (long-polling, up to `timeout` seconds) and
returns a Decision: `approved`, and `args`, the arguments to run: exactly those approved,
which may be an approver's edit of what you proposed. Never run the proposal when it was
edited. A call the agent's gate policy allows comes back approved at once.

Every call that changes something carries an Idempotency-Key (a fresh one per call) and is
tried again with the same key when its answer was lost: it is done once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The server holds a long poll for at most this long; the client asks again.
MAX_WAIT_SECONDS = 30
# A long poll that failed on the way (agentops restarting, a proxy cutting a connection, a
# moment of overload) is asked again: it is a read. The pause between tries doubles from
# RETRY_FIRST_SECONDS to RETRY_MAX_SECONDS (with jitter, so thousands of waiting agents do not
# come back at once); only the caller's own timeout ends the wait.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0
RETRIED_STATUSES = frozenset({0, 502, 503, 504})  # unreachable, or a proxy before agentops
# A call that changes something (POST, PUT, PATCH, DELETE) carries an Idempotency-Key, a fresh
# one per call unless the caller gives one. The same key makes a retry safe: if the first try
# was done and only its answer was lost, agentops answers the retry with the first answer
# and does nothing twice. Such a call is tried again, with its key, on the statuses above and
# on 409 with Retry-After (the first try with the key is still in progress), at most
# STATE_CHANGE_ATTEMPTS times in all.
STATE_CHANGE_ATTEMPTS = 4
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The events of a session's stream that end a reader's wait for them.
Event = tuple[str | None, str, Any]


class AgentopsError(Exception):
    """The server refused a request (`status`, its `detail`) or could not be reached."""

    def __init__(self, status: int, detail: str, body: Any = None):
        super().__init__(f"{status}: {detail}")
        self.status, self.detail, self.body = status, detail, body
        # Whether a call that changes something is tried again (with its key), and after
        # how long at least (the server's Retry-After).
        self.retriable = False
        self.retry_after = 0.0


class ApprovalTimeout(AgentopsError):
    """Nobody decided within the client's timeout; the approval still waits in agentops
    (ask again with Session.wait_for(call_id))."""


def request_headers(token: str, method: str, idempotency_key: str | None = None) -> dict:
    """A call's headers; one that changes something carries an Idempotency-Key."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    if method.upper() in UNSAFE_METHODS:
        headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
    return headers


def call_body(
    tool: str, args: dict, hints: dict | None, summary: str, callback_url: str, call_id: str
) -> dict:
    """The body of a call's submission."""
    body: dict[str, Any] = {
        "tool": tool,
        "args": args,
        "summary": summary,
        "callback_url": callback_url,
    }
    if hints is not None:
        body["hints"] = hints
    if call_id:
        body["call_id"] = call_id
    return body


def result_body(result: Any, error: str | None, duration_ms: int) -> dict:
    """The body of what an approved call did: its error, or else its result."""
    if error is not None:
        return {"duration_ms": duration_ms, "error": error}
    return {"duration_ms": duration_ms, "result": result}


def refusal(status: int, raw: bytes, retry_after: str | None) -> AgentopsError:
    """The error for an answer of `status` with body `raw`, and whether to try again."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode(errors="replace")
    detail = parsed.get("detail") if isinstance(parsed, dict) else parsed
    error = AgentopsError(status, str(detail), parsed)
    # 409 with Retry-After: the first try with this key still runs; its answer comes.
    in_progress = status == 409 and bool(retry_after)
    error.retriable = status in RETRIED_STATUSES or in_progress
    with contextlib.suppress(ValueError):
        error.retry_after = min(RETRY_MAX_SECONDS, float(retry_after or 0))
    return error


def unreachable(exc: BaseException) -> AgentopsError:
    error = AgentopsError(0, f"agentops unreachable: {exc}")
    error.retriable = True
    return error


def pause(failures: int) -> float:
    """Seconds before the next try after `failures` failed ones: doubling, with jitter."""
    longest = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (failures - 1))
    return longest * random.uniform(0.5, 1.0)


class EventStream:
    """Server-Sent Events, line by line: `feed` returns an (id, event, data) when a line
    ends one, and (None, "keepalive", None) for the server's comments, which let a reader
    check its deadline."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def feed(self, line: str) -> Event | None:
        line = line.rstrip("\r\n")
        if line.startswith(":"):
            return None, "keepalive", None
        if line:
            name, _, value = line.partition(":")
            self.fields[name] = value[1:] if value.startswith(" ") else value
            return None
        fields, self.fields = self.fields, {}
        if "event" not in fields and "data" not in fields:
            return None
        data = json.loads(fields.get("data") or "null")
        return fields.get("id", ""), fields.get("event", "message"), data


@dataclass(frozen=True)
class Decision:
    """A call's decision. `args` are what to run when `approved` (maybe edited)."""

    call_id: str
    tool: str
    status: str  # allowed, approved, rejected, expired, cancelled
    approved: bool
    args: dict = field(default_factory=dict)
    reason: str = ""
    decided_by: str | None = None
    edited: bool = False
    approval_id: str | None = None

    @classmethod
    def from_json(cls, body: dict) -> Decision:
        return cls(
            call_id=body["call"],
            tool=body["tool"],
            status=body["status"],
            approved=bool(body["approved"]),
            args=body.get("args") or {},
            reason=body.get("reason") or "",
            decided_by=body.get("decided_by"),
            edited=bool(body.get("edited")),
            approval_id=body.get("approval"),
        )

    def as_dict(self) -> dict:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status,
            "approved": self.approved,
            "args": self.args,
            "reason": self.reason,
            "decided_by": self.decided_by,
            "edited": self.edited,
        }


class AgentopsClient:
    """One external agent's connection to agentops (its token from
    `manage.py issue_agent_token <slug>`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        request_timeout: float = 10.0,
        attempts: int = STATE_CHANGE_ATTEMPTS,
    ):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.request_timeout = request_timeout
        self.attempts = max(1, attempts)
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        host = parts.hostname or ""
        # A proxy from the environment cannot reach an agentops on this machine.
        local = host in ("localhost", "127.0.0.1", "::1")
        handlers = [urllib.request.ProxyHandler({})] if local else []
        self._opener = urllib.request.build_opener(*handlers)

    def session(self, name: str = "", *, metadata: dict | None = None) -> Session:
        """Register a session: it appears in agentops' runs list (trigger "external")."""
        body = self.request(
            "POST", "/api/external/sessions", {"session": name, "metadata": metadata or {}}
        )
        return Session(self, body["session"], body.get("run_url", ""))

    def register_mcp_tools(self, tools: list[dict]) -> list[dict]:
        """Register MCP tool definitions (as tools/list returns them) as this agent's tools:
        their schemas, and risk from their annotations. Each registered tool as stored."""
        return self.request("POST", "/api/external/tools/mcp", {"tools": tools})["tools"]

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """One API call; the answer's JSON. A call that changes something carries
        `idempotency_key` (a fresh one when None) and is tried again with it when no answer
        came back (see STATE_CHANGE_ATTEMPTS); a read is tried once."""
        data = None if body is None else json.dumps(body).encode()
        headers = request_headers(self.token, method, idempotency_key)
        attempts = self.attempts if "Idempotency-Key" in headers else 1
        for attempt in range(1, attempts + 1):
            # The scheme is http(s), checked in __init__.
            request = urllib.request.Request(  # noqa: S310
                self.base_url + path, data=data, method=method, headers=headers
            )
            try:
                return self._send(request, timeout or self.request_timeout)
            except AgentopsError as exc:
                if attempt == attempts or not exc.retriable:
                    raise
                time.sleep(max(exc.retry_after, pause(attempt)))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _send(self, request: urllib.request.Request, timeout: float) -> Any:
        try:
            with self._opener.open(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            retry_after = exc.headers.get("Retry-After") if exc.headers else None
            raise refusal(exc.code, exc.read(), retry_after) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise unreachable(exc) from None

    def stream(
        self, path: str, *, last_event_id: str = "0", idle_timeout: float = 60.0
    ) -> Iterator[Event]:
        """Server-Sent Events from `path`: (id, event, data) for each event; ends when the
        server ends the stream. The server sends a comment every 15 s, so `idle_timeout`
        without a byte means the connection is dead (AgentopsError 0)."""
        request = urllib.request.Request(  # noqa: S310 (http(s), checked in __init__)
            self.base_url + path,
            method="GET",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "text/event-stream",
                "Last-Event-ID": last_event_id,
            },
        )
        try:
            response = self._opener.open(request, timeout=idle_timeout)
        except urllib.error.HTTPError as exc:
            raise AgentopsError(exc.code, exc.read().decode(errors="replace")) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise AgentopsError(0, f"agentops unreachable: {exc}") from None
        events = EventStream()
        try:
            with response:
                for raw in response:
                    if (event := events.feed(raw.decode())) is not None:
                        yield event
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise AgentopsError(0, f"event stream lost: {exc}") from None


class Session:
    """One session of the agent: its calls, their results, its end."""

    def __init__(self, client: AgentopsClient, session_id: str, run_url: str = ""):
        self.client, self.id, self.run_url = client, session_id, run_url

    def submit(
        self,
        tool: str,
        args: dict,
        *,
        hints: dict | None = None,
        summary: str = "",
        callback_url: str = "",
        call_id: str = "",
    ) -> dict:
        """Submit a call without waiting: the server's answer (status "pending" when a person
        must decide; then `wait_for(answer["call"])`). `call_id`, your own id for the call
        (an interrupt id, a tool_use_id), makes it idempotent: submitted again, from any
        session of this agent (after a restart), it answers the same call and approval."""
        body = call_body(tool, args, hints, summary, callback_url, call_id)
        return self.client.request("POST", f"/api/external/sessions/{self.id}/calls", body)

    def withdraw(self, call_id: str, *, reason: str = "") -> Decision:
        """Give a call up (your framework abandoned it: a timeout, a cancellation): it must
        not run, and a pending approval is withdrawn so nobody decides it for nothing."""
        body = {"reason": reason}
        return Decision.from_json(
            self.client.request("POST", f"/api/external/calls/{call_id}/withdraw", body)
        )

    def request_approval(
        self,
        tool: str,
        args: dict,
        *,
        hints: dict | None = None,
        summary: str = "",
        timeout: float = 3600,
        call_id: str = "",
    ) -> Decision:
        """Submit the call and block until it is decided (or `timeout` seconds pass:
        ApprovalTimeout). Hints: {"reversible": bool, "blast": "none|low|medium|high|critical"}."""
        answer = self.submit(tool, args, hints=hints, summary=summary, call_id=call_id)
        if answer["status"] != "pending":
            return Decision.from_json(answer)
        return self.wait_for(answer["call"], timeout=timeout)

    def wait_for(
        self, call_id: str, *, timeout: float = 3600, poll: float = MAX_WAIT_SECONDS
    ) -> Decision:
        """Block until the call is decided (ApprovalTimeout after `timeout` seconds). Each
        long-poll lasts at most `poll` seconds: a thread running this can be told to stop
        (see `wait_all`, and the adapters' cancellation) no later than that. A long-poll that
        fails on the way (agentops unreachable, a 502/503/504) is tried again until then."""
        deadline = time.monotonic() + timeout
        failures = 0
        while True:
            left = deadline - time.monotonic()
            wait = max(0.0, min(poll, MAX_WAIT_SECONDS, left))
            try:
                answer = self.client.request(
                    "GET",
                    f"/api/external/calls/{call_id}?wait={wait:.1f}",
                    timeout=wait + self.client.request_timeout,
                )
            except AgentopsError as exc:
                if exc.status not in RETRIED_STATUSES or time.monotonic() >= deadline:
                    raise
                failures += 1
                time.sleep(min(pause(failures), poll, left))
                continue
            failures = 0
            if answer["status"] != "pending":
                return Decision.from_json(answer)
            if time.monotonic() >= deadline:
                raise ApprovalTimeout(408, f"no decision on call {call_id} within {timeout:.0f}s")

    def wait_all(self, call_ids: list[str], *, timeout: float = 3600) -> dict[str, Decision]:
        """Block until every one of these calls is decided; their decisions by call id. The
        calls wait together (submit them all first): people decide them in any order. One
        connection for all of them: the session's event stream (Server-Sent Events),
        resumed after a dropped connection."""
        deadline = time.monotonic() + timeout
        decided: dict[str, Decision] = {}
        while True:
            elsewhere = False
            for call_id in set(call_ids) - set(decided):
                answer = self.client.request("GET", f"/api/external/calls/{call_id}")
                if answer["status"] != "pending":
                    decided[call_id] = Decision.from_json(answer)
                elsewhere = elsewhere or answer["session"] != self.id
            left = set(call_ids) - set(decided)
            if not left:
                return {c: decided[c] for c in call_ids}
            if time.monotonic() >= deadline:
                raise ApprovalTimeout(408, f"{len(left)} call(s) undecided after {timeout:.0f}s")
            if elsewhere:
                # Calls an earlier session opened (a restarted agent): this session's stream
                # does not carry them; a long-poll each, side by side.
                remaining = max(0.0, deadline - time.monotonic())
                with concurrent.futures.ThreadPoolExecutor(len(left)) as pool:
                    waits = {c: pool.submit(self.wait_for, c, timeout=remaining) for c in left}
                    return {**decided, **{c: w.result() for c, w in waits.items()}}
            # Every decision of the session since it began, then the live ones; a decision
            # made before the stream opened is in it too.
            for decision in self.decisions(deadline=deadline, until=left):
                if decision.call_id in left:
                    decided[decision.call_id] = decision

    def decisions(
        self, *, deadline: float | None = None, until: set | None = None
    ) -> Iterator[Decision]:
        """The session's decisions as they are made (a generator of Decision), from the
        session's event stream; reconnects with the last event id it saw. Ends when the
        session ends, at `deadline` (time.monotonic()), or once every call in `until` was
        seen."""
        last = "0"
        waiting = set(until or ())
        while deadline is None or time.monotonic() < deadline:
            try:
                for event_id, event, data in self.client.stream(
                    f"/api/external/sessions/{self.id}/events", last_event_id=last
                ):
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                    if event == "closed":
                        return
                    if event != "decision":
                        continue
                    last = event_id or last
                    decision = Decision.from_json(data)
                    waiting.discard(decision.call_id)
                    yield decision
                    if until is not None and not waiting:
                        return
            except AgentopsError as exc:
                if exc.status not in (0, 502, 503, 504):
                    raise
                time.sleep(1.0)  # the server went away: reconnect, resuming after `last`

    def report(
        self,
        decision: Decision,
        *,
        result: Any = None,
        error: str | None = None,
        duration_ms: int = 0,
    ) -> None:
        """Record what the approved call did (its result or error) on the session's timeline."""
        body = result_body(result, error, duration_ms)
        self.client.request("POST", f"/api/external/calls/{decision.call_id}/result", body)

    def close(self, status: str = "succeeded", *, output: str = "", detail: str = "") -> str:
        """End the session: "succeeded" or "failed". Returns the run's status."""
        body = {"status": status, "output": output, "detail": detail}
        return self.client.request("POST", f"/api/external/sessions/{self.id}/close", body)[
            "status"
        ]
