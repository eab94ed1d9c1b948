"""The supplier-quote demo agent: a pending operation from request to reply, end to end."""

import json

import pytest
from django.core import mail
from django.test import Client

from agentkit.agents import get_agent
from runs import engine
from runs.models import PendingOperation, Run, Step
from runs.pending import models as pending

pytestmark = pytest.mark.django_db

INPUT = {"supplier": "sales@acme.example", "product": "M4 bolts", "quantity": 500}


def launch(operator):
    agent = get_agent("supplier-quote")
    data, errors = agent.validate_input(INPUT)
    assert not errors
    return engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")


def sent_for(op: PendingOperation) -> list:
    """The e-mails sent by the operation's call (tests deliver into mail.outbox)."""
    return [m for m in mail.outbox if m.extra_headers.get("X-Idempotency-Key") == op.key]


def callback_token(op: PendingOperation) -> str:
    (message,) = sent_for(op)
    body = message.body
    url = next(word for word in body.split() if "/api/pending/" in word)
    return url.rsplit("/", 1)[1]


def test_the_run_waits_for_the_reply_and_finishes_with_it(operator, no_enqueue):
    run = launch(operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    assert run.status_detail == "waiting for 1 operation(s)"
    op = PendingOperation.objects.get(run=run)
    assert op.status == "open" and op.tool == "request_quote"
    assert "sales@acme.example's quote" in op.awaits
    assert len(sent_for(op)) == 1

    response = Client().post(
        f"/api/pending/{callback_token(op)}",
        json.dumps({"result": {"unit_price": "0.12", "currency": "EUR"}}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "completed"
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED  # resumed by the callback
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "sales@acme.example quotes 0.12 EUR per unit for 500."
    kinds = list(run.steps.order_by("seq").values_list("kind", "data__event"))
    assert (Step.Kind.PENDING, "completed") in kinds
    # Asked once: the e-mail went out once, the model called the tool once.
    assert run.steps.filter(kind=Step.Kind.TOOL, data__tool="request_quote").count() == 1
    assert len(mail.outbox) == 1


def test_a_repeated_callback_is_a_no_op_and_a_different_one_a_conflict(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    url = f"/api/pending/{callback_token(op)}"
    body = json.dumps({"result": {"unit_price": "1"}})
    client = Client()
    assert client.post(url, body, content_type="application/json").status_code == 200
    assert client.post(url, body, content_type="application/json").status_code == 200
    other = json.dumps({"result": {"unit_price": "2"}})
    response = client.post(url, other, content_type="application/json")
    assert response.status_code == 409
    assert "already completed" in response.json()["detail"]
    assert run.steps.filter(kind=Step.Kind.PENDING).count() == 1


def test_a_forged_token_is_not_found_and_changes_nothing(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    token = callback_token(op)
    for forged in (token[:-2] + "xx", "nonsense", op.key):
        response = Client().post(
            f"/api/pending/{forged}", '{"result": 1}', content_type="application/json"
        )
        assert response.status_code == 404
    op.refresh_from_db()
    assert op.status == "open"


def test_bad_callback_bodies_are_refused_with_a_message(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    url = f"/api/pending/{callback_token(PendingOperation.objects.get(run=run))}"
    for body in ("not json", "[1, 2]", '{"nothing": 1}', '{"error": 5}'):
        response = Client().post(url, body, content_type="application/json")
        assert response.status_code in (400, 422), (body, response.content)
        assert response.json()["detail"]
    assert PendingOperation.objects.get(run=run).status == "open"


def test_past_the_deadline_the_agent_is_told_it_timed_out(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    assert pending.sweep(now=op.deadline) == 1
    op.refresh_from_db()
    assert op.status == "timed_out"
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output.startswith("The supplier did not answer")
    assert "timed out" in run.output


def test_an_operator_marks_it_done_from_the_run_page(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    client = Client()
    client.force_login(operator)
    response = client.post(
        f"/runs/{run.pk}/pending/{op.pk}/",
        {"action": "complete", "result": '{"unit_price": "3.50", "currency": "USD"}'},
    )
    assert response.status_code in (200, 302)
    op.refresh_from_db()
    assert op.status == "completed" and op.finished_by == "operator olivia"
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert "3.50 USD" in run.output


def test_a_viewer_cannot_mark_an_operation_done(operator, viewer, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    client = Client()
    client.force_login(viewer)
    response = client.post(f"/runs/{run.pk}/pending/{op.pk}/", {"action": "complete"})
    assert response.status_code == 403
    op.refresh_from_db()
    assert op.status == "open"


def test_cancelling_the_run_cancels_what_it_awaits(operator, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.cancel(by=operator)
    assert PendingOperation.objects.get(run=run).status == "cancelled"


def test_a_run_that_waited_for_an_operation_replays_identically(operator, no_enqueue):
    from history.replay import replay

    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    op = PendingOperation.objects.get(run=run)
    pending.finish(op.pk, "completed", result={"unit_price": "0.12"}, by="callback")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    outbox = len(mail.outbox)
    result = replay(Run.objects.get(pk=run.pk))
    assert result.identical, result.as_dict()
    assert PendingOperation.objects.count() == 1  # the replay's own was rolled back
    assert len(mail.outbox) == outbox  # and it sent nothing
