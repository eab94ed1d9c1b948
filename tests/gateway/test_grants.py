"""A standing grant covers an external agent's calls like an in-house agent's: the call it
lets through is answered at once, approved, and recorded as approved by the grant."""

from approvals.grants import models as grants
from approvals.models import Approval
from runs.models import args_hash

INVOICE = {"vendor": "acme", "amount": 900}


def test_a_grant_answers_an_external_agents_next_call_at_once(bot, approver):
    session = bot.session()
    first = bot.call(session, "pay_invoice", INVOICE).json()
    made, _ = grants.grant(
        first["approval"],
        user=approver,
        bounds=grants.Bounds("run", []),
        shown_args_hash=args_hash("pay_invoice", INVOICE),
    )
    second = bot.call(session, "pay_invoice", {"vendor": "acme", "amount": 950})
    assert second.status_code == 200, second.content
    body = second.json()
    assert (body["status"], body["approved"]) == ("approved", True)
    assert body["args"] == {"vendor": "acme", "amount": 950}
    assert Approval.objects.get(pk=body["approval"]).grant == made
    grants.revoke(made.pk, user=approver)
    third = bot.call(session, "pay_invoice", {"vendor": "acme", "amount": 990})
    assert third.status_code == 202
