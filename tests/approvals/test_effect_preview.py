"""Effect previews (agentkit/previews.py): computed when the gate opens and kept with the
approval, shown on the card, computed again when a person approves; when the data changed
since, the approval is refused with the fresh preview and the call does not run."""

import pytest
from django.test import Client
from django.urls import reverse

from agentkit.agents import CATALOGUE, Agent, GateRules, register
from agentkit.llm.scripted import text, tool_use
from agentkit.previews import Change
from agentkit.tools import Blast, tool
from approvals import decisions
from approvals.models import Approval
from approvals.notify import message
from approvals.notify.one_tap import links as one_tap
from runs.models import Run, Step

from .conftest import EXECUTED, AskInput, drive, gated

pytestmark = pytest.mark.django_db(transaction=True)

# The "database" the test tool changes and its preview reads.
BALANCES = {"acme": 100}


def _credit_preview(args: dict) -> Change:
    now = BALANCES[args["account"]]
    return Change(
        subject=f"account {args['account']}",
        before={"balance": now},
        after={"balance": now + args["amount"]},
    )


@tool(
    reversible=False,
    blast=Blast.MEDIUM,
    accepts_idempotency_key=True,
    name="test_preview_credit",
    preview=_credit_preview,
)
def credit(account: str, amount: int) -> dict:
    """Credit an account."""
    EXECUTED.append(("test_preview_credit", {"account": account, "amount": amount}))
    BALANCES[account] += amount
    return {"balance": BALANCES[account]}


if "test-previewer" not in CATALOGUE:
    register(
        Agent(
            slug="test-previewer",
            title="test-previewer",
            description="test agent",
            model="claude-sonnet-4-6",
            system_prompt="You are a test agent.",
            tools=("test_preview_credit",),
            input_form=AskInput,
            prompt=lambda d: f"Credit: {d}",
            script=lambda d: [
                [tool_use("test_preview_credit", account="acme", amount=50)],
                [text("ok")],
            ],
            gates=GateRules(),
        )
    )


@pytest.fixture(autouse=True)
def _balances():
    BALANCES["acme"] = 100


def test_the_preview_is_computed_when_the_gate_opens_and_kept_with_the_approval(
    operator, no_enqueue
):
    run, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    assert approval.preview["changes"] == [
        {"subject": "account acme", "before": {"balance": 100}, "after": {"balance": 150}}
    ]
    gate = run.steps.get(kind=Step.Kind.GATE)
    assert gate.data["preview_hash"] == approval.preview["hash"]


def test_unchanged_data_approves_and_the_decision_names_the_preview_shown(
    operator, approver, no_enqueue
):
    run, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    decisions.decide(
        approval.pk,
        user=approver,
        decision="approve",
        shown_preview_hash=approval.preview["hash"],
    )
    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_preview_credit", {"account": "acme", "amount": 50})]
    step = run.steps.get(kind=Step.Kind.DECISION)
    assert step.data["preview_hash"] == approval.preview["hash"]


def test_data_changed_since_the_gate_refuses_the_approval_with_the_fresh_preview(
    operator, approver, no_enqueue
):
    run, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    shown = approval.preview["hash"]
    BALANCES["acme"] = 20  # someone spent from the account meanwhile

    with pytest.raises(decisions.PreviewChanged) as refused:
        decisions.decide(approval.pk, user=approver, decision="approve", shown_preview_hash=shown)

    fresh = refused.value.preview
    assert refused.value.status == 409 and "changed since you looked" in refused.value.message
    assert fresh["changes"][0]["before"] == {"balance": 20}
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.preview == fresh  # the next look shows the fresh one
    assert not approval.votes.exists()
    assert EXECUTED == []

    # Seen again and approved: it runs, once.
    decisions.decide(
        approval.pk, user=approver, decision="approve", shown_preview_hash=fresh["hash"]
    )
    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_preview_credit", {"account": "acme", "amount": 50})]


def test_an_approval_of_an_old_preview_is_refused_after_someone_else_saw_the_new_one(
    operator, approver, admin_user, no_enqueue
):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    old = approval.preview["hash"]
    BALANCES["acme"] = 20
    with pytest.raises(decisions.PreviewChanged):
        decisions.decide(approval.pk, user=approver, decision="approve", shown_preview_hash=old)
    # The stored preview is now the fresh one; the hash this approver still holds is not.
    with pytest.raises(decisions.PreviewChanged):
        decisions.decide(approval.pk, user=approver, decision="approve", shown_preview_hash=old)
    assert EXECUTED == []


def test_without_a_shown_hash_the_stored_preview_is_what_was_shown(operator, approver, no_enqueue):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    BALANCES["acme"] = 20
    with pytest.raises(decisions.PreviewChanged):
        decisions.decide(approval.pk, user=approver, decision="approve")
    decided = decisions.decide(approval.pk, user=approver, decision="approve")
    assert decided.status == Approval.Status.APPROVED


def test_a_rejection_needs_no_fresh_preview(operator, approver, no_enqueue):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    BALANCES["acme"] = 20
    decided = decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    assert decided.status == Approval.Status.REJECTED


def test_the_card_shows_the_diff_escaped_and_a_changed_preview_on_approve(
    client, operator, approver, no_enqueue
):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    client.force_login(approver)
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert 'id="effect-preview"' in page and "account acme" in page
    assert f'name="shown_preview_hash" value="{approval.preview["hash"]}"' in page

    BALANCES["acme"] = 20
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {
            "decision": "approve",
            "shown_args_hash": approval.args_hash,
            "shown_preview_hash": approval.preview["hash"],
        },
        headers={"HX-Request": "true"},
    )
    body = response.content.decode()
    assert response.status_code == 409
    assert "Changed since you looked." in body
    assert 'id="effect-preview" hx-swap-oob="true" data-changed' in body
    assert '<td class="before">20</td>' in body
    assert "disabled" not in body.split('id="decision-buttons"')[1].split("</div>")[0]
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and EXECUTED == []


def test_the_api_answers_409_with_the_fresh_preview(client, operator, approver, no_enqueue):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    client.force_login(approver)
    detail = client.get(f"/api/approvals/{approval.pk}").json()
    assert detail["preview"]["hash"] == approval.preview["hash"]
    BALANCES["acme"] = 20
    response = client.post(
        f"/api/approvals/{approval.pk}/decision",
        {"decision": "approve", "shown_preview_hash": detail["preview"]["hash"]},
        content_type="application/json",
    )
    assert response.status_code == 409
    assert response.json()["preview"]["changes"][0]["before"] == {"balance": 20}


def test_the_one_tap_page_shows_the_diff_and_refuses_a_changed_preview(
    operator, approver, no_enqueue
):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    token = one_tap.token_for(approval, approver)
    client = Client()
    client.force_login(approver)
    page = client.get(reverse("approvals:one_tap", args=[token])).content.decode()
    assert "account acme" in page and '<td class="after">150</td>' in page

    BALANCES["acme"] = 20
    response = client.post(
        reverse("approvals:one_tap", args=[token]),
        {
            "decision": "approve",
            "shown_args_hash": approval.args_hash,
            "shown_preview_hash": approval.preview["hash"],
            "password": "pw-arthur",  # irreversible: approving asks for it
        },
    )
    body = response.content.decode()
    assert response.status_code == 409
    assert "Changed since you looked." in body and '<td class="after">70</td>' in body
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.preview["changes"][0]["before"] == {"balance": 20}  # kept after rollback
    # The link was not spent: the approver decides again on what they now see.
    again = client.post(
        reverse("approvals:one_tap", args=[token]),
        {
            "decision": "approve",
            "shown_args_hash": approval.args_hash,
            "shown_preview_hash": approval.preview["hash"],
            "password": "pw-arthur",
        },
    )
    assert again.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED


def test_the_slack_message_shows_what_the_call_would_change_escaped(operator, no_enqueue):
    _, approval = gated("test-previewer", {"topic": "t"}, by=operator)
    BALANCES["acme"] = 20
    approval.preview = {
        "changes": [
            {"subject": "<!channel> acme", "before": {"note": "a"}, "after": {"note": "b"}}
        ],
        "hash": "h",
    }
    text = message.slack_payload(approval)["blocks"][0]["text"]["text"]
    assert "*What it would change:*" in text
    assert "&lt;!channel&gt; acme: note a -&gt; b" in text
    assert "<!channel>" not in text
