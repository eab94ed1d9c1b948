"""An approval approves the call the approver was shown, and only by the button they meant.

A transfer of 800 is gated; the approver types 450 into the amount. Pressing Approve then must
approve neither the 800 on record nor the 450 on screen; a decision carrying the hash of
another call is a conflict; the preview of an edit is the server's own reading of the fields.
"""

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import Approval, ApprovalVote
from runs.models import Run, Step, args_hash
from tests.conftest import make_user

from .conftest import EXECUTED, drive, gated

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}


@pytest.fixture
def approver_client(django_user_model) -> Client:
    client = Client()
    client.force_login(make_user(django_user_model, "arthur-approver", "approver"))
    return client


def shown(approval: Approval) -> str:
    return args_hash(approval.tool, approval.args)


def form(approval: Approval, decision: str, **fields) -> dict:
    """The decision form as the screen posts it: every argument field, the hash it showed."""
    data = {"decision": decision, "args_form": "1", "shown_args_hash": shown(approval)}
    if decision == "approve":
        data["confirmed"] = shown(approval)  # the second press on an irreversible call
    data.update({f"arg_{k}": v for k, v in approval.args.items()})
    data.update({f"arg_{k}": v for k, v in fields.items()})
    return data


def post(client: Client, approval: Approval, data: dict, *, hx: bool = True):
    headers = {"HTTP_HX_REQUEST": "true"} if hx else {}
    return client.post(reverse("approvals:decide", args=[approval.pk]), data, **headers)


def assert_undecided(run: Run, approval: Approval) -> None:
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.edited_args is None and approval.approved_args_hash in ("", None)
    assert not ApprovalVote.objects.filter(approval=approval).exists()
    assert not run.steps.filter(kind=Step.Kind.DECISION).exists()
    assert run.status == Run.Status.WAITING
    drive(run)  # a worker that picks the run up anyway finds nothing approved to run
    assert run.status == Run.Status.WAITING
    assert EXECUTED == []


# --- (a) Approve with edited fields ---
@pytest.mark.parametrize("hx", [True, False])
def test_a_plain_approve_of_edited_fields_is_refused_and_nothing_runs(
    approver_client, operator, no_enqueue, hx
):
    run, approval = gated("test-payer", BIG, by=operator)

    response = post(approver_client, approval, form(approval, "approve", amount="450"), hx=hx)

    assert response.status_code == 422
    html = response.content.decode()
    assert "Not approved: you changed amount but pressed Approve" in html
    assert "Nothing was executed" in html and "Edit and approve" in html
    assert no_enqueue == [str(run.pk)]  # only the launch: the run was not woken
    assert_undecided(run, approval)
    if not hx:  # the full page keeps what was typed and shows the server's diff of it
        assert 'value="450"' in html
        assert "<del>800.00</del> → <ins>450</ins>" in html


def test_an_approve_without_the_shown_call_is_refused(approver_client, operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    data = form(approval, "approve")
    del data["shown_args_hash"]

    response = post(approver_client, approval, data)

    assert response.status_code == 422
    assert "does not say which call you were shown" in response.content.decode()
    assert_undecided(run, approval)


def test_approve_with_the_fields_as_shown_runs_the_proposed_call(
    approver_client, operator, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)

    response = post(approver_client, approval, form(approval, "approve"))

    assert response.status_code == 200, response.content
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.edited_args is None
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "acme", "amount": "800.00"})]


def test_edit_and_approve_of_the_same_fields_runs_the_edit(approver_client, operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)

    response = post(approver_client, approval, form(approval, "edit_approve", amount="450"))

    assert response.status_code == 200, response.content
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "acme", "amount": "450"})]


# --- (b) the hash of another call ---
@pytest.mark.parametrize("decision", ["approve", "edit_approve"])
def test_a_form_decision_on_another_call_is_409(approver_client, operator, no_enqueue, decision):
    run, approval = gated("test-payer", BIG, by=operator)
    data = form(approval, decision)
    data["shown_args_hash"] = args_hash(approval.tool, {**approval.args, "amount": "8000.00"})

    response = post(approver_client, approval, data)

    assert response.status_code == 409
    assert "not the call waiting for approval" in response.content.decode()
    assert_undecided(run, approval)


def test_an_api_approve_on_another_call_is_409_and_on_the_shown_one_goes_through(
    approver_client, operator, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)
    url = f"/api/approvals/{approval.pk}/decision"
    detail = approver_client.get(f"/api/approvals/{approval.pk}").json()
    assert detail["arguments_hash"] == shown(approval)

    stale = args_hash(approval.tool, {"to": "acme", "amount": "80.00"})
    for body in (
        {"decision": "approve", "shown_args_hash": stale},
        {"decision": "approve", "shown_args_hash": stale, "arguments": {"amount": "40"}},
    ):
        response = approver_client.post(url, body, content_type="application/json")
        assert response.status_code == 409, response.content
        assert "not the call waiting for approval" in response.json()["detail"]
    assert_undecided(run, approval)

    body = {"decision": "approve", "shown_args_hash": detail["arguments_hash"]}
    response = approver_client.post(url, body, content_type="application/json")
    assert response.status_code == 200, response.content
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "acme", "amount": "800.00"})]


# --- (c) the preview of an edit ---
def preview(client: Client, approval: Approval, **fields):
    data = form(approval, "", **fields)
    del data["decision"]
    return client.post(reverse("approvals:edit_preview", args=[approval.pk]), data)


def test_the_edit_preview_is_the_servers_parse_of_the_fields(approver_client, operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)

    unchanged = preview(approver_client, approval).content.decode()
    assert 'id="arg-diff"' in unchanged and 'data-edited="false"' in unchanged
    assert "No change." in unchanged

    # The validated edit: what the decision would execute, in the tool's own types.
    html = preview(approver_client, approval, amount=" 450.50 ", to="globex").content.decode()
    assert 'data-edited="true" data-valid="true"' in html
    assert (
        '<li data-arg="amount"><code>amount</code>: <del>800.00</del> → <ins>450.50</ins>' in html
    )
    assert "<del>acme</del> → <ins>globex</ins>" in html

    # Text that reads as the proposed call changes nothing.
    same = preview(approver_client, approval, amount=" 800.00 ").content.decode()
    assert 'data-edited="true" data-valid="true"' in same
    assert "nothing would change" in same
    assert_undecided(run, approval)


def test_the_edit_preview_shows_errors_for_invalid_and_refused_edits(
    approver_client, operator, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)

    response = preview(approver_client, approval, amount="lots")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-valid="false"' in html and "<code>amount</code>" in html
    assert "<ins>" not in html

    # Over the agent's policy limits: refused by the rule the decision applies.
    html = preview(approver_client, approval, amount="9000", to="initech").content.decode()
    assert 'data-valid="false"' in html and "edit refused" in html
    assert "not on the allow-list" in html
    assert_undecided(run, approval)


def test_the_edit_preview_needs_the_approver_role(django_user_model, operator, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    viewer = Client()
    viewer.force_login(make_user(django_user_model, "vera", "viewer"))
    assert preview(viewer, approval, amount="1").status_code == 403
    url = reverse("approvals:edit_preview", args=[approval.pk])
    assert viewer.get(url).status_code in (403, 405)
