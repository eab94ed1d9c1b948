"""What an operator expects of sessions nobody uses any more: a deactivated agent's pending
calls are cancelled (its waiting agent is told why) and none can be approved; a session
opened and left `running` ends after the idle time (AGENTOPS_EXTERNAL_SESSION_IDLE_SECONDS)."""

import json
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from agentops import embedded
from approvals import decisions
from approvals.models import Approval
from gateway import callbacks, sessions, tasks
from gateway.models import ExternalAgent, ExternalCall
from runs.models import Run, args_hash

from .conftest import AgentClient, make_agent

pytestmark = pytest.mark.django_db


def _pending_call(slug: str = "ci-bot", **more):
    agent, token = make_agent(slug)
    bot = AgentClient(token)
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}, **more).json()
    assert body["status"] == "pending", body
    return agent, token, session, Approval.objects.get(pk=body["approval"])


def _approve(approval: Approval, approver) -> None:
    decisions.decide(
        approval.pk,
        user=approver,
        decision="approve",
        shown_args_hash=args_hash(approval.tool, approval.args),
    )


# --- a deactivated agent ----------------------------------------------------------------------
def test_deactivating_an_agent_cancels_its_pending_calls_and_ends_its_sessions(
    approver, django_capture_on_commit_callbacks
):
    agent, token, session, approval = _pending_call(callback_url="https://agent.example/cb")
    with (
        mock.patch.object(callbacks.deliver_callback, "delay") as sent,
        django_capture_on_commit_callbacks(execute=True),
    ):
        agent.active = False
        agent.save()  # what the admin's form does
    approval.refresh_from_db()
    assert approval.status == Approval.Status.CANCELLED
    assert "'ci-bot' was deactivated" in approval.reason
    run = Run.objects.get(pk=session)
    assert (run.status, run.termination_reason) == (Run.Status.CANCELLED, "cancelled")
    assert "'ci-bot' was deactivated" in run.status_detail
    # The agent is told: its callback URL gets the cancelled call, with the reason ...
    sent.assert_called_once_with(str(approval.pk))
    state = sessions.state_of(ExternalCall.objects.get(approval_id=approval.pk)).as_dict()
    assert (state["status"], state["approved"]) == ("cancelled", False)
    assert "was deactivated" in state["reason"]
    # ... and a request waiting on the call answers 401 saying why, not a bare 401.
    from gateway import waits

    status, body = waits.read_call(token, state["call"])
    assert status == 401 and body["deactivated"] is True
    assert "'ci-bot' was deactivated" in body["detail"]
    # Nobody can approve it: a 409 that says why.
    with pytest.raises(decisions.DecisionConflict, match="was deactivated"):
        _approve(approval, approver)


def test_a_pending_call_of_an_agent_switched_off_without_a_save_cannot_be_approved(
    approver, django_user_model
):
    agent, _, session, approval = _pending_call()
    ExternalAgent.objects.filter(pk=agent.pk).update(active=False)  # no signal
    with pytest.raises(decisions.DecisionConflict, match="'ci-bot' was deactivated") as held:
        _approve(approval, approver)
    assert held.value.status == 409
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING  # nothing was decided
    # Over the API too: 409 with the reason.
    _, raw = ApiToken.issue(approver, "tests")
    response = Client(headers={"Authorization": f"Bearer {raw}"}).post(
        f"/api/approvals/{approval.pk}/decision",
        json.dumps({"decision": "approve"}),
        content_type="application/json",
    )
    assert response.status_code == 409, response.content
    assert "was deactivated" in response.json()["detail"]
    # A rejection is still possible (it changes nothing), and the sweep ends the session.
    assert tasks.sweep_sessions_once() == 1
    approval.refresh_from_db()
    assert approval.status == Approval.Status.CANCELLED
    assert Run.objects.get(pk=session).status == Run.Status.CANCELLED


def test_other_agents_calls_are_approved_as_before(approver):
    agent, _, _, _ = _pending_call()
    _, _, other_session, other = _pending_call("other-bot")
    agent.active = False
    agent.save()
    _approve(other, approver)
    other.refresh_from_db()
    assert other.status == Approval.Status.APPROVED
    assert Run.objects.get(pk=other_session).status == Run.Status.RUNNING


def test_an_agent_saved_while_active_keeps_its_sessions():
    agent, _, session, approval = _pending_call()
    agent.title = "renamed"
    agent.save()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert Run.objects.get(pk=session).status == Run.Status.WAITING


# --- idle sessions -----------------------------------------------------------------------------
def test_a_session_opened_and_never_used_ends_after_the_idle_time():
    _, token = make_agent()
    session = AgentClient(token).session()
    idle = sessions.idle_seconds()
    assert idle == settings.AGENTOPS["EXTERNAL_SESSION_IDLE_SECONDS"] == 1800
    now = timezone.now()
    assert sessions.end_idle(now=now + timedelta(seconds=idle - 5)) == 0
    assert Run.objects.get(pk=session).status == Run.Status.RUNNING
    assert sessions.end_idle(now=now + timedelta(seconds=idle + 5)) == 1
    run = Run.objects.get(pk=session)
    assert (run.status, run.termination_reason) == (Run.Status.FAILED, Run.Termination.IDLE)
    assert "no call or result for 1800s" in run.status_detail
    assert run.get_termination_reason_display() == "the external session was idle too long"
    # Its agent coming back is told the session ended.
    response = AgentClient(token).call(session, "read_file", {"path": "a"})
    assert response.status_code == 409 and "failed" in response.json()["detail"]


def test_a_session_in_use_or_waiting_for_a_person_is_not_idle(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "EXTERNAL_SESSION_IDLE_SECONDS": 2}
    _, token = make_agent()
    bot = AgentClient(token)
    abandoned, used, waiting = bot.session(), bot.session(), bot.session()
    time.sleep(2.5)
    assert bot.call(used, "read_file", {"path": "a"}).status_code == 200
    assert bot.call(waiting, "delete_branch", {"name": "dev"}).json()["status"] == "pending"
    assert sessions.end_idle() == 1
    assert Run.objects.get(pk=abandoned).termination_reason == Run.Termination.IDLE
    assert Run.objects.get(pk=used).status == Run.Status.RUNNING
    assert Run.objects.get(pk=waiting).status == Run.Status.WAITING


def test_an_idle_time_of_zero_keeps_sessions_open(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "EXTERNAL_SESSION_IDLE_SECONDS": 0}
    _, token = make_agent()
    session = AgentClient(token).session()
    assert sessions.end_idle(now=timezone.now() + timedelta(days=30)) == 0
    assert Run.objects.get(pk=session).status == Run.Status.RUNNING


def test_the_sweep_runs_every_minute_and_in_the_embedded_sweeps(monkeypatch):
    entries = [
        e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == tasks.sweep_sessions.name
    ]
    assert [e["schedule"] for e in entries] == [60.0]
    swept = []
    monkeypatch.setattr(tasks, "sweep_sessions_once", lambda: swept.append(1) or 0)
    embedded.Sweeps(interval=60).sweep_once()
    assert swept == [1]
