"""A test agent whose calls can be granted: it credits a customer several times, one call per
model turn, with a medium-risk tool (irreversible, blast radius medium: gated by the base
table, below the four-eyes rule's "high"). The tool appends to EXECUTED like the others."""

from decimal import Decimal

from django import forms

from agentkit.agents import CATALOGUE, register
from agentkit.llm.scripted import tool_use
from agentkit.tools import Blast, tool

from .conftest import EXECUTED, _agent, _lock, _report


@tool(reversible=False, blast=Blast.MEDIUM, accepts_idempotency_key=True, name="test_credit")
def test_credit(to: str, amount: Decimal) -> dict:
    """Credit a customer's account."""
    with _lock:
        EXECUTED.append(("test_credit", {"to": to, "amount": str(amount)}))
    return {"credited": str(amount), "to": to}


class CreditsInput(forms.Form):
    to = forms.CharField(max_length=100)
    amounts = forms.CharField(max_length=200, help_text="comma-separated")


def credits_script(data: dict) -> list:
    turns: list = [
        [tool_use("test_credit", to=data["to"], amount=a.strip())]
        for a in data["amounts"].split(",")
    ]
    return [*turns, _report]


if "test-crediter" not in CATALOGUE:
    register(
        _agent(
            "test-crediter",
            credits_script,
            ("test_credit",),
            form=CreditsInput,
            thresholds={"test_credit": {"amount": Decimal(100)}},
        )
    )
