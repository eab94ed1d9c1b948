"""Test tools and agents for the approval flows, and helpers to drive a run to its gate.

The tools do real (small) work: they append to EXECUTED, which the tests read to prove a
call ran exactly once, with exactly the approved arguments, or never.
"""

import threading
from decimal import Decimal

import pytest
from django import forms

import approvals.engine_gates  # noqa: F401  (registers ask_operator)
from agentkit.agents import CATALOGUE, Agent, GateRules, register
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, tool
from approvals.models import Approval
from demo.agents import last_tool_result
from runs import engine
from runs.models import Run
from tests.conftest import make_user

EXECUTED: list[tuple[str, dict]] = []
_lock = threading.Lock()


@tool(reversible=False, blast=Blast.HIGH, accepts_idempotency_key=True, name="test_transfer")
def test_transfer(to: str, amount: Decimal) -> dict:
    """Transfer money to a vendor."""
    with _lock:
        EXECUTED.append(("test_transfer", {"to": to, "amount": str(amount)}))
    return {"transferred": str(amount), "to": to}


@tool(
    reversible=False,
    blast=Blast.CRITICAL,
    accepts_idempotency_key=True,
    on_reject="fail_run",
    name="test_wipe",
)
def test_wipe(target: str) -> dict:
    """Delete a whole environment. A rejection fails the run."""
    with _lock:
        EXECUTED.append(("test_wipe", {"target": target}))
    return {"wiped": target}


@tool(reversible=True, blast=Blast.NONE, name="test_use_region")
def test_use_region(region: str) -> dict:
    """Pick the region to work in."""
    with _lock:
        EXECUTED.append(("test_use_region", {"region": region}))
    return {"region": region}


class TransferInput(forms.Form):
    to = forms.CharField(max_length=100)
    amount = forms.DecimalField(max_digits=10, decimal_places=2)


def _report(messages: list[dict]) -> list[dict]:
    # The agent's final answer quotes the last tool result, so a test can see what it got.
    return [text(f"Result: {last_tool_result(messages)}")]


def transfer_script(data: dict) -> list:
    return [[tool_use("test_transfer", to=data["to"], amount=data["amount"])], _report]


def two_transfers_script(data: dict) -> list:
    return [
        [
            tool_use("test_transfer", to=data["to"], amount=data["amount"]),
            tool_use("test_transfer", to=data["to"], amount="1.00"),
        ],
        _report,
    ]


def wipe_script(data: dict) -> list:
    return [[tool_use("test_wipe", target=data["to"])], _report]


class AskInput(forms.Form):
    topic = forms.CharField(max_length=100)


def ask_script(data: dict) -> list:
    def use_answer(messages):
        answer = (last_tool_result(messages) or {}).get("answer", "")
        return [text(f"The operator chose {answer}."), tool_use("test_use_region", region=answer)]

    return [
        [
            tool_use(
                "ask_operator", question=f"Which region for {data['topic']}?", options=["eu", "us"]
            )
        ],
        use_answer,
        _report,
    ]


def _agent(slug: str, script, tools: tuple[str, ...], form=TransferInput, **gates) -> Agent:
    return Agent(
        slug=slug,
        title=slug,
        description="test agent",
        model="claude-sonnet-4-6",
        system_prompt="You are a test agent.",
        tools=tools,
        input_form=form,
        prompt=lambda d: f"Do it: {d}",
        script=script,
        gates=GateRules(**gates),
    )


if "test-payer" not in CATALOGUE:
    register(
        _agent(
            "test-payer",
            transfer_script,
            ("test_transfer",),
            thresholds={"test_transfer": {"amount": Decimal(500)}},
            allow_lists={"test_transfer": {"to": ("acme", "globex")}},
        )
    )
    register(_agent("test-payer-2", two_transfers_script, ("test_transfer",)))
    register(_agent("test-wiper", wipe_script, ("test_wipe",)))
    register(_agent("test-asker", ask_script, ("ask_operator", "test_use_region"), form=AskInput))


@pytest.fixture
def bea(django_user_model):
    """An approver (named by the agents that name theirs in these tests)."""
    return make_user(django_user_model, "bea", "approver")


@pytest.fixture
def dan(django_user_model):
    """An approver who also launches runs (so the four-eyes rule can apply to him)."""
    return make_user(django_user_model, "dan", "approver", "operator")


@pytest.fixture(autouse=True)
def _clear_executed():
    EXECUTED.clear()
    yield
    EXECUTED.clear()


def launch(slug: str, input: dict, *, by=None, **gate_overrides) -> Run:
    """Launch a scripted run; gate overrides change this run's config snapshot only."""
    agent = CATALOGUE[slug]
    data, errors = agent.validate_input(input)
    assert not errors, errors
    run = engine.launch(agent=agent, input=data, launched_by=by, provider="scripted")
    if gate_overrides:
        config = run.agent_config
        config["gates"] = {**config["gates"], **gate_overrides}
        Run.objects.filter(pk=run.pk).update(agent_config=config)
    return run


def drive(run: Run) -> str:
    """Advance the run until it stops (waiting, finished); returns its status."""
    result = engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    return result


def gated(slug: str, input: dict, *, by=None, **gate_overrides) -> tuple[Run, Approval]:
    run = launch(slug, input, by=by, **gate_overrides)
    assert drive(run) == Run.Status.WAITING, list(run.steps.values_list("kind", "data"))
    return run, Approval.objects.filter(run=run, status=Approval.Status.PENDING).earliest(
        "gate_seq"
    )


@tool(reversible=False, blast=Blast.MEDIUM, accepts_idempotency_key=False, name="test_notify")
def test_notify(to: str) -> dict:
    """Send a notification; the provider cannot de-duplicate retries."""
    with _lock:
        EXECUTED.append(("test_notify", {"to": to}))
    return {"notified": to}


def notify_script(data: dict) -> list:
    return [[tool_use("test_notify", to=data["to"])], _report]


if "test-notifier" not in CATALOGUE:
    register(_agent("test-notifier", notify_script, ("test_notify",), never_gate=("test_notify",)))
