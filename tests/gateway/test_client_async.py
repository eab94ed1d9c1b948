"""The asyncio client (agentops_client.aio) against a live agentops: the synchronous client's
surface, awaited; a cancelled wait withdraws its call; the adapters take an AsyncSession; and
the package as users install it (a wheel named agentops-gate, typed)."""

import asyncio
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from agentops_client import AgentopsError, ApprovalTimeout
from agentops_client.aio import AsyncAgentopsClient
from agentops_client.claude import can_use_tool
from agentops_client.openai_agents import gated

from .live_agentops import external_agent
from .test_client import decide_when_pending, run_coroutine

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def token(up) -> str:
    return external_agent(up, "async-bot")


def in_a_loop(up, token, body):
    """`body(client)` awaited in an event loop of its own, with a client bound to it."""

    async def main():
        async with AsyncAgentopsClient(up.url, token) as client:
            return await body(client)

    return run_coroutine(main())


def test_an_allowed_call_is_reported_and_the_session_closed(up, token):
    async def body(client):
        session = await client.session("async-allowed")
        decision = await session.request_approval("read_file", {"path": "a.txt"}, timeout=5)
        await session.report(decision, result="hello")
        return decision, await session.close()

    decision, status = in_a_loop(up, token, body)
    assert (decision.status, decision.approved, decision.args) == (
        "allowed",
        True,
        {"path": "a.txt"},
    )
    assert status == "succeeded"


def test_an_awaited_approval_returns_the_edited_args_and_a_rejection_its_reason(
    up, token, live_approver
):
    async def body(client):
        session = await client.session("async-edited")
        person = decide_when_pending(live_approver, arguments={"vendor": "acme", "amount": 450})
        edited = await session.request_approval(
            "pay_invoice", {"vendor": "acme", "amount": 900}, timeout=60
        )
        await asyncio.to_thread(person.join)
        person = decide_when_pending(live_approver, "reject", reason="main is protected")
        rejected = await session.request_approval("delete_branch", {"name": "main"}, timeout=60)
        await asyncio.to_thread(person.join)
        return edited, rejected

    edited, rejected = in_a_loop(up, token, body)
    assert edited.approved and edited.edited and edited.decided_by == "approver"
    assert edited.args == {"vendor": "acme", "amount": 450}
    assert (rejected.approved, rejected.reason) == (False, "main is protected")


def test_timeouts_and_refusals_are_the_same_errors(up, token, live_approver):
    async def body(client):
        session = await client.session("async-errors")
        with pytest.raises(ApprovalTimeout):
            await session.request_approval("delete_branch", {"name": "x"}, timeout=1)
        with pytest.raises(AgentopsError) as refused:
            await session.request_approval("pay_invoice", {"vendor": "acme"}, timeout=1)
        async with AsyncAgentopsClient(up.url, "aoa_wrong") as stranger:
            with pytest.raises(AgentopsError) as unauthenticated:
                await stranger.session()
        return refused.value, unauthenticated.value

    refused, unauthenticated = in_a_loop(up, token, body)
    assert refused.status == 422 and "amount" in refused.detail
    assert unauthenticated.status == 401
    for approval in live_approver.pending("async-bot"):
        live_approver.decide(approval, "reject", reason="cleanup")


def test_a_cancelled_wait_withdraws_the_call_at_once(up, token, live_approver):
    async def body(client):
        session = await client.session("async-cancelled")
        waiting = asyncio.ensure_future(
            session.request_approval("delete_branch", {"name": "stale"}, timeout=600)
        )
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(live_approver.pending, "async-bot"):
            assert time.monotonic() < deadline, "the call never waited for a person"
            await asyncio.sleep(0.1)
        began = time.monotonic()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return time.monotonic() - began

    took = in_a_loop(up, token, body)
    assert took < 5  # no thread's long-poll to sit out
    assert live_approver.pending("async-bot") == []  # withdrawn: nobody decides it


def test_wait_all_and_the_decision_stream_see_decisions_in_any_order(up, token, live_approver):
    async def body(client):
        session = await client.session("async-many")
        first = await session.submit("delete_branch", {"name": "a"})
        second = await session.submit("delete_branch", {"name": "b"})
        for approval in reversed(await asyncio.to_thread(live_approver.pending, "async-bot")):
            await asyncio.to_thread(live_approver.decide, approval, "approve")
        both = await session.wait_all([first["call"], second["call"]], timeout=30)
        streamed = [
            d.call_id async for d in session.decisions(until={first["call"], second["call"]})
        ]
        return first["call"], second["call"], both, streamed

    first, second, both, streamed = in_a_loop(up, token, body)
    assert list(both) == [first, second] and all(d.approved for d in both.values())
    assert sorted(streamed) == sorted([first, second])


def test_the_adapters_take_an_async_session(up, token, live_approver):
    paid = []

    def pay_invoice(vendor: str, amount: float) -> str:
        """Pay a vendor's invoice."""
        paid.append((vendor, amount))
        return f"paid {amount} to {vendor}"

    async def body(client):
        session = await client.session("async-adapters")
        hook = can_use_tool(session)
        person = decide_when_pending(live_approver, arguments={"command": "ls -la"})
        allowed = await hook("Bash", {"command": "rm -rf /tmp/x"}, None)
        await asyncio.to_thread(person.join)
        tool = gated(session, pay_invoice)
        person = decide_when_pending(live_approver, arguments={"vendor": "acme", "amount": 120})
        said = await tool("acme", 900)
        await asyncio.to_thread(person.join)
        await asyncio.sleep(0.5)  # the result's report, sent after the tool returned
        return allowed, said

    allowed, said = in_a_loop(up, token, body)
    assert allowed.behavior == "allow" and allowed.updated_input == {"command": "ls -la"}
    assert said == "paid 120 to acme" and paid == [("acme", 120)]


def test_the_wheel_is_agentops_gate_and_typed(tmp_path):
    subprocess.run(  # uv: what `uv run pytest` runs under
        ["uv", "build", "--wheel", "-o", str(tmp_path), str(ROOT / "clients" / "python")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("agentops_gate-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "agentops_client/py.typed" in names and "agentops_client/aio.py" in names
    assert "Name: agentops-gate" in metadata
    assert 'Requires-Dist: httpx>=0.27; extra == "async"' in metadata
