"""The approvals stream (approvals/consumers.py): queue, dashboard list and navigation count."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from approvals.models import Approval
from runs.models import Run
from tests.runs.factories import make_run
from tests.runs.test_consumers import connect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_approvals_stream_sends_the_current_count_on_connect(viewer, operator, no_enqueue):
    # A page rendered just before an approval opened must not keep showing the old count.
    run = await sync_to_async(make_run)(operator, status=Run.Status.WAITING)
    await sync_to_async(Approval.objects.create)(
        run=run,
        gate_seq=1,
        llm_seq=1,
        kind=Approval.Kind.QUESTION,
        tool="ask_operator",
        question="Which region?",
        explanation="the agent asked",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    communicator, connected = await connect("/ws/approvals/", viewer)
    assert connected
    first = await communicator.receive_from(timeout=5)
    assert '<span id="nav-pending-count" class="count" hx-swap-oob="true">1</span>' in first
    await communicator.disconnect()


async def _question(operator) -> Approval:
    run = await sync_to_async(make_run)(operator, status=Run.Status.WAITING)
    return await sync_to_async(Approval.objects.create)(
        run=run,
        gate_seq=1,
        llm_seq=1,
        kind=Approval.Kind.QUESTION,
        tool="ask_operator",
        question="Which region?",
        explanation="the agent asked",
        expires_at=timezone.now() + timedelta(hours=1),
    )


async def _receive_with(communicator, needle: str) -> str:
    from tests.runs.test_consumers import receive_until

    return (await receive_until(communicator, lambda m: needle in m))[-1]


async def test_a_decision_screen_gets_its_approval_state_on_every_connect(
    approver, operator, admin_user, no_enqueue
):
    # Decided while the screen's socket was down (a server restart): the (re)connect itself
    # says so, with who and when, so the page turns its controls off without a reload.
    from approvals import decisions

    approval = await _question(operator)
    await sync_to_async(decisions.decide)(
        approval.pk, user=admin_user, decision="answer", answer="EU"
    )
    communicator, connected = await connect(f"/ws/approvals/?approval={approval.pk}", approver)
    assert connected
    state = await _receive_with(communicator, f'id="approval-state-{approval.pk}"')
    assert 'data-final="answered"' in state and f"by {admin_user.username}" in state
    await communicator.disconnect()


async def test_presence_and_claims_follow_the_open_screens(
    approver, admin_user, operator, no_enqueue
):
    from django.test import Client

    from approvals.models import ApprovalWatch

    approval = await _question(operator)
    path = f"/ws/approvals/?approval={approval.pk}"
    first, _ = await connect(path, approver)
    await _receive_with(first, f'id="approval-presence-{approval.pk}"')
    second, _ = await connect(path, admin_user)
    # The first screen learns the second opened it.
    seen = await _receive_with(first, f'data-user="{admin_user.username}"')
    assert "is on it" not in seen

    # "I'm on it" on the second screen (a CSRF-checked POST): the first sees the claim.
    client = Client()
    await sync_to_async(client.force_login)(admin_user)
    response = await sync_to_async(client.post)(
        f"/approvals/{approval.pk}/claim/", {"claim": "claim"}
    )
    assert response.status_code == 200 and "You are on it" in response.content.decode()
    claimed = await _receive_with(first, "is on it")
    assert f'data-user="{admin_user.username}">{admin_user.username} is on it' in claimed

    # The claim blocks nobody: the first approver still decides, and the claim is over.
    from approvals import decisions

    await sync_to_async(decisions.decide)(
        approval.pk, user=approver, decision="reject", reason="no"
    )
    # (the decision's event is sent by the caller's commit hook in the app; here directly)
    from runs import events

    await sync_to_async(events.publish_approval)(approval.pk)
    after = await _receive_with(second, f'id="approval-presence-{approval.pk}"')
    assert "is on it" not in after and "I&#x27;m on it" not in after

    # Closing a screen removes its viewer (and any claim) for the others.
    await second.disconnect()
    from tests.runs.test_consumers import receive_until

    await receive_until(first, lambda m: "approval-presence" in m and admin_user.username not in m)
    await first.disconnect()
    assert not await sync_to_async(ApprovalWatch.objects.exists)()
