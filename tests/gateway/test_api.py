"""The gateway API: an external agent's session, its calls through the gate policy, the
decisions it is handed back (bound to the arguments' hash), results and close."""

import threading
import time

import pytest
from django.db import connection
from django.test import Client

from approvals import decisions
from approvals.models import Approval
from gateway.models import ExternalCall
from runs.models import Run, Step, args_hash

from .conftest import AgentClient, make_agent

INVOICE = {"vendor": "acme", "amount": 900}


def test_a_wrong_or_missing_token_is_401(bot, agent):
    assert (
        Client().post("/api/external/sessions", {}, content_type="application/json").status_code
        == 401
    )
    wrong = AgentClient("aoa_not-a-token")
    assert wrong.post("/sessions").status_code == 401
    # A user's API token is not an agent's.
    assert AgentClient("ao_whatever").post("/sessions").status_code == 401


def test_a_rotated_token_stops_working(agent):
    ext, old = agent
    new = ext.issue_token()
    assert AgentClient(old).post("/sessions").status_code == 401
    assert AgentClient(new).post("/sessions").status_code == 201


def test_registering_a_session_makes_an_external_run(bot):
    session = bot.session(session="sess-1", metadata={"repo": "shop"})
    run = Run.objects.get(pk=session)
    assert (run.trigger, run.status, run.agent) == ("external", "running", "ci-bot")
    assert run.source == "external ci-bot session sess-1"
    assert run.agent_config["gates"]["always_gate"] == ["delete_branch"]
    assert run.steps.get(seq=1).data["event"] == "launched"


def test_another_agents_session_and_call_are_404(bot, db):
    session = bot.session()
    call = bot.call(session, "delete_branch", {"name": "main"}).json()["call"]
    _, other_token = make_agent("other-bot")
    other = AgentClient(other_token)
    assert other.call(session, "read_file", {"path": "x"}).status_code == 404
    assert other.get(f"/calls/{call}").status_code == 404
    assert other.post(f"/calls/{call}/result", {"result": 1}).status_code == 404
    assert other.post(f"/sessions/{session}/close").status_code == 404


def test_an_allowed_call_passes_at_once_and_is_recorded(bot):
    session = bot.session()
    response = bot.call(session, "read_file", {"path": "README.md"}, summary="reading the docs")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["approved"], body["args"]) == (
        "allowed",
        True,
        {"path": "README.md"},
    )
    assert body["approval"] is None
    run = Run.objects.get(pk=session)
    step = run.steps.get(seq=2)
    assert step.data["event"] == "call" and step.data["gated"] is False
    assert "allowed by policy" in step.data["explanation"]
    assert run.status == "running" and not Approval.objects.exists()


def test_a_gated_call_opens_an_approval_and_the_session_waits(bot, client, approver):
    session = bot.session()
    response = bot.call(session, "pay_invoice", INVOICE, summary="paying March's invoice")
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["approved"], body["args"]) == ("pending", False, None)
    approval = Approval.objects.get(pk=body["approval"])
    assert approval.tool == "pay_invoice" and approval.args == INVOICE
    assert "amount 900 exceeds the limit of 500" in approval.explanation
    assert approval.context_summary == "paying March's invoice"
    run = Run.objects.get(pk=session)
    assert run.status == "waiting"
    assert [s.kind for s in run.steps.order_by("seq")] == ["status", "status", "gate", "status"]
    # The approvals queue and the run page show it like any other.
    client.force_login(approver)
    queue = client.get("/api/approvals").json()
    assert [item["id"] for item in queue["items"]] == [str(approval.pk)]
    page = client.get(f"/runs/{session}/")
    assert page.status_code == 200
    assert b"external call pay_invoice: gated" in page.content
    assert b"external ci-bot session" in page.content


def test_bad_calls_are_clear_4xx_and_write_nothing(bot):
    session = bot.session()
    bad_args = bot.call(session, "pay_invoice", {"vendor": "acme"})
    assert bad_args.status_code == 422 and "amount: field required" in bad_args.json()["detail"]
    bad_hints = bot.call(session, "read_file", {}, hints={"blast": "enormous"})
    assert bad_hints.status_code == 422
    assert bot.call(session, "", {}).status_code == 422
    assert bot.post(f"/sessions/{session}/calls", {"tool": "x", "args": [1]}).status_code == 422
    assert Run.objects.get(pk=session).last_seq == 1 and not ExternalCall.objects.exists()


def test_hints_can_raise_a_tools_risk_but_never_lower_it(bot):
    session = bot.session()
    # read_file is registered reversible with no blast: a hint of a wide blast gates it.
    raised = bot.call(
        session, "read_file", {"path": "/"}, hints={"reversible": False, "blast": "high"}
    )
    assert raised.status_code == 202
    approval = Approval.objects.get(pk=raised.json()["approval"])
    assert approval.risk == "high"
    # A blast hint alone raises the blast radius and keeps the registered reversibility.
    bot.call(session, "read_file", {"path": "/etc"}, hints={"blast": "critical"})
    assert ExternalCall.objects.get(args={"path": "/etc"}).tool_meta["blast"] == "critical"


@pytest.mark.parametrize(
    "hints", [{"reversible": True, "blast": "none"}, {"reversible": True}, {"blast": "none"}]
)
def test_hints_never_lower_a_registered_tools_risk(bot, hints):
    session = bot.session()
    # pay_invoice is registered irreversible, blast low; 400 is under its threshold.
    bot.call(session, "pay_invoice", {"vendor": "a", "amount": 400}, hints=hints)
    meta = ExternalCall.objects.get().tool_meta
    assert (meta["reversible"], meta["blast"]) == (False, "low")


@pytest.mark.parametrize(
    "hints", [{"reversible": True, "blast": "none"}, {"reversible": True}, {"blast": "low"}]
)
def test_an_unregistered_tool_cannot_hint_its_way_past_the_gate(bot, hints):
    session = bot.session()
    response = bot.call(session, "drop_database", {"name": "prod"}, hints=hints)
    assert response.status_code == 202, response.json()
    assert response.json()["status"] == "pending"
    meta = ExternalCall.objects.get().tool_meta
    assert (meta["reversible"], meta["blast"]) == (False, "medium")
    assert Run.objects.get(pk=session).status == "waiting"


def test_an_unregistered_tools_risk_can_be_raised(bot):
    session = bot.session()
    response = bot.call(
        session, "drop_database", {"name": "prod"}, hints={"reversible": True, "blast": "critical"}
    )
    assert response.status_code == 202
    meta = ExternalCall.objects.get().tool_meta
    # Raised to critical; "reversible" is not believed either.
    assert (meta["reversible"], meta["blast"]) == (False, "critical")
    assert Approval.objects.get(pk=response.json()["approval"]).risk == "critical"


def _decide(approval_id, user, decision="approve", **kw):
    approval = Approval.objects.get(pk=approval_id)
    return decisions.decide(
        approval_id,
        user=user,
        decision=decision,
        shown_args_hash=args_hash(approval.tool, approval.args),
        **kw,
    )


def test_approve_hands_back_exactly_the_approved_args_and_the_run_goes_on_without_a_worker(
    bot, approver, monkeypatch
):
    sent = []
    monkeypatch.setattr("runs.queue.enqueue", lambda run_id, **kw: sent.append(run_id))
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE).json()
    _decide(body["approval"], approver)
    state = bot.get(f"/calls/{body['call']}").json()
    assert (state["status"], state["approved"], state["args"]) == ("approved", True, INVOICE)
    assert state["args_hash"] == args_hash("pay_invoice", INVOICE)
    assert state["decided_by"] == "arthur" and state["edited"] is False
    run = Run.objects.get(pk=session)
    # Back to running for the next call; never sent to the engine.
    assert run.status == "running" and sent == []
    assert run.steps.order_by("-seq")[0].data["to"] == "running"


def test_edit_and_approve_hands_back_the_edited_args(bot, approver):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE).json()
    _decide(body["approval"], approver, arguments={"vendor": "acme", "amount": 450})
    state = bot.get(f"/calls/{body['call']}").json()
    assert state["args"] == {"vendor": "acme", "amount": 450} and state["edited"] is True


def test_an_edit_is_checked_against_the_registered_schema(bot, approver):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE).json()
    with pytest.raises(decisions.DecisionInvalid, match="amount"):
        _decide(body["approval"], approver, arguments={"vendor": "acme", "amount": "lots"})
    with pytest.raises(decisions.DecisionInvalid, match="exceeds the limit"):
        _decide(body["approval"], approver, arguments={"vendor": "acme", "amount": 5000})
    assert Approval.objects.get(pk=body["approval"]).status == "pending"


def test_reject_hands_back_the_reason(bot, approver):
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "main"}).json()
    _decide(body["approval"], approver, decision="reject", reason="main is protected")
    state = bot.get(f"/calls/{body['call']}").json()
    assert (state["status"], state["approved"], state["args"]) == ("rejected", False, None)
    assert state["reason"] == "main is protected"


def test_a_decision_for_other_args_is_refused(bot, approver):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE).json()
    with pytest.raises(decisions.DecisionConflict, match="not the call waiting"):
        decisions.decide(
            body["approval"],
            user=approver,
            decision="approve",
            shown_args_hash=args_hash("pay_invoice", {"vendor": "acme", "amount": 1}),
        )
    assert bot.get(f"/calls/{body['call']}").json()["status"] == "pending"


def test_an_expired_approval_is_told_as_expired(bot):
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}).json()
    approval = Approval.objects.get(pk=body["approval"])
    assert decisions.expire_due(now=approval.expires_at) == 1
    state = bot.get(f"/calls/{body['call']}").json()
    assert (state["status"], state["approved"]) == ("expired", False)
    assert "expired" in state["reason"]
    assert Run.objects.get(pk=session).status == "running"


def test_a_quorum_holds_for_external_calls(bot, db, django_user_model):
    from tests.conftest import make_user

    _, token = make_agent(
        "risky-bot", {"four_eyes_from": "medium", "quorum_from": "high", "quorum": 2}
    )
    risky = AgentClient(token)
    session = risky.session()
    body = risky.call(
        session, "purge", {"what": "logs"}, hints={"reversible": False, "blast": "high"}
    ).json()
    first = make_user(django_user_model, "ann", "approver")
    second = make_user(django_user_model, "bob", "approver")
    _decide(body["approval"], first)
    assert risky.get(f"/calls/{body['call']}").json()["status"] == "pending"  # 1 of 2
    with pytest.raises(decisions.DecisionConflict, match="already voted"):
        _decide(body["approval"], first)
    _decide(body["approval"], second)
    assert risky.get(f"/calls/{body['call']}").json()["status"] == "approved"


def test_a_second_decision_gets_the_409(bot, approver, django_user_model):
    from tests.conftest import make_user

    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}).json()
    _decide(body["approval"], approver)
    other = make_user(django_user_model, "zoe", "approver")
    with pytest.raises(decisions.DecisionConflict, match="already approved by arthur"):
        _decide(body["approval"], other, decision="reject", reason="no")


def test_wait_is_bounded(bot):
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}).json()
    assert bot.get(f"/calls/{body['call']}?wait=31").status_code == 422
    started = time.monotonic()
    state = bot.get(f"/calls/{body['call']}?wait=0.6").json()
    # It waited (the time asked, less at most a fifth of jitter: gateway/waits.py) and then
    # answered: not the 30 s the longest wait allows (the margin is for a loaded machine).
    assert state["status"] == "pending" and 0.6 * 0.8 - 0.01 <= time.monotonic() - started < 20


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_returns_when_a_person_decides(django_user_model):
    from tests.conftest import make_user

    _, token = make_agent()
    bot = AgentClient(token)
    approver = make_user(django_user_model, "arthur", "approver")
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE).json()

    def person():
        try:
            _decide(body["approval"], approver)
        finally:
            connection.close()  # this thread's own connection

    timer = threading.Timer(0.8, person)
    timer.start()
    started = time.monotonic()
    state = bot.get(f"/calls/{body['call']}?wait=30").json()
    waited = time.monotonic() - started
    timer.join()
    assert state["status"] == "approved" and state["args"] == INVOICE
    # Woken by the decision, not by the end of its 30 s wait (the margin is for load).
    assert 0.7 <= waited < 20


def test_results_are_the_runs_tool_steps_and_close_ends_it(bot, approver):
    session = bot.session()
    allowed = bot.call(session, "read_file", {"path": "a"}).json()
    assert (
        bot.post(f"/calls/{allowed['call']}/result", {"result": {"bytes": 12}}).status_code == 200
    )
    assert bot.post(f"/calls/{allowed['call']}/result", {"result": 1}).status_code == 409  # once
    gated = bot.call(session, "pay_invoice", INVOICE).json()
    # Not decided yet: it must not have run.
    assert bot.post(f"/calls/{gated['call']}/result", {"result": 1}).status_code == 409
    assert bot.post(f"/sessions/{session}/close").status_code == 409  # still waiting
    _decide(gated["approval"], approver, arguments={"vendor": "acme", "amount": 400})
    reported = bot.post(f"/calls/{gated['call']}/result", {"error": "bank down", "duration_ms": 30})
    assert reported.status_code == 200
    closed = bot.post(f"/sessions/{session}/close", {"status": "succeeded", "output": "done"})
    assert closed.json()["status"] == "succeeded"
    run = Run.objects.get(pk=session)
    tool_steps = list(run.steps.filter(kind=Step.Kind.TOOL).order_by("seq"))
    assert tool_steps[0].data["result"] == {"bytes": 12}
    # The tool step records the arguments that were approved, not the proposal.
    assert tool_steps[1].data["args"] == {"vendor": "acme", "amount": 400}
    assert tool_steps[1].data["error"] == "bank down" and run.tool_failed_count == 1
    assert (run.termination_reason, run.output) == ("completed", "done")
    assert bot.call(session, "read_file", {"path": "b"}).status_code == 409


def test_a_call_read_back_carries_what_was_reported(bot, approver):
    """A client that fetches a call's outcome later (the MCP proxy's tasks, maybe after a
    restart) reads the reported result from the call itself."""
    session = bot.session()
    allowed = bot.call(session, "read_file", {"path": "a"}).json()
    state = bot.get(f"/calls/{allowed['call']}").json()
    assert state["reported"] is None and state["created_at"] and state["call_id"] is None
    mine = bot.call(session, "read_file", {"path": "b"}, call_id="tool-use:7").json()
    assert bot.get(f"/calls/{mine['call']}").json()["call_id"] == "tool-use:7"
    bot.post(f"/calls/{allowed['call']}/result", {"result": {"bytes": 12}})
    state = bot.get(f"/calls/{allowed['call']}").json()
    assert state["reported"] == {"is_error": False, "result": {"bytes": 12}}
    gated = bot.call(session, "pay_invoice", INVOICE).json()
    _decide(gated["approval"], approver)
    bot.post(f"/calls/{gated['call']}/result", {"error": "bank down"})
    state = bot.get(f"/calls/{gated['call']}").json()
    assert state["reported"] == {"is_error": True, "error": "bank down"}


def test_a_failed_close_cancels_what_still_waits(bot):
    session = bot.session()
    gated = bot.call(session, "delete_branch", {"name": "x"}).json()
    closed = bot.post(f"/sessions/{session}/close", {"status": "failed", "detail": "crashed"})
    assert closed.json()["status"] == "failed"
    assert Approval.objects.get(pk=gated["approval"]).status == "cancelled"
    state = bot.get(f"/calls/{gated['call']}").json()
    assert state["status"] == "cancelled" and state["approved"] is False
    assert Run.objects.get(pk=session).termination_reason == "agent_failed"


def test_the_timeline_of_a_session_verifies_and_shows_in_the_audit(bot, approver, client):
    session = bot.session()
    bot.call(session, "read_file", {"path": "a"})
    gated = bot.call(session, "pay_invoice", INVOICE).json()
    _decide(gated["approval"], approver, arguments={"vendor": "acme", "amount": 450})
    bot.post(f"/calls/{gated['call']}/result", {"result": "paid"})
    bot.post(f"/sessions/{session}/close")
    run = Run.objects.get(pk=session)
    assert run.verify_chain() == (True, None)
    events = [
        (s.kind, s.data.get("event") or s.data.get("decision")) for s in run.steps.order_by("seq")
    ]
    assert events == [
        ("status", "launched"),
        ("status", "call"),
        ("status", "call"),
        ("gate", None),
        ("status", "paused"),
        ("decision", "approve"),
        ("status", "resumed"),
        ("tool", None),
        ("status", "terminated"),
    ]
    client.force_login(approver)
    audit = client.get(f"/audit/runs/{session}/")
    assert audit.status_code == 200
    assert b'data-ok="true"' in audit.content and b"pay_invoice" in audit.content
    listing = client.get("/runs/?trigger=external")
    assert listing.status_code == 200 and b"ci-bot" in listing.content


def test_the_openapi_document_stays_valid(client, approver):
    client.force_login(approver)
    schema = client.get("/api/openapi.json").json()
    assert "/api/external/sessions/{session_id}/calls" in schema["paths"]
    assert "/api/external/calls/{call_id}" in schema["paths"]


def test_the_decision_screen_edits_an_external_call_by_its_registered_schema(bot, approver, client):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE, summary="March invoice").json()
    approval = Approval.objects.get(pk=body["approval"])
    client.force_login(approver)
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert "March invoice" in page and 'name="arg_amount"' in page
    shown = args_hash(approval.tool, approval.args)
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {
            "decision": "edit_approve",
            "arg_vendor": "acme",
            "arg_amount": "450",
            "shown_args_hash": shown,
            "confirmed": shown,
        },
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200, response.content
    state = bot.get(f"/calls/{body['call']}").json()
    assert state["status"] == "approved" and state["args"] == {"vendor": "acme", "amount": 450}


def test_the_engine_never_advances_an_external_session(bot):
    from runs import engine

    session = bot.session()
    run = Run.objects.get(pk=session)
    before = (run.status, run.last_seq, run.version)
    assert engine.advance(session) == "busy"
    # Running with no lease: not "expired", so the sweep leaves it alone too.
    assert engine.sweep() == 0
    run.refresh_from_db()
    assert (run.status, run.last_seq, run.version) == before


def test_a_user_session_or_user_token_is_not_an_agent(client, approver, agent):
    # The gateway answers agents only: a logged-in person (even without CSRF concerns) and a
    # person's API token both get 401, so no browser can submit calls as an agent.
    from accounts.models import ApiToken

    client.force_login(approver)
    assert (
        client.post("/api/external/sessions", {}, content_type="application/json").status_code
        == 401
    )
    _, raw = ApiToken.issue(approver, "cli")
    assert AgentClient(raw).post("/sessions").status_code == 401


def test_an_external_agent_is_validated_like_an_internal_ones_rules(db):
    from django.core.exceptions import ValidationError

    from gateway.models import ExternalAgent, gate_rules_from_json

    with pytest.raises(ValidationError, match="internal agent"):
        ExternalAgent(slug="refund-desk", title="x").full_clean()
    with pytest.raises(ValidationError, match="unknown rule"):
        ExternalAgent(slug="ok-bot", title="x", gates={"alwys_gate": ["x"]}).full_clean()
    with pytest.raises(ValueError, match="not a number"):
        gate_rules_from_json({"thresholds": {"pay": {"amount": "lots"}}})
    rules = gate_rules_from_json({"quorum_from": "high", "approval_timeout_seconds": 60})
    assert (rules["quorum_from"], rules["approval_timeout_seconds"]) == ("high", 60)
