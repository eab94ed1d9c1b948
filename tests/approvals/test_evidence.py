"""The approval card shows what the agent based the gated call on, and what approving does.

An approver approved a refund of 600 on an order whose total (from the agent's own lookup)
sat in a collapsed step: the lookup result is now on the card, expanded, next to a one-line
effect ("Refund 600.00 on order 42") that a high-risk approve asks to confirm.
"""

import json
from decimal import Decimal

import pytest
from django.urls import reverse

from agentkit.agents import get_agent
from agentkit.tools import get_tool
from approvals.evidence import card as evidence
from approvals.models import Approval
from runs import engine
from runs.models import Run, args_hash, canonical_json
from tests.html_checks import elements
from tests.runs.harness import tamper

pytestmark = pytest.mark.django_db


def refund_run(user, order_id: int = 42, amount: str = "600") -> tuple[Run, Approval]:
    agent = get_agent("refund-desk")
    data, errors = agent.validate_input(
        {"order_id": order_id, "amount": amount, "reason": "Arrived damaged"}
    )
    assert not errors, errors
    run = engine.launch(agent=agent, input=data, launched_by=user, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    return run, Approval.objects.get(run=run, tool="issue_refund")


@pytest.fixture
def refund(operator, no_enqueue):
    return refund_run(operator)


def test_evidence_is_the_model_text_and_tool_results_before_the_gate_newest_first(refund):
    run, approval = refund
    items = evidence.for_approval(approval)
    assert [i.seq for i in items] == sorted((i.seq for i in items), reverse=True)
    assert all(i.seq < approval.gate_seq for i in items)
    said, lookup = items[0], next(i for i in items if i.source == "tool")
    assert said.source == "model" and "refunding 600" in said.text
    assert lookup.label == "lookup_order returned" and lookup.truncated == 0
    order = json.loads(lookup.text)
    assert order["id"] == 42 and "total" in order
    assert lookup.url == reverse("runs:step", args=[run.pk, lookup.seq])
    # Model text comes before the lookup it was based on: the gate's own proposal is first.
    assert said.seq == approval.llm_seq


def test_long_values_are_cut_with_a_link_and_errors_are_marked(refund):
    run, approval = refund

    def set_tool_steps(data: dict) -> None:
        # Arranged past Postgres' append-only triggers: the record is not what is tested.
        tamper(
            "UPDATE runs_step SET data = %s WHERE run_id = %s AND kind = 'tool'",
            [canonical_json(data), run.pk.hex],
        )

    set_tool_steps({"tool": "lookup_order", "args": {}, "result": "x" * 5000})
    lookup = next(i for i in evidence.for_approval(approval) if i.source == "tool")
    assert len(lookup.text) == evidence.EVIDENCE_CHARS
    assert lookup.truncated == 5000 - evidence.EVIDENCE_CHARS
    set_tool_steps({"tool": "lookup_order", "args": {}, "is_error": True, "error": "no order 42"})
    failed = next(i for i in evidence.for_approval(approval) if i.source == "tool")
    assert failed.error and failed.label == "lookup_order failed" and failed.text == "no order 42"
    assert len(evidence.for_approval(approval, limit=1)) == 1


def test_the_card_shows_the_evidence_expanded_the_effect_and_the_deadline(client, approver, refund):
    _run, approval = refund
    client.force_login(approver)
    html = client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    start = html.index('id="evidence"')
    section = html[start : html.index("</section>", start)]
    # Expanded: not inside a closed <details>.
    assert "<details" not in section
    assert "lookup_order returned" in section and "&quot;total&quot;" in section
    assert 'id="call-effect"' in html and "Refund 600.00 on order 42" in html
    assert "If nobody decides by" in html
    assert "the call is not executed, and the agent is told so." in html
    # Approve is not the default-looking button for an irreversible, high-risk refund.
    approve = next(a for tag, a in elements(html) if tag == "button" and a.get("id") == "approve")
    assert "approve" not in (approve.get("class") or "").split()
    assert "data-confirm" in approve


def decide(client, approval, **data):
    data.setdefault("shown_args_hash", args_hash(approval.tool, approval.args))
    url = reverse("approvals:decide", args=[approval.pk])
    return client.post(url, data, HTTP_HX_REQUEST="true")


def test_a_high_risk_approve_asks_to_confirm_the_effect_and_decides_nothing(
    client, approver, refund
):
    _run, approval = refund
    client.force_login(approver)
    response = decide(client, approval, decision="approve")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="confirm-approve"' in html and "Refund 600.00 on order 42" in html
    assert f'name="confirmed" value="{args_hash(approval.tool, approval.args)}"' in html
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and not approval.votes.exists()
    # A confirmation of another call asks again; the one of this call decides.
    decide(client, approval, decision="approve", confirmed="0" * 64)
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    response = decide(client, approval, decision="approve", confirmed=approval.args_hash)
    assert response.status_code == 200 and "confirm-approve" not in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED


def test_without_javascript_the_confirmation_is_a_page_too(client, approver, refund):
    _run, approval = refund
    client.force_login(approver)
    url = reverse("approvals:decide", args=[approval.pk])
    response = client.post(
        url, {"decision": "approve", "shown_args_hash": approval.args_hash, "args_form": "1"}
    )
    html = response.content.decode()
    assert response.status_code == 200 and 'id="confirm-approve"' in html
    assert 'id="decision-form"' in html
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


def test_who_may_not_approve_is_refused_at_once_not_asked_to_confirm(client, viewer, refund):
    _run, approval = refund
    client.force_login(viewer)
    assert decide(client, approval, decision="approve").status_code == 403


def test_tools_say_their_effect_from_parsed_arguments():
    refund_tool = get_tool("issue_refund")
    args = refund_tool.validate({"order_id": 42, "amount": "600"})
    assert refund_tool.effect(args) == "Refund 600.00 on order 42"
    assert refund_tool.effect({"order_id": 42, "amount": Decimal("2.5")}) == (
        "Refund 2.50 on order 42"
    )
    # Arguments the describer cannot read fall back to the plain form.
    assert refund_tool.effect({"order_id": 42}) == "Call issue_refund with order_id=42"
    # A tool without a describer: its name and its arguments, long values cut.
    query = get_tool("run_query")
    effect = query.effect({"sql": "SELECT " + "x" * 200})
    assert effect.startswith("Call run_query with sql=SELECT xxx") and effect.endswith("…")
    assert get_tool("send_customer_email").effect(
        {"to": "a@example.com", "subject": "Hi", "body": "..."}
    ) == ("E-mail a@example.com: Hi")


def test_only_high_risk_or_irreversible_actions_ask_to_confirm(refund):
    _run, approval = refund
    assert approval.needs_confirmation
    reversible = Approval(kind=Approval.Kind.ACTION, tool="run_query", risk=Approval.Risk.LOW)
    assert not reversible.needs_confirmation
    reversible.risk = Approval.Risk.HIGH
    assert reversible.needs_confirmation
    question = Approval(kind=Approval.Kind.QUESTION, tool="ask_operator", risk="high")
    assert not question.needs_confirmation
