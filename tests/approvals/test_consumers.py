"""The approvals stream (approvals/consumers.py): queue, dashboard list and navigation count."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from approvals.models import Approval
from runs.models import Run
from tests.runs.test_consumers import connect
from tests.runs.ui_factories import make_run

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
