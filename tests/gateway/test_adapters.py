"""The adapters keep their frameworks' promises, run with the real packages (openai-agents with
a fake Chat Completions server, langgraph, claude-agent-sdk's hook types) against a live
agentops: a call the framework abandons is withdrawn and never runs, results and errors are
reported, parallel interrupts wait together, a restarted driver waits on the approval it
opened, every Claude tool use is seen through the hooks."""

import asyncio
import operator
import threading
import time
from typing import Annotated, TypedDict

import pytest
from agentops_client import AgentopsClient

from .fake_chat_completions import FakeChatCompletions
from .live_agentops import Approver, external_agent

WITHIN = 30.0  # bound on waiting for a person's decision to show up


@pytest.fixture(scope="module")
def client(up) -> AgentopsClient:
    return AgentopsClient(up.url, external_agent(up, "adapter-bot"))


def _until(predicate, timeout: float = WITHIN):
    """Wait (bounded) for a condition the server will reach; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _steps(live_approver: Approver, session_id: str) -> list[dict]:
    return live_approver._request("GET", f"/api/runs/{session_id}/steps?after=0&limit=500")["items"]


def _tool_steps(live_approver, session_id) -> list[dict]:
    return [s["data"] for s in _steps(live_approver, session_id) if s["kind"] == "tool"]


def _reported(live_approver, session_id, count: int) -> list[dict] | None:
    steps = _tool_steps(live_approver, session_id)
    return steps if len(steps) == count else None


# --- OpenAI Agents SDK ------------------------------------------------------------------------
@pytest.fixture
def openai_model():
    from agents import OpenAIChatCompletionsModel, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    fakes = []

    def make(turns):
        fake = FakeChatCompletions(turns)
        fakes.append(fake)
        model = OpenAIChatCompletionsModel(
            model="fake", openai_client=AsyncOpenAI(base_url=fake.url, api_key="fake")
        )
        return model, fake

    yield make
    for fake in fakes:
        fake.stop()


def test_openai_a_call_the_sdk_times_out_is_withdrawn_and_never_runs(
    client, live_approver, openai_model
):
    from agentops_client.openai_agents import gated
    from agents import Agent, Runner, function_tool

    paid = []

    def pay_invoice(vendor: str, amount: float) -> str:
        """Pay a vendor's invoice."""
        paid.append((vendor, amount))
        return f"paid {amount} to {vendor}"

    session = client.session("openai timeout")
    model, fake = openai_model(
        [("tool", "pay_invoice", {"vendor": "acme", "amount": 900}), ("text", "gave up")]
    )
    tool = function_tool(gated(session, pay_invoice), timeout=1.0)
    agent = Agent(name="payer", model=model, tools=[tool])
    result = asyncio.run(Runner.run(agent, "pay acme"))
    assert result.final_output == "gave up"
    assert "timed out" in fake.tool_outputs()[0]
    # Withdrawn in agentops: nobody is asked any more, and approving is impossible.
    assert _until(lambda: not live_approver.pending())
    steps = _steps(live_approver, session.id)
    assert any(s["data"].get("event") == "withdrawn" for s in steps)
    assert paid == []


def test_openai_results_and_exceptions_are_reported(client, live_approver, openai_model):
    from agentops_client.openai_agents import gated
    from agents import Agent, Runner, function_tool

    def read_file(path: str) -> str:
        """Read a file."""
        if path == "missing":
            raise FileNotFoundError(path)
        return "contents"

    session = client.session("openai report")
    model, _ = openai_model(
        [
            ("tool", "read_file", {"path": "a.txt"}),
            ("tool", "read_file", {"path": "missing"}),
            ("text", "done"),
        ]
    )
    agent = Agent(name="reader", model=model, tools=[function_tool(gated(session, read_file))])
    asyncio.run(Runner.run(agent, "read"))
    steps = _until(
        lambda: (
            len(_tool_steps(live_approver, session.id)) == 2
            and _tool_steps(live_approver, session.id)
        )
    )
    assert steps[0]["result"] == "contents" and steps[0]["is_error"] is False
    assert steps[1]["is_error"] is True and "FileNotFoundError" in steps[1]["error"]


def test_openai_an_approved_edit_runs_through_the_sdks_schema(client, live_approver, openai_model):
    from agentops_client.openai_agents import gated
    from agents import Agent, Runner, function_tool

    paid = []

    def pay_invoice(vendor: str, amount: float) -> str:
        """Pay a vendor's invoice."""
        paid.append((vendor, amount))
        return f"paid {amount} to {vendor}"

    session = client.session("openai edit")
    model, fake = openai_model(
        [("tool", "pay_invoice", {"vendor": "acme", "amount": 900}), ("text", "ok")]
    )

    def person():
        waiting = _until(live_approver.pending)
        live_approver.decide(waiting[0], arguments={"vendor": "acme", "amount": 450})

    thread = threading.Thread(target=person)
    thread.start()
    agent = Agent(name="payer", model=model, tools=[function_tool(gated(session, pay_invoice))])
    asyncio.run(Runner.run(agent, "pay acme"))
    thread.join()
    assert paid == [("acme", 450)]
    assert fake.tool_outputs() == ["paid 450 to acme"]
    assert _until(lambda: _tool_steps(live_approver, session.id))[0]["result"] == "paid 450 to acme"


def test_openai_interruptions_are_decided_reported_and_an_edit_is_never_recorded_as_run(
    client, live_approver, openai_model
):
    from agentops_client.openai_agents import decide_interruptions, report_results
    from agents import Agent, Runner, function_tool

    deleted = []

    def delete_branch(name: str) -> str:
        """Delete a git branch."""
        deleted.append(name)
        return f"deleted {name}"

    tool = function_tool(delete_branch, needs_approval=True)
    session = client.session("openai hitl")
    model, fake = openai_model(
        [
            ("tool", "delete_branch", {"name": "stale"}),
            ("text", "deleted it"),
            ("tool", "delete_branch", {"name": "main"}),
            ("text", "left it"),
        ]
    )
    agent = Agent(name="git", model=model, tools=[tool])

    def decide(decision: str, **kw):
        def person():
            waiting = _until(live_approver.pending)
            live_approver.decide(waiting[0], decision, **kw)

        thread = threading.Thread(target=person)
        thread.start()
        return thread

    async def run(prompt, decision, **kw):
        result = await Runner.run(agent, prompt)
        assert len(result.interruptions) == 1
        person = decide(decision, **kw)
        state = await asyncio.to_thread(decide_interruptions, session, result, timeout=60)
        person.join()
        resumed = await Runner.run(agent, state)
        return resumed, await asyncio.to_thread(report_results, resumed)

    _, reported = asyncio.run(run("delete stale", "approve"))
    assert deleted == ["stale"] and reported == 1
    tools = _until(lambda: _reported(live_approver, session.id, 1))
    assert (tools[0]["tool"], tools[0]["result"]) == ("delete_branch", "deleted stale")
    # An live_approver's edit cannot run through the SDK's flow: withdrawn in agentops, rejected
    # in the SDK with the edit for the model to propose again; nothing ran.
    _, reported = asyncio.run(run("delete main", "approve", arguments={"name": "main-old"}))
    assert deleted == ["stale"] and reported == 0
    assert "main-old" in fake.tool_outputs()[-1]
    withdrawn = [
        s for s in _steps(live_approver, session.id) if s["data"].get("event") == "withdrawn"
    ]
    assert len(withdrawn) == 1 and withdrawn[0]["data"]["approval_was"] == "approved"


# --- LangGraph --------------------------------------------------------------------------------
class Payments(TypedDict, total=False):
    paid: Annotated[list, operator.add]


def _parallel_graph(checkpointer):
    from agentops_client.langgraph import ask, report
    from langgraph.graph import END, START, StateGraph

    def payer(vendor: str):
        def node(state: Payments) -> dict:
            decision = ask("pay_invoice", {"vendor": vendor, "amount": 900}, summary=vendor)
            if not decision["approved"]:
                return {"paid": []}
            report(decision, result=f"paid {vendor}")
            return {"paid": [decision["args"]["vendor"]]}

        return node

    graph = StateGraph(Payments)
    graph.add_node("acme", payer("acme"))
    graph.add_node("globex", payer("globex"))
    graph.add_edge(START, "acme")
    graph.add_edge(START, "globex")
    graph.add_edge("acme", END)
    graph.add_edge("globex", END)
    return graph.compile(checkpointer=checkpointer)


def test_langgraph_parallel_interrupts_wait_together_and_results_are_reported(
    client, live_approver
):
    from agentops_client.langgraph import run_with_approvals
    from langgraph.checkpoint.memory import InMemorySaver

    graph = _parallel_graph(InMemorySaver())
    session = client.session("langgraph parallel")
    seen_together = []

    def person():
        both = _until(lambda: len(live_approver.pending()) == 2 and live_approver.pending())
        seen_together.append(len(both or []))
        for approval in both or []:
            live_approver.decide(approval)

    thread = threading.Thread(target=person)
    thread.start()
    result = run_with_approvals(graph, {}, {"configurable": {"thread_id": "p1"}}, session)
    thread.join()
    assert seen_together == [2]  # both approvals were open at once
    assert sorted(result["paid"]) == ["acme", "globex"]
    tools = _until(
        lambda: (
            len(_tool_steps(live_approver, session.id)) == 2
            and _tool_steps(live_approver, session.id)
        )
    )
    assert sorted(t["result"] for t in tools) == ["paid acme", "paid globex"]


def test_langgraph_a_restarted_driver_waits_on_the_same_approvals(client, live_approver):
    from agentops_client.langgraph import run_with_approvals
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    graph = _parallel_graph(saver)
    config = {"configurable": {"thread_id": "r1"}}
    first = client.session("langgraph before the crash")
    interrupts = graph.invoke({}, config)["__interrupt__"]
    # The first driver submitted the calls, then died while waiting.
    for item in interrupts:
        first.submit("pay_invoice", item.value["args"], summary="x", call_id=f"langgraph:{item.id}")
    opened = sorted(_until(lambda: len(live_approver.pending()) == 2 and live_approver.pending()))
    again = client.session("langgraph after the restart")

    def person():
        for approval in opened:
            live_approver.decide(approval)

    thread = threading.Thread(target=person)
    thread.start()
    result = run_with_approvals(graph, None, config, again)
    thread.join()
    assert sorted(result["paid"]) == ["acme", "globex"]
    assert live_approver.pending() == []  # no second pair was opened
    decided = live_approver._request("GET", "/api/approvals?status=approved&limit=200")["items"]
    assert set(opened) <= {a["id"] for a in decided}


# --- Claude Agent SDK ---------------------------------------------------------------------------
def test_claude_hooks_see_every_tool_use_and_report_results(client, live_approver):
    from agentops_client.claude import hooks
    from claude_agent_sdk import HookMatcher

    session = client.session("claude hooks")
    configured = hooks(session, hints={"Bash": {"reversible": False, "blast": "high"}})
    assert isinstance(configured["PreToolUse"][0], HookMatcher)
    assert configured["PreToolUse"][0].timeout == 3600
    pre = configured["PreToolUse"][0].hooks[0]
    post = configured["PostToolUse"][0].hooks[0]
    failed = configured["PostToolUseFailure"][0].hooks[0]

    def use(tool: str, tool_input: dict, use_id: str) -> dict:
        data = {
            "hook_event_name": "PreToolUse",
            "session_id": "s",
            "transcript_path": "/tmp/t",
            "cwd": "/tmp",
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": use_id,
        }
        return asyncio.run(pre(data, use_id, {"signal": None}))["hookSpecificOutput"]

    # A Read the CLI's own rules would allow without asking: the hook sees it all the same.
    allowed = use("Read", {"file_path": "README.md"}, "toolu_read")
    assert (allowed["permissionDecision"], allowed["updatedInput"]) == (
        "allow",
        {"file_path": "README.md"},
    )
    post_data = {"hook_event_name": "PostToolUse", "tool_name": "Read", "tool_use_id": "toolu_read"}
    asyncio.run(
        post({**post_data, "tool_response": "# agentops", "tool_input": {}}, "toolu_read", {})
    )

    def person():
        waiting = _until(live_approver.pending)
        live_approver.decide(waiting[0], arguments={"command": "git branch -d old"})

    thread = threading.Thread(target=person)
    thread.start()
    bash = use("Bash", {"command": "git branch -D old"}, "toolu_bash")
    thread.join()
    assert (bash["permissionDecision"], bash["updatedInput"]) == (
        "allow",
        {"command": "git branch -d old"},
    )
    failure = {
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "error": "no such branch",
    }
    asyncio.run(
        failed({**failure, "tool_use_id": "toolu_bash", "tool_input": {}}, "toolu_bash", {})
    )
    # The same tool_use_id again (a retried hook) is the same call: answered, not asked again.
    again = use("Bash", {"command": "git branch -D old"}, "toolu_bash")
    assert again["updatedInput"] == {"command": "git branch -d old"}
    assert live_approver.pending() == []
    tools = _tool_steps(live_approver, session.id)
    assert [(t["tool"], t["is_error"]) for t in tools] == [("Read", False), ("Bash", True)]
    assert tools[0]["result"] == "# agentops" and tools[1]["error"] == "no such branch"


def test_claude_cli_end_to_end_every_tool_use_goes_through_agentops(
    client, live_approver, tmp_path
):
    """The Claude Agent SDK's bundled CLI, against the fake Messages API: a Read inside the
    working directory (which the CLI's own rules allow without asking) and a gated Bash,
    edited by a person, both decided by agentops, and their results reported."""
    from agentops_client.claude import hooks
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient

    from agentkit.llm.scripted import text, tool_use
    from tests.support.fake_messages_api import FakeMessagesServer, reply

    (tmp_path / "notes.txt").write_text("hello from notes")
    plan = [
        tool_use("Read", file_path=str(tmp_path / "notes.txt")),
        tool_use("Bash", command="echo proposed"),
    ]

    def turn(body: dict):
        offered = {t.get("name") for t in body.get("tools", [])}
        if "Read" not in offered:  # one of the CLI's side requests
            return reply([text("ok")])
        done = sum(
            1
            for m in body["messages"]
            if m.get("role") == "user"
            and isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"])
        )
        return reply([plan[done]] if done < len(plan) else [text("All done.")])

    session = client.session("claude cli")

    def person():
        waiting = _until(live_approver.pending)
        live_approver.decide(waiting[0], arguments={"command": "echo edited-by-a-person"})

    async def run(base_url: str) -> list:
        options = ClaudeAgentOptions(
            cwd=str(tmp_path),
            hooks=hooks(session, hints={"Bash": {"reversible": False, "blast": "high"}}),
            max_turns=5,
            env={
                "ANTHROPIC_BASE_URL": base_url,
                "ANTHROPIC_API_KEY": "fake",
                "HOME": str(tmp_path),
                "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            },
        )
        messages = []
        async with ClaudeSDKClient(options=options) as claude:
            await claude.query("Read the notes, then clean up.")
            async for message in claude.receive_response():
                messages.append(message)
        return messages

    thread = threading.Thread(target=person)
    thread.start()
    with FakeMessagesServer() as server:
        for _ in range(20):
            server.push(turn)
        messages = asyncio.run(asyncio.wait_for(run(server.base_url), 120))
    thread.join()
    assert type(messages[-1]).__name__ == "ResultMessage" and not messages[-1].is_error
    tools = _until(lambda: _reported(live_approver, session.id, 2))
    assert [t["tool"] for t in tools] == ["Read", "Bash"]
    assert "hello from notes" in str(tools[0]["result"])
    # The CLI ran exactly what the person approved.
    assert tools[1]["args"] == {"command": "echo edited-by-a-person"}
    assert "edited-by-a-person" in str(tools[1]["result"])
