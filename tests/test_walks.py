"""The two walks through the code a newcomer follows first, measured (tests/support/walks.py):
an external agent's gated call from the gateway API to the answer whether a person decides,
and the Approve button to the approved call running in the resumed run.

`WALKS=1 uv run pytest tests/test_walks.py -s` prints each walk, file by file.
"""

import os

import pytest
from django.urls import reverse

from agentkit.agents import get_agent
from agentkit.tools import get_tool
from approvals.models import Approval
from runs import engine
from runs.models import Run, args_hash
from tests.gateway.conftest import INVOICE_LIMIT_ARGS, AgentClient, make_agent
from tests.support.walks import Walk

pytestmark = pytest.mark.django_db


def _show(walk: Walk, title: str) -> None:
    if os.environ.get("WALKS"):
        print("\n" + walk.report(title))


def test_an_external_gated_call_walks_to_a_person(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    with Walk("gateway/api.py").recording() as walk:
        response = bot.call(session, "pay_invoice", INVOICE_LIMIT_ARGS)
    assert response.status_code == 202, response.content
    _show(walk, "external gated call")
    assert walk.files[0] == "gateway/api.py"
    # The gate decision is asked twice, in order (the policy's verdict, then who settles it),
    # not handed back and forth between the engine's gates, grants and permissions.
    assert walk.entered("approvals/gates/cascade.py") == 2
    assert walk.entered("approvals/engine_gates.py") <= 1
    # The call is checked in one question (its tool, hints and arguments), and the session
    # is locked once for its limits and the call.
    assert walk.entered("gateway/call_tools.py") == 1
    assert [fn for _, fn in walk.entries].count("locked") == 1


def test_the_approve_button_walks_to_the_resumed_step(client, operator, approver, no_enqueue):
    agent = get_agent("sql-analyst")
    data, _ = agent.validate_input({"question": "Revenue?", "report_to": "boss@example.com"})
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    client.force_login(approver)
    shown = args_hash(approval.tool, approval.args)
    tool = get_tool(approval.tool)
    with Walk("approvals/views.py", stop_at=tool.fn.__code__).recording() as walk:
        response = client.post(
            reverse("approvals:decide", args=[approval.pk]),
            {"decision": "approve", "shown_args_hash": shown, "confirmed": shown},
            HTTP_HX_REQUEST="true",
        )
        engine.advance(run.pk, time_slice=30)
    assert response.status_code == 200, response.content
    _show(walk, "Approve button")
    assert walk.stopped, "the approved call never ran"
    assert walk.files[0] == "approvals/views.py"
    # The screen asks whether to show the buttons; the decision asks the role before reading
    # anything, then one question under its locks.
    assert walk.entered("approvals/permissions.py") <= 3
