"""Read-only calls of one model turn run together (runs/engine/parallel.py), bounded per run,
recorded in the order the model asked for them.

Transactional: the calls run on pool threads with their own database connections, which a
test's open transaction would hide its writes from (and inside one they run one by one)."""

import time

import pytest

from agentkit.llm.scripted import text, tool_use
from approvals.models import Approval
from runs.models import Run

from ..harness import CALLS, SLEEPING, SLEPT, assert_timeline_sound, drive, tool_steps
from .test_terminator import decide

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _sleepers():
    SLEPT.clear()
    SLEEPING.update(now=0, most=0)


@pytest.fixture
def limit(settings, monkeypatch):
    def set_limit(n: int) -> None:
        monkeypatch.setitem(settings.AGENTOPS, "MAX_PARALLEL_TOOLS", n)

    return set_limit


def lookups(n: int, seconds: float) -> list[dict]:
    return [tool_use("t_sleep", n=i, seconds=seconds) for i in range(n)]


def test_read_only_calls_of_one_turn_run_together(launch, script, limit):
    limit(4)
    script([[text("Looking up four things."), *lookups(4, 0.3)], [text("Found them.")]])
    run = launch()
    started = time.monotonic()
    drive(run)
    elapsed = time.monotonic() - started
    assert run.status == Run.Status.SUCCEEDED
    assert SLEEPING["most"] == 4
    assert elapsed < 0.9  # one after another they take 1.2 s
    # Recorded in the order asked, whatever order they finished in.
    assert [d["result"] for d in tool_steps(run)] == [{"n": i} for i in range(4)]
    assert_timeline_sound(run)


def test_the_steps_follow_the_turns_tool_use_order(launch, script, limit):
    limit(4)
    # The first asked finishes last: its step still comes first, answering its tool_use.
    turn = [tool_use("t_sleep", n=0, seconds=0.4), *lookups(3, 0.05)[1:], text("Done?")]
    provider = script([turn, [text("Done.")]])
    run = launch()
    drive(run)
    model_step = run.steps.filter(kind="llm").order_by("seq").first()
    asked = [b["id"] for b in model_step.data["content"] if b["type"] == "tool_use"]
    assert [d["tool_use_id"] for d in tool_steps(run)] == asked
    results = provider.requests[1].messages[-1]["content"]
    assert [b["tool_use_id"] for b in results] == asked
    assert min(s[1] for s in SLEPT) < max(s[1] for s in SLEPT) < min(s[2] for s in SLEPT)


def test_at_most_the_limit_run_at_once(launch, script, limit):
    limit(2)
    script([lookups(6, 0.1), [text("Done.")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert SLEEPING["most"] == 2
    assert [d["result"]["n"] for d in tool_steps(run)] == list(range(6))


def test_an_agent_declares_its_own_limit(launch, script, limit, test_agent):
    limit(4)
    script([lookups(3, 0.1), [text("Done.")]])
    run = launch()
    Run.objects.filter(pk=run.pk).update(agent_config={**run.agent_config, "max_parallel_tools": 1})
    drive(run)
    assert SLEEPING["most"] == 1
    assert len(tool_steps(run)) == 3


def test_a_failing_call_does_not_lose_the_others(launch, script, limit):
    limit(4)
    turn = [
        tool_use("t_sleep", n=1, seconds=0.1),
        tool_use("t_fail", n=2),  # a business error
        tool_use("t_down", n=3),  # an infrastructure error, retried, then given up
        tool_use("t_nope"),  # not one of the agent's tools
        tool_use("t_sleep", n=5, seconds=0.1),
    ]
    script([turn, [text("Two of five answered.")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    steps = tool_steps(run)
    assert [d["tool"] for d in steps] == ["t_sleep", "t_fail", "t_down", "t_nope", "t_sleep"]
    assert [d["is_error"] for d in steps] == [False, True, True, True, False]
    assert steps[0]["result"] == {"n": 1} and steps[4]["result"] == {"n": 5}
    assert steps[2]["attempts"] == 3 and CALLS["t_down"] == 3
    run.refresh_from_db()
    assert run.tool_failed_count == 3
    assert_timeline_sound(run)


def test_a_call_with_side_effects_keeps_its_place(launch, script, limit):
    limit(4)
    turn = [
        tool_use("t_sleep", n=1, seconds=0.05),
        tool_use("t_sleep", n=2, seconds=0.05),
        tool_use("t_charge", amount=5),
        tool_use("t_sleep", n=3, seconds=0.05),
    ]
    script([turn, [text("Charged.")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert [d["tool"] for d in tool_steps(run)] == ["t_sleep", "t_sleep", "t_charge", "t_sleep"]
    charged_seq = run.steps.get(kind="tool", data__tool="t_charge").seq
    after = [n for n, *_ in SLEPT if n == 3]
    assert after == [3] and CALLS["t_charge"] == 1
    # The lookup after the charge ran after it, on its own step (the ledger's way).
    last = run.steps.filter(kind="tool").order_by("-seq").first()
    assert last.seq > charged_seq and last.data["result"] == {"n": 3}
    assert SLEEPING["most"] == 2
    assert_timeline_sound(run)


def test_lookups_after_a_decided_call_run_together(launch, script, limit, plain_user):
    limit(4)
    turn = [tool_use("t_gated", n=1), *lookups(3, 0.2), tool_use("t_gated", n=2)]
    provider = script([turn, [text("Done.")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.WAITING and SLEPT == []  # nothing runs until decided
    decide(run, plain_user, status=Approval.Status.APPROVED)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert SLEEPING["most"] == 3
    steps = list(run.steps.filter(kind="tool").order_by("seq"))
    assert [(s.data["tool"], s.data.get("result")) for s in steps] == [
        ("t_gated", {"done": 1}),
        *(("t_sleep", {"n": i}) for i in range(3)),
        ("t_gated", {"done": 2}),
    ]
    # The three lookups were written together, after the first approved call and before the
    # second: consecutive steps, answering the model in its order.
    assert [s.seq for s in steps[1:4]] == [steps[1].seq + i for i in range(3)]
    results = provider.requests[1].messages[-1]["content"]
    assert [b["tool_use_id"] for b in results] == [s.data["tool_use_id"] for s in steps]
    assert_timeline_sound(run)
