"""The PII guard in the engine: calls whose arguments leave the system and final answers,
redacted, gated (the approval lists what was found) or blocked; every finding a guard step
with its values masked."""

import dataclasses

import pytest
from django.db import transaction
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from agentkit.pii import PiiPolicy
from approvals.evidence.card import pii_findings
from approvals.models import Approval
from runs import engine
from runs.models import Run, SideEffect, Step, args_hash

from .. import harness

pytestmark = pytest.mark.django_db

CARD = "4242 4242 4242 4242"
MAIL = "jane.doe@example.com"


@pytest.fixture
def start(test_agent, no_enqueue, script):
    """Launch a run of the test agent with this PII policy and these model turns, and drive
    it until it stops."""

    def make(policy: PiiPolicy, turns: list) -> tuple[Run, object]:
        provider = script(turns)
        agent = dataclasses.replace(test_agent, pii=policy)
        run = engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")
        engine.advance(run.pk, time_slice=30)
        run.refresh_from_db()
        return run, provider

    return make


def guard_steps(run: Run) -> list[dict]:
    return list(
        run.steps.filter(kind=Step.Kind.GUARD).order_by("seq").values_list("data", flat=True)
    )


def decide(run: Run, user, **decision) -> None:
    """What the approvals decision service does, under the run's row lock."""
    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(run=run, status=Approval.Status.PENDING).update(
            decided_at=timezone.now(), decided_by=user, **decision
        )
        assert locked.resume("all decisions made")


def test_redacted_arguments_are_what_runs_and_what_the_ledger_and_timeline_hold(start):
    run, _ = start(
        PiiPolicy(on_tool_args="redact"),
        [[tool_use("t_notify", to=f"card {CARD} of {MAIL}")], [text("Done.")]],
    )
    assert run.status == Run.Status.SUCCEEDED
    (guard,) = guard_steps(run)
    assert guard["action"] == "redacted" and guard["tool"] == "t_notify"
    assert guard["findings"] == [
        {"kind": "card", "field": "to", "masked": "**** **** **** 4242"},
        {"kind": "email", "field": "to", "masked": "j***@example.com"},
    ]
    redacted = "card [card redacted] of [email redacted]"
    (tool_step,) = harness.tool_steps(run, "t_notify")
    assert tool_step["args"] == {"to": redacted}
    assert tool_step["result"] == {"notified": redacted}  # what the tool received
    effect = SideEffect.objects.get(run=run)
    assert effect.args == {"to": redacted}
    assert (
        effect.key
        == tool_step["idempotency_key"]
        == engine.idempotency_key(run.pk, effect.step_seq, 0, "t_notify", {"to": redacted})
    )
    # The full values are nowhere in the guard step or what the tool got.
    assert CARD not in str(guard) and MAIL not in str(guard)


def test_a_call_without_side_effects_is_not_scanned_unless_named(start):
    run, _ = start(
        PiiPolicy(on_tool_args="block"), [[tool_use("t_echo", text=MAIL)], [text("Done.")]]
    )
    assert run.status == Run.Status.SUCCEEDED and not guard_steps(run)
    run, _ = start(
        PiiPolicy(on_tool_args="block", tools=("t_echo",)),
        [[tool_use("t_echo", text=MAIL)], [text("Done.")]],
    )
    assert [g["action"] for g in guard_steps(run)] == ["blocked"]


def test_a_blocked_call_is_refused_and_the_model_told_why(start):
    run, provider = start(
        PiiPolicy(on_tool_args="block"),
        [[tool_use("t_notify", to=MAIL)], [text("I will not send it.")]],
    )
    assert run.status == Run.Status.SUCCEEDED
    assert harness.CALLS["t_notify"] == 0
    assert not SideEffect.objects.filter(run=run).exists()
    (step,) = harness.tool_steps(run, "t_notify")
    assert step["is_error"] and step["error"].startswith("blocked by the PII guard: email in to")
    assert step["args"] == {"to": "[email redacted]"}  # the refused call, redacted
    told = provider.requests[1].messages[-1]["content"]
    assert "blocked by the PII guard" in str(told), told
    assert [g["action"] for g in guard_steps(run)] == ["blocked"]


def test_false_positives_pass_untouched(start):
    args = "order 1234567890123, total 1234.56 on 2024-03-15, ref 4242 4242 4242 4241"
    run, _ = start(PiiPolicy(on_tool_args="block"), [[tool_use("t_notify", to=args)], [text("ok")]])
    assert not guard_steps(run)
    assert harness.tool_steps(run, "t_notify")[0]["result"] == {"notified": args}


def test_a_gated_call_shows_the_findings_and_runs_once_approved(start, plain_user):
    run, _ = start(
        PiiPolicy(on_tool_args="gate"),
        [[tool_use("t_notify", to="call +44 20 7946 0958")], [text("Sent.")]],
    )
    assert run.status == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.explanation.startswith("personal data leaving the system (phone in to)")
    assert pii_findings(approval) == [
        {"kind": "phone", "field": "to", "masked": "+44 ** **** **58"}
    ]
    assert [g["action"] for g in guard_steps(run)] == ["gated"]
    assert harness.CALLS["t_notify"] == 0
    decide(run, plain_user, status=Approval.Status.APPROVED)
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    # Approved as shown: the real number went out (the approver saw it on the card; the ledger
    # keeps the call made), while the timeline keeps it masked.
    assert SideEffect.objects.get(run=run, tool="t_notify").args == {"to": "call +44 20 7946 0958"}
    assert harness.tool_steps(run, "t_notify")[0]["args"] == {"to": "call +44 ** **** **58"}


def test_an_output_is_redacted(start):
    run, _ = start(PiiPolicy(on_output="redact"), [[text(f"Reach her at {MAIL}.")]])
    assert run.status == Run.Status.SUCCEEDED
    assert run.output == "Reach her at [email redacted]."
    (guard,) = guard_steps(run)
    assert guard["where"] == "output" and guard["action"] == "redacted"
    # The guard step is written with the model's answer and before the end.
    kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))[-3:]
    assert kinds == [Step.Kind.LLM, Step.Kind.GUARD, Step.Kind.STATUS]


def test_an_output_is_blocked(start):
    run, _ = start(PiiPolicy(on_output="block"), [[text(f"Card {CARD}.")]])
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.BLOCKED
    assert run.output == "" and "card in output" in run.status_detail


def test_a_gated_output_succeeds_only_when_a_person_approves_it(start, plain_user):
    run, _ = start(PiiPolicy(on_output="gate"), [[text(f"Write to {MAIL}.")]])
    assert run.status == Run.Status.WAITING and run.output == ""
    approval = Approval.objects.get(run=run)
    assert approval.tool == "publish_final_answer"
    assert approval.args == {"text": f"Write to {MAIL}."}
    assert pii_findings(approval)[0]["masked"] == "j***@example.com"
    # The approver edits the answer: that is what the run ends with.
    edited = {"text": "Write to the customer."}
    decide(
        run,
        plain_user,
        status=Approval.Status.APPROVED,
        edited_args=edited,
        approved_args_hash=args_hash("publish_final_answer", edited),
    )
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.output == "Write to the customer."


def test_a_rejected_output_ends_the_run_blocked(start, plain_user):
    run, _ = start(PiiPolicy(on_output="gate"), [[text(f"Write to {MAIL}.")]])
    decide(run, plain_user, status=Approval.Status.REJECTED, reason="no addresses")
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.BLOCKED
    assert "final answer rejected by olivia: no addresses" in run.status_detail
    assert run.output == ""


def test_agents_without_a_policy_never_scan(start, monkeypatch):
    from agentkit import pii

    def boom(*args, **kwargs):
        raise AssertionError("scanned")

    monkeypatch.setattr(pii, "scan", boom)
    run, _ = start(None, [[tool_use("t_notify", to=MAIL)], [text(f"Mail {MAIL}")]])
    assert run.status == Run.Status.SUCCEEDED and run.output == f"Mail {MAIL}"


def test_a_held_output_no_policy_asks_about_ends_the_run_blocked(start, monkeypatch):
    monkeypatch.setattr("approvals.engine_gates.gate_for_call", lambda *args, **kwargs: None)
    run, _ = start(PiiPolicy(on_output="gate"), [[text(f"Write to {MAIL}.")]])
    assert run.termination_reason == Run.Termination.BLOCKED, run.status_detail
    assert run.output == "" and "never put to a person" in run.status_detail


def test_personal_data_is_masked_on_every_surface_and_the_chain_still_verifies(
    start, viewer, approver, client
):
    # The model says the card and the phone in its own words and puts the phone in a gated
    # call: the timeline keeps them masked, so the run page, its live frames (the same step
    # fragment), the steps API, both exports, the approval's evidence and notifications all
    # show the masked form. The decision card shows the call itself, once, to its decider.
    from approvals.notify import message

    phone = "+44 20 7946 0958"
    run, _ = start(
        PiiPolicy(on_tool_args="gate"),
        [
            [text(f"Card {CARD}, phone {phone}."), tool_use("t_notify", to=f"call {phone}")],
            [text("Sent.")],
        ],
    )
    assert run.status == Run.Status.WAITING
    assert run.verify_chain() == (True, None)
    stored = str(list(run.steps.values_list("data", flat=True)))
    assert CARD not in stored and phone not in stored
    assert "**** **** **** 4242" in stored and "+44 ** **** **58" in stored

    client.force_login(viewer)
    surfaces = {
        "run page": f"/runs/{run.pk}/",
        "steps API": f"/api/runs/{run.pk}/steps",
        "export JSON": f"/runs/{run.pk}/export.json",
        "export JSONL": f"/runs/{run.pk}/export.jsonl",
    }
    approval = Approval.objects.get(run=run)
    for name, url in surfaces.items():
        response = client.get(url)
        assert response.status_code == 200, name
        body = b"".join(response) if response.streaming else response.content
        assert CARD not in body.decode() and "7946 0958" not in body.decode(), name
    client.force_login(approver)
    card = client.get(f"/approvals/{approval.pk}/").content.decode()
    evidence = card[card.index('id="evidence"') :]
    assert CARD not in evidence and "7946 0958" not in evidence
    assert "7946 0958" in card[: card.index('id="evidence"')]  # the call, for the decision
    assert "7946 0958" not in str(message.payload(approval))
    assert "7946 0958" not in str(message.slack_payload(approval))
