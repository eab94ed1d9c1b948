"""Tool cost: a tool may declare what each call costs or return the call's cost (Charged);
the tool step records it, and it counts toward the run's cost, its cost limit and the
agent's spend."""

import dataclasses
from decimal import Decimal

import pytest

from agentkit.agents import register
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, Charged, ToolError, tool
from runs import costs, engine
from runs.models import Run, Step

from ..harness import drive

pytestmark = pytest.mark.django_db


@tool(reversible=True, blast=Blast.NONE, name="t_paid_lookup", cost_usd="0.05")
def t_paid_lookup(q: str) -> dict:
    """A paid search: every call costs 5 cents; "missing" is a business error, billed too."""
    if q == "missing":
        raise ToolError("no such record")
    return {"q": q}


@tool(reversible=False, blast=Blast.LOW, name="t_metered_send")
def t_metered_send(pages: int) -> Charged:
    """A fax service that bills by the page: the call says what it cost."""
    return Charged({"sent": pages}, cost_usd=Decimal("0.10") * pages)


@pytest.fixture
def paid_agent(test_agent, no_enqueue):
    def launch(**limits):
        agent = register(
            dataclasses.replace(
                test_agent,
                tools=(*test_agent.tools, "t_paid_lookup", "t_metered_send"),
                limits=dataclasses.replace(test_agent.limits, **limits),
            )
        )
        return engine.launch(agent=agent, input={"task": "pay", "script": ""})

    return launch


def tool_cost(run: Run) -> list[Decimal]:
    return [s.cost_usd for s in run.steps.filter(kind=Step.Kind.TOOL).order_by("seq")]


def test_a_declared_cost_is_charged_per_call_that_ran_even_a_failed_one(paid_agent, script):
    script(
        [
            [tool_use("t_paid_lookup", q="a")],
            [tool_use("t_paid_lookup", q="missing")],
            [text("done")],
        ]
    )
    run = paid_agent()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert tool_cost(run) == [Decimal("0.05"), Decimal("0.05")]
    steps = run.steps.filter(kind=Step.Kind.TOOL).order_by("seq")
    assert [s.data["cost_usd"] for s in steps] == ["0.050000", "0.050000"]
    model = sum(s.cost_usd for s in run.steps.filter(kind=Step.Kind.LLM))
    assert run.cost_usd == model + Decimal("0.10")
    # The agent's spend agrees with the run, the tools' part apart.
    spent = costs.cost_by_agent(agent=run.agent).total
    assert (spent.cost_usd, spent.tool_cost_usd) == (run.cost_usd, Decimal("0.10"))


def test_a_returned_cost_of_a_call_with_side_effects_is_recorded_with_it(paid_agent, script):
    script([[tool_use("t_metered_send", pages=3)], [text("sent")]])
    run = paid_agent()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED, run.status_detail
    (step,) = run.steps.filter(kind=Step.Kind.TOOL)
    assert step.cost_usd == Decimal("0.30") and step.data["result"] == {"sent": 3}
    # The ledger keeps the cost with the outcome: a call recorded again after a crash is
    # charged what it cost, once.
    assert run.side_effects.get().result["cost_usd"] == "0.300000"
    model = sum(s.cost_usd for s in run.steps.filter(kind=Step.Kind.LLM))
    assert run.cost_usd == model + Decimal("0.30")


def test_tool_cost_counts_toward_the_runs_cost_limit(paid_agent, script):
    script([[tool_use("t_metered_send", pages=40)], [text("never asked")]])
    run = paid_agent(max_cost_usd=Decimal("1.00"))
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.MAX_COST
    assert run.cost_usd > Decimal("4")
    assert run.steps.filter(kind=Step.Kind.LLM).count() == 1


@pytest.mark.parametrize("bad", ["-1", "NaN", "abc", "1e9"])
def test_a_cost_that_is_not_an_amount_is_refused(bad):
    with pytest.raises(ValueError, match="cost must be"):
        Charged(None, cost_usd=bad)
    with pytest.raises(ValueError, match="cost must be"):
        tool(reversible=True, blast=Blast.NONE, name="t_never", cost_usd=bad)


def test_a_failed_call_held_for_an_operator_is_charged_once(test_agent, no_enqueue, script):
    # on_failure="ask" holds the failed call for an operator (runs/engine/steering.py): the
    # paid API billed the attempt all the same, so the run and the agent's spend count it.
    agent = register(
        dataclasses.replace(
            test_agent, tools=(*test_agent.tools, "t_paid_lookup"), on_failure="ask"
        )
    )
    script([[tool_use("t_paid_lookup", q="missing")], [text("never asked")]])
    run = engine.launch(agent=agent, input={"task": "pay", "script": ""})
    drive(run)
    run.refresh_from_db()
    (held,) = run.steps.filter(kind=Step.Kind.TOOL)
    assert held.data["held"] is True and held.cost_usd == Decimal("0.05")
    model = sum(s.cost_usd for s in run.steps.filter(kind=Step.Kind.LLM))
    assert run.cost_usd == model + Decimal("0.05")
    spent = costs.cost_by_agent(agent=run.agent).total
    assert (spent.cost_usd, spent.tool_cost_usd) == (run.cost_usd, Decimal("0.05"))
