"""The gateway API of agentops for asyncio code: the surface of AgentopsClient and Session,
every method a coroutine (`pip install 'agentops-gate[async]'`, which adds httpx).

    async with AsyncAgentopsClient(base_url, token) as client:
        session = await client.session("my-run")
        decision = await session.request_approval("tool", {"arg": 1})

A wait for a person is an awaited long-poll: cancelling it (a framework's timeout, a
cancelled task) ends it at once, and `request_approval` then withdraws the call so that
nobody decides it for nothing. The retry rules are the synchronous client's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from .client import (
    MAX_WAIT_SECONDS,
    RETRIED_STATUSES,
    STATE_CHANGE_ATTEMPTS,
    AgentopsError,
    ApprovalTimeout,
    Decision,
    Event,
    EventStream,
    call_body,
    pause,
    refusal,
    request_headers,
    result_body,
    unreachable,
)


class AsyncAgentopsClient:
    """One external agent's connection to agentops, for asyncio (see AgentopsClient).
    Close it (`await client.aclose()`, or use it as an async context manager)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        request_timeout: float = 10.0,
        attempts: int = STATE_CHANGE_ATTEMPTS,
    ):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.token = token
        self.request_timeout = request_timeout
        self.attempts = max(1, attempts)
        host = httpx.URL(self.base_url).host
        # A proxy from the environment cannot reach an agentops on this machine.
        local = host in ("localhost", "127.0.0.1", "::1")
        self._http = httpx.AsyncClient(base_url=self.base_url, trust_env=not local)

    async def __aenter__(self) -> AsyncAgentopsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def session(self, name: str = "", *, metadata: dict | None = None) -> AsyncSession:
        """Register a session: it appears in agentops' runs list (trigger "external")."""
        body = await self.request(
            "POST", "/api/external/sessions", {"session": name, "metadata": metadata or {}}
        )
        return AsyncSession(self, body["session"], body.get("run_url", ""))

    async def register_mcp_tools(self, tools: list[dict]) -> list[dict]:
        """Register MCP tool definitions as this agent's tools (see AgentopsClient)."""
        answer = await self.request("POST", "/api/external/tools/mcp", {"tools": tools})
        return answer["tools"]

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """One API call; the answer's JSON. Tried again as AgentopsClient.request is."""
        headers = request_headers(self.token, method, idempotency_key)
        attempts = self.attempts if "Idempotency-Key" in headers else 1
        for attempt in range(1, attempts + 1):
            try:
                return await self._send(method, path, body, headers, timeout)
            except AgentopsError as exc:
                if attempt == attempts or not exc.retriable:
                    raise
                await asyncio.sleep(max(exc.retry_after, pause(attempt)))
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _send(
        self, method: str, path: str, body: Any, headers: dict, timeout: float | None
    ) -> Any:
        try:
            response = await self._http.request(
                method, path, json=body, headers=headers, timeout=timeout or self.request_timeout
            )
        except httpx.TransportError as exc:
            raise unreachable(exc) from None
        if response.is_error:
            retry_after = response.headers.get("Retry-After")
            raise refusal(response.status_code, response.content, retry_after)
        return response.json() if response.content else None

    async def stream(
        self, path: str, *, last_event_id: str = "0", idle_timeout: float = 60.0
    ) -> AsyncIterator[Event]:
        """Server-Sent Events from `path`, as AgentopsClient.stream."""
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "text/event-stream",
            "Last-Event-ID": last_event_id,
        }
        events = EventStream()
        try:
            async with self._http.stream(
                "GET", path, headers=headers, timeout=idle_timeout
            ) as response:
                if response.is_error:
                    raise AgentopsError(response.status_code, (await response.aread()).decode())
                async for line in response.aiter_lines():
                    if (event := events.feed(line)) is not None:
                        yield event
        except httpx.TransportError as exc:
            raise AgentopsError(0, f"event stream lost: {exc}") from None


class AsyncSession:
    """One session of the agent, for asyncio (see Session)."""

    def __init__(self, client: AsyncAgentopsClient, session_id: str, run_url: str = ""):
        self.client, self.id, self.run_url = client, session_id, run_url

    async def submit(
        self,
        tool: str,
        args: dict,
        *,
        hints: dict | None = None,
        summary: str = "",
        callback_url: str = "",
        call_id: str = "",
    ) -> dict:
        """Submit a call without waiting (see Session.submit)."""
        body = call_body(tool, args, hints, summary, callback_url, call_id)
        return await self.client.request("POST", f"/api/external/sessions/{self.id}/calls", body)

    async def withdraw(self, call_id: str, *, reason: str = "") -> Decision:
        """Give a call up: it must not run, and a pending approval is withdrawn."""
        answer = await self.client.request(
            "POST", f"/api/external/calls/{call_id}/withdraw", {"reason": reason}
        )
        return Decision.from_json(answer)

    async def request_approval(
        self,
        tool: str,
        args: dict,
        *,
        hints: dict | None = None,
        summary: str = "",
        timeout: float = 3600,
        call_id: str = "",
    ) -> Decision:
        """Submit the call and await its decision (ApprovalTimeout after `timeout` seconds).
        Cancelled while it waits, the call is withdrawn before the cancellation goes on."""
        answer = await self.submit(tool, args, hints=hints, summary=summary, call_id=call_id)
        if answer["status"] != "pending":
            return Decision.from_json(answer)
        try:
            return await self.wait_for(answer["call"], timeout=timeout)
        except asyncio.CancelledError:
            reason = "the agent's framework gave the call up (a timeout or a cancelled run)"
            await asyncio.shield(self.withdraw(answer["call"], reason=reason))
            raise

    async def wait_for(self, call_id: str, *, timeout: float = 3600) -> Decision:
        """Await the call's decision (see Session.wait_for); failed long-polls are asked
        again until the timeout."""
        deadline = time.monotonic() + timeout
        failures = 0
        while True:
            left = deadline - time.monotonic()
            wait = max(0.0, min(MAX_WAIT_SECONDS, left))
            try:
                answer = await self.client.request(
                    "GET",
                    f"/api/external/calls/{call_id}?wait={wait:.1f}",
                    timeout=wait + self.client.request_timeout,
                )
            except AgentopsError as exc:
                if exc.status not in RETRIED_STATUSES or time.monotonic() >= deadline:
                    raise
                failures += 1
                await asyncio.sleep(min(pause(failures), max(0.0, left)))
                continue
            failures = 0
            if answer["status"] != "pending":
                return Decision.from_json(answer)
            if time.monotonic() >= deadline:
                raise ApprovalTimeout(408, f"no decision on call {call_id} within {timeout:.0f}s")

    async def wait_all(self, call_ids: list[str], *, timeout: float = 3600) -> dict[str, Decision]:
        """Await every one of these calls' decisions, a long-poll each, side by side (people
        decide them in any order); by call id."""
        decisions = await asyncio.gather(*(self.wait_for(c, timeout=timeout) for c in call_ids))
        return dict(zip(call_ids, decisions, strict=True))

    async def decisions(self, *, until: set | None = None) -> AsyncIterator[Decision]:
        """The session's decisions as they are made, from its event stream; reconnects with
        the last event id it saw. Ends when the session ends, or once every call in `until`
        was seen."""
        last = "0"
        waiting = set(until or ())
        while True:
            try:
                async for event_id, event, data in self.client.stream(
                    f"/api/external/sessions/{self.id}/events", last_event_id=last
                ):
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
                if exc.status not in RETRIED_STATUSES:
                    raise
                await asyncio.sleep(1.0)  # the server went away: reconnect after `last`

    async def report(
        self,
        decision: Decision,
        *,
        result: Any = None,
        error: str | None = None,
        duration_ms: int = 0,
    ) -> None:
        """Record what the approved call did on the session's timeline."""
        body = result_body(result, error, duration_ms)
        await self.client.request("POST", f"/api/external/calls/{decision.call_id}/result", body)

    async def close(self, status: str = "succeeded", *, output: str = "", detail: str = "") -> str:
        """End the session: "succeeded" or "failed". Returns the run's status."""
        body = {"status": status, "output": output, "detail": detail}
        answer = await self.client.request("POST", f"/api/external/sessions/{self.id}/close", body)
        return answer["status"]
