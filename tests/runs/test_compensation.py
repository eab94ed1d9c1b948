"""Compensation after a partial failure (runs/compensation/models.py): what may be compensated and
when, one compensation per effect however often it is asked, the run page's section and the
API; the demo flow end to end is tests/demo/test_exchange_desk.py."""

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from agentkit.agents import CATALOGUE, Agent, get_agent, register
from agentkit.tools import REGISTRY, Blast, Compensate, tool
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.compensation import effects as compensable
from runs.compensation import models as compensation
from runs.models import Compensation, Run, SideEffect, Step

from ..demo.test_demo_flows import launch_default
from ..demo.test_exchange_desk import failed_after_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(operator, approver, no_enqueue) -> Run:
    return failed_after_refund("exchange-desk", operator, approver)


def refund_effect(run: Run) -> SideEffect:
    return run.side_effects.get(tool="issue_refund")


# --- declarations ---------------------------------------------------------------------------
def test_a_compensation_must_name_a_registered_tool_with_side_effects():
    agent = Agent(
        slug="comp-check",
        title="t",
        description="d",
        model="claude-sonnet-4-6",
        system_prompt="s",
        tools=("comp_check_effect",),
        input_form=None,
        prompt=lambda d: "",
        script=lambda d: [],
    )

    @tool(
        reversible=False,
        blast=Blast.LOW,
        name="comp_check_effect",
        compensate=Compensate("no_such_tool"),
    )
    def effect(x: int) -> dict:
        """An effect."""
        return {}

    try:
        with pytest.raises(LookupError, match=r"no_such_tool.*not a registered tool"):
            register(agent)

        @tool(reversible=True, blast=Blast.NONE, name="no_such_tool")
        def harmless(x: int) -> dict:
            """Changes nothing."""
            return {}

        with pytest.raises(ValueError, match="no side effects: it would undo nothing"):
            register(agent)
    finally:
        REGISTRY.pop("comp_check_effect", None)
        REGISTRY.pop("no_such_tool", None)


def test_a_tool_without_side_effects_cannot_declare_a_compensation():
    with pytest.raises(ValueError, match="only a call with side effects"):

        @tool(reversible=True, blast=Blast.NONE, name="comp_check_pure", compensate=Compensate("x"))
        def pure() -> dict:
            """Pure."""
            return {}

    assert "comp_check_pure" not in REGISTRY


def test_an_agent_compensating_on_failure_needs_a_tool_to_compensate():
    bare = replace(
        CATALOGUE["dispatch-desk"],
        slug="comp-nothing",
        tools=("lookup_order",),
        compensate_on_failure=True,
        on_failure="end",
    )
    with pytest.raises(ValueError, match="none of its tools declares a compensation"):
        register(bare)


def test_the_snapshot_names_compensations_and_their_tools_which_the_model_is_not_offered():
    snapshot = launch_default_snapshot("exchange-desk")
    tools = {t["name"]: t for t in snapshot["tools"]}
    assert tools["issue_refund"]["compensate"] == "reverse_refund"
    assert tools["schedule_dispatch"]["compensate"] == "cancel_dispatch"
    assert "reverse_refund" not in tools
    compensating = [t["name"] for t in snapshot["compensating_tools"]]
    assert compensating == ["cancel_dispatch", "reverse_refund"]


def launch_default_snapshot(slug: str) -> dict:
    return get_agent(slug).snapshot()


# --- the rules ------------------------------------------------------------------------------
def test_a_run_still_going_is_not_compensated(operator, approver, no_enqueue):
    run = launch_default("exchange-desk", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    with pytest.raises(compensation.CompensationError) as refused:
        compensation.request(run, None, by=operator)
    assert refused.value.status == 409
    assert "the run is waiting" in refused.value.message
    assert not Compensation.objects.exists()


def test_an_effect_is_compensated_once_however_often_it_is_asked(failed, operator):
    effect = refund_effect(failed)
    [first] = compensation.request(failed, [effect.pk], by=operator)
    steps = failed.steps.count()
    for asked in ([effect.pk], None):
        with pytest.raises(compensation.CompensationError) as refused:
            compensation.request(failed, asked, by=operator)
        assert refused.value.status == 409
    assert "asked already by olivia" in str(refused.value) or "nothing to compensate" in str(
        refused.value
    )
    assert Compensation.objects.count() == 1
    assert Run.objects.filter(trigger=Run.Trigger.COMPENSATION).count() == 1
    assert failed.steps.count() == steps  # a refusal writes nothing
    # The database holds the rule too: a second pending row for the effect cannot be written.
    with pytest.raises(IntegrityError), transaction.atomic():
        Compensation.objects.create(
            effect=effect, run=failed, tool="reverse_refund", args={}, key="x" * 64
        )
    assert first.key == compensation.compensation_key(effect.key, 1)


def test_two_runs_asking_for_one_compensation_make_it_once(failed, operator, approver):
    """The ledger key derives from the effect: a second compensating call (a duplicate
    run, a replayed request) is answered with the first one's outcome, never made again."""
    [comp] = compensation.request(failed, None, by=operator)
    child = comp.compensating_run
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    decisions.decide(
        Approval.objects.get(run=child, status="pending").pk, user=approver, decision="approve"
    )
    assert engine.advance(child.pk, time_slice=30) == Run.Status.SUCCEEDED
    reversed_at = Refund.objects.get(run_id=failed.pk).reversed_at
    # The same call under the same key in another run: the ledger reports it, nothing runs.
    twin = engine.launch(
        agent=get_agent("exchange-desk"),
        input=failed.input,
        trigger=Run.Trigger.COMPENSATION,
        parent=failed,
        provider="scripted",
        compensating=[_item(comp)],
    )
    assert engine.advance(twin.pk, time_slice=30) == Run.Status.WAITING
    decisions.decide(
        Approval.objects.get(run=twin, status="pending").pk, user=approver, decision="approve"
    )
    assert engine.advance(twin.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert SideEffect.objects.filter(key=comp.key).count() == 1
    assert Refund.objects.get(run_id=failed.pk).reversed_at == reversed_at
    tool_step = twin.steps.get(kind=Step.Kind.TOOL)
    assert tool_step.data["idempotency_key"] == comp.key


def _item(comp: Compensation) -> dict:
    return {
        "id": f"compensation-{comp.effect_id}-{comp.attempt}",
        "name": comp.tool,
        "input": comp.args,
        "llm_seq": 1,
        "index": 0,
        "args": comp.args,
        "error": None,
        "approval": None,
        "regate": True,
        "key": comp.key,
        "effect": comp.effect_id,
        "attempt": comp.attempt,
    }


def test_a_rejected_compensation_is_failed_and_may_be_asked_again(failed, operator, approver):
    [comp] = compensation.request(failed, None, by=operator)
    child = comp.compensating_run
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    decisions.decide(
        Approval.objects.get(run=child, status="pending").pk,
        user=approver,
        decision="reject",
        reason="the customer keeps the refund",
    )
    assert engine.advance(child.pk, time_slice=30) == Run.Status.FAILED
    child.refresh_from_db()
    assert child.termination_reason == Run.Termination.COMPENSATION_FAILED
    compensation.settle(child.pk)
    comp.refresh_from_db()
    assert comp.status == Compensation.Status.FAILED
    assert "the customer keeps the refund" in comp.detail
    assert Refund.objects.get(run_id=failed.pk).reversed_at is None
    # Settling again changes nothing.
    assert compensation.settle(child.pk) == []

    [again] = compensation.request(failed, None, by=operator)
    assert (again.attempt, again.key != comp.key) == (2, True)


def test_an_effect_without_a_compensation_or_not_committed_is_refused(failed, operator):
    lookup = SideEffect.objects.create(
        key="k" * 64, run=failed, step_seq=1, tool="lookup_order", args={}, status="committed"
    )
    with pytest.raises(compensation.CompensationError) as refused:
        compensation.request(failed, [lookup.pk], by=operator)
    assert (refused.value.status, "declares no compensation" in refused.value.message) == (
        409,
        True,
    )
    unknown = SideEffect.objects.create(
        key="u" * 64, run=failed, step_seq=1, tool="issue_refund", args={}, status="unknown"
    )
    with pytest.raises(compensation.CompensationError) as refused:
        compensation.request(failed, [unknown.pk], by=operator)
    assert refused.value.status == 409 and "only a committed effect" in refused.value.message
    with pytest.raises(compensation.CompensationError) as refused:
        compensation.request(failed, [999999], by=operator)
    assert refused.value.status == 404


def test_a_result_the_mapping_cannot_read_is_a_clear_422(failed, operator):
    SideEffect.objects.filter(pk=refund_effect(failed).pk).update(
        result={"result": {"outcome": "confirmed by an operator"}}
    )
    with pytest.raises(compensation.CompensationError) as refused:
        compensation.request(failed, None, by=operator)
    assert refused.value.status == 422
    assert "cannot be made from it (KeyError" in refused.value.message


def test_an_agent_that_compensates_on_failure_asks_when_its_run_fails(
    operator, approver, no_enqueue, eager, django_capture_on_commit_callbacks
):
    # The task is sent once the run's failure is committed.
    with django_capture_on_commit_callbacks(execute=True):
        run = failed_after_refund("exchange-desk-auto", operator, approver)
    [comp] = Compensation.objects.filter(run=run)
    assert comp.automatic and comp.requested_by is None
    step = run.steps.get(kind=Step.Kind.OPERATOR, data__event=compensation.REQUESTED)
    assert step.data["by"] == "the agent (compensate_on_failure)"
    # Still gated.
    child = comp.compensating_run
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    assert Approval.objects.get(run=child, status="pending").tool == "reverse_refund"
    # The task again (a duplicate message, the sweep) asks nothing more.
    assert compensation.compensate_automatically(run.pk) == []
    assert Compensation.objects.filter(run=run).count() == 1


def test_a_cancelled_compensation_run_settles_as_failed(
    failed, operator, eager, django_capture_on_commit_callbacks
):
    [comp] = compensation.request(failed, None, by=operator)
    with django_capture_on_commit_callbacks(execute=True):
        comp.compensating_run.cancel(by=operator, reason="changed my mind")
    comp.refresh_from_db()
    assert comp.status == Compensation.Status.FAILED  # settled by the task on commit
    assert "cancelled" in comp.detail
    assert compensable.effects(failed)[0].state == "failed"


# --- the run page ---------------------------------------------------------------------------
def test_the_run_page_offers_compensate_and_a_second_click_is_refused(failed, operator):
    client = Client()
    client.force_login(operator)
    page = client.get(f"/runs/{failed.pk}/").content.decode()
    effect = refund_effect(failed)
    assert f'id="compensate-{effect.pk}"' in page
    assert 'data-state="not compensated"' in page

    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-compensation"}
    first = client.post(f"/runs/{failed.pk}/compensate/", {"effect": effect.pk}, **headers)
    assert first.status_code == 200
    assert 'data-state="pending"' in first.content.decode()
    second = client.post(f"/runs/{failed.pk}/compensate/", {"effect": effect.pk}, **headers)
    assert second.status_code == 409
    assert "asked already by olivia" in second.content.decode()
    assert Compensation.objects.count() == 1
    bad = client.post(f"/runs/{failed.pk}/compensate/", {"effect": "x"}, **headers)
    assert bad.status_code == 422


def test_a_viewer_sees_the_effects_but_may_not_compensate(failed, viewer):
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/runs/{failed.pk}/").content.decode()
    assert 'id="compensation-table"' in page and 'data-state="not compensated"' in page
    assert 'id="compensate-' not in page
    refused = client.post(f"/runs/{failed.pk}/compensate/", {"effect": "all"})
    assert refused.status_code == 403
    assert not Compensation.objects.exists()


def test_the_compensate_form_needs_the_csrf_token(failed, operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    refused = client.post(f"/runs/{failed.pk}/compensate/", {"effect": "all"})
    assert refused.status_code == 403
    assert not Compensation.objects.exists()


def test_the_audit_view_shows_the_effect_beside_its_compensation(failed, operator, approver):
    [comp] = compensation.request(failed, None, by=operator)
    child = comp.compensating_run
    engine.advance(child.pk, time_slice=30)
    decisions.decide(
        Approval.objects.get(run=child, status="pending").pk, user=approver, decision="approve"
    )
    engine.advance(child.pk, time_slice=30)
    compensation.settle(child.pk)
    client = Client()
    client.force_login(operator)
    page = client.get(f"/audit/runs/{failed.pk}/").content.decode()
    row = page.split(f'id="effect-{comp.effect_id}"')[1].split("</tr>")[0]
    assert "Refund 40.00 on order 13" in row
    assert "reverse_refund" in row and 'data-state="compensated"' in row
    assert f"/runs/{child.pk}/" in row
    assert "compensate-" not in row  # read-only


# --- the API --------------------------------------------------------------------------------
def test_the_api_lists_and_requests_compensations(failed, operator, viewer):
    client = Client()
    client.force_login(operator)
    url = f"/api/runs/{failed.pk}/compensations"
    listed = client.get(url).json()
    [effect] = listed["effects"]
    assert listed["offered"] is True
    assert (effect["tool"], effect["compensate_tool"], effect["state"], effect["requestable"]) == (
        "issue_refund",
        "reverse_refund",
        "not compensated",
        True,
    )
    made = client.post(url, {"effects": [effect["id"]]}, content_type="application/json")
    assert made.status_code == 201
    [after] = made.json()["effects"]
    assert after["state"] == "pending" and after["compensations"][0]["requested_by"] == "olivia"
    again = client.post(url, {"effects": [effect["id"]]}, content_type="application/json")
    assert again.status_code == 409 and "asked already" in again.json()["detail"]
    extra = client.post(url, {"effects": [1], "x": 1}, content_type="application/json")
    assert extra.status_code == 422
    missing = client.post(url, {"effects": [987654]}, content_type="application/json")
    assert missing.status_code in (404, 409)

    reader = Client()
    reader.force_login(viewer)
    assert reader.get(url).status_code == 200
    assert reader.post(url, {}, content_type="application/json").status_code == 403
    assert json.loads(reader.get(url).content)["effects"][0]["state"] == "pending"


def test_the_system_check_names_a_compensation_that_undoes_nothing():
    assert compensable.check_declarations() == []

    @tool(
        reversible=False,
        blast=Blast.LOW,
        name="comp_check_orphan",
        compensate=Compensate("list_tables"),
    )
    def orphan() -> dict:
        """An effect whose compensation changes nothing."""
        return {}

    try:
        [error] = compensable.check_declarations()
        assert error.id == "runs.E001" and "list_tables" in error.msg
        assert "has no side effects" in error.msg
    finally:
        REGISTRY.pop("comp_check_orphan", None)


def test_the_audit_list_says_what_each_compensation_came_to(failed, operator):
    compensation.request(failed, None, by=operator)
    client = Client()
    client.force_login(operator)
    page = client.get("/audit/").content.decode()
    row = page.split(f'data-run-id="{failed.pk}"')[1].split("</tr>")[0]
    assert 'data-compensation="pending"' in row and "reverse_refund: pending" in row


def test_the_sweep_sends_again_what_a_lost_message_left_undone(
    operator, approver, no_enqueue, monkeypatch
):
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "runs.queue.send_compensation", lambda task, run_id: sent.append((task, str(run_id)))
    )
    # An automatic request whose message was lost: the run failed, nothing was asked.
    auto = failed_after_refund("exchange-desk-auto", operator, approver)
    # A compensation run that ended, its settlement lost.
    failed = failed_after_refund("exchange-desk", operator, approver)
    [comp] = compensation.request(failed, None, by=operator)
    child = comp.compensating_run
    child.cancel(by=operator)
    later = timezone.now() + timedelta(minutes=5)
    sent.clear()
    assert compensation.sweep(now=later) == 2
    assert sorted(sent) == sorted(
        [
            ("runs.tasks.compensate_on_failure", str(auto.pk)),
            ("runs.tasks.settle_compensations", str(child.pk)),
        ]
    )
    # Once handled, nothing is sent again.
    compensation.settle(child.pk)
    compensation.compensate_automatically(auto.pk)
    sent.clear()
    assert compensation.sweep(now=later) == 0 and sent == []


def test_an_automatic_request_with_nothing_to_undo_says_why_once(operator, approver, no_enqueue):
    # Cancelled before anything committed: nothing is asked, and nothing is said.
    quiet = launch_default("exchange-desk-auto", operator)
    quiet.cancel(by=operator)
    assert compensation.compensate_automatically(quiet.pk) == []
    assert not quiet.steps.filter(data__event=compensation.REFUSED).exists()
    # Its refund reversed already by hand: the agent's own request finds nothing left.
    run = failed_after_refund("exchange-desk-auto", operator, approver)
    [comp] = compensation.request(run, None, by=operator)
    Compensation.objects.filter(pk=comp.pk).update(status=Compensation.Status.COMPENSATED)
    for _ in range(2):
        assert compensation.compensate_automatically(run.pk) == []
    [refused] = run.steps.filter(data__event=compensation.REFUSED)
    assert "nothing to compensate" in refused.data["detail"]
