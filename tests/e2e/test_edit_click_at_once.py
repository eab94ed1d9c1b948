"""Type into an argument field, then press Edit and approve at once, without leaving the field.

Leaving the field (the press's mousedown does) fires `change`, which asks the server for one
more preview of the edit. The press used to land on a button disabled while that preview was
in flight, and nothing was sent. Now the press waits for the preview of exactly the values in
the fields, then goes: the approval is approved with the edited arguments and the run goes on.
"""

import json
from decimal import Decimal
from urllib.parse import parse_qs

import pytest
from playwright.sync_api import expect

from .pages import decide, expect_status, launch_refund

pytestmark = pytest.mark.e2e

LONG_REASON = "The parcel arrived with a scratched lid and a dented corner; " * 2  # a textarea
EDITED_REASON = "Scratched lid only: the corner was already dented when it was sold"


@pytest.mark.parametrize(
    ("field", "selector", "value", "edited"),
    [
        ("order_id", "input[type=number][name=arg_order_id]", "21", {"order_id": 21}),
        ("reason", "textarea[name=arg_reason]", EDITED_REASON, {"reason": EDITED_REASON}),
    ],
)
def test_edit_and_approve_pressed_straight_after_typing_approves_the_edit(
    server, login, field, selector, value, edited
):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=22, amount="4.00", reason=LONG_REASON.strip())
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)

    approver = login("approver")
    approver.goto(f"/approvals/{approval_id}/")
    page = approver.page
    expect(page.locator(selector)).to_be_visible()  # the field has the kind under test
    # What the page asked the server, in order: previews answered, and the decision sent.
    seen: list[tuple[str, dict]] = []

    def on_response(response):
        if response.url.endswith("/edit-preview/"):
            seen.append(("preview", parse_qs(response.request.post_data or "")))

    def on_request(request):
        if request.url.endswith("/decide/"):
            seen.append(("decide", parse_qs(request.post_data or "")))

    page.on("response", on_response)
    page.on("request", on_request)
    with page.expect_response(lambda r: r.url.endswith(f"/approvals/{approval_id}/decide/")) as r:
        # Type, then press: focus is still in the field when the press begins.
        decide(approver, approval_id, "edit-approve", args={field: value}, navigate=False)
    assert r.value.status == 200
    expect(page.locator("#decision-outcome")).to_contain_text("Approved with your edits")
    # One press, one decision, sent once the preview of exactly its values was on screen.
    kinds = [kind for kind, _ in seen]
    assert kinds.count("decide") == 1, kinds
    sent = seen[kinds.index("decide")][1]
    assert sent["decision"] == ["edit_approve"] and sent[f"arg_{field}"] == [value]
    before = [data for kind, data in seen[: kinds.index("decide")] if kind == "preview"]
    assert before and before[-1][f"arg_{field}"] == [value], seen

    ((status, edited_args),) = server.query(
        "SELECT status, edited_args FROM approvals_approval WHERE id = ?", server.key(approval_id)
    )
    proposed = {"order_id": 22, "amount": "4.00", "reason": LONG_REASON.strip()}
    assert status == "approved"
    # A JSON column: text from SQLite, already decoded by psycopg from Postgres.
    if isinstance(edited_args, str):
        edited_args = json.loads(edited_args)
    assert edited_args == {**proposed, **edited}

    # The run goes on (its customer e-mail is gated too) and refunds exactly the edit.
    email = server.pending_approval(run_id, tool="send_customer_email")
    decide(approver, email, "approve")
    expect_status(operator.page, "succeeded")
    final = {**proposed, **edited}
    assert server.refunds(run_id) == [(final["order_id"], Decimal("4.00"), final["reason"])]
    assert not operator.console_errors and not approver.console_errors


def test_an_edit_policy_refuses_pressed_straight_after_typing_is_refused_not_lost(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=23, amount="40.00", reason="Late delivery")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)

    approver = login("approver")
    approver.goto(f"/approvals/{approval_id}/")
    page = approver.page
    # Over the agent's refund limit: an escalation, which no edit may make.
    with page.expect_response(lambda r: r.url.endswith(f"/approvals/{approval_id}/decide/")) as r:
        decide(approver, approval_id, "edit-approve", args={"amount": "600"}, navigate=False)
    assert r.value.status == 422
    expect(page.locator("#decision-result")).to_contain_text("edit refused")
    expect(page.locator("#arg-diff")).to_have_attribute("data-valid", "false")
    assert server.query(
        "SELECT status, edited_args FROM approvals_approval WHERE id = ?", server.key(approval_id)
    ) == [("pending", None)]
    assert server.refunds(run_id) == [] and server.run_status(run_id) == "waiting"
    # The decision stays open for a press that can go through.
    expect(page.locator("button#reject")).to_be_enabled()
