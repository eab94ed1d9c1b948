"""The approval screens over real gated runs (the scripted SQL analyst e-mails a report to an
address off its allow-list, so the call is gated)."""

import re
from datetime import timedelta
from urllib.parse import parse_qsl

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import teams
from agentkit.agents import get_agent
from approvals import listing, stream_messages
from approvals.models import Approval
from runs import engine
from runs.models import Run, args_hash
from tests.html_checks import assert_payload_inert

pytestmark = pytest.mark.django_db

XSS = (
    '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    '<button hx-post="/runs/new/" hx-trigger="load">x</button>'
)


def gated_run(user, report_to="boss@example.com") -> tuple[Run, Approval]:
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input({"question": "Revenue?", "report_to": report_to})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=user, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    return run, Approval.objects.get(run=run)


@pytest.fixture
def gated(operator, no_enqueue):
    return gated_run(operator)


def question(run: Run, **fields) -> Approval:
    now = timezone.now()
    fields.setdefault("risk", Approval.Risk.LOW)
    return Approval.objects.create(
        run=run,
        gate_seq=run.last_seq,
        llm_seq=run.last_seq,
        kind=Approval.Kind.QUESTION,
        tool="ask_operator",
        args={"question": "Which region?"},
        question="Which region?",
        options=["EU", "US"],
        explanation="the agent asked the operator a question",
        expires_at=now + timedelta(hours=1),
        **fields,
    )


def decide(client, approval, hx=True, **data):
    """POST the decision form as the screen does: with the hash of the call it showed."""
    headers = {"HTTP_HX_REQUEST": "true"} if hx else {}
    if approval.kind == Approval.Kind.ACTION:
        data.setdefault("shown_args_hash", args_hash(approval.tool, approval.args))
        # The confirmation of an irreversible call's effect, as its second press sends it.
        data.setdefault("confirmed", data["shown_args_hash"])
    return client.post(reverse("approvals:decide", args=[approval.pk]), data, **headers)


# --- queue -------------------------------------------------------------------------------------
def test_queue_lists_pending_approvals_with_the_contract_hooks(client, viewer, gated):
    _run, approval = gated
    client.force_login(viewer)
    html = client.get(reverse("approvals:queue")).content.decode()
    assert f'class="approval-row" data-approval-id="{approval.pk}"' in html
    assert f'href="/approvals/{approval.pk}/"' in html
    assert 'id="approval-rows-live"' in html
    assert 'id="nav-pending-count" class="count">1<' in html


def test_queue_sorts_by_risk_then_deadline_and_filters(client, approver, gated):
    run, email = gated
    now = timezone.now()
    low_soon = question(run, tool_use_id="q1")
    Approval.objects.filter(pk=low_soon.pk).update(expires_at=now + timedelta(minutes=5))
    high_late = question(run, tool_use_id="q2", risk=Approval.Risk.HIGH)
    Approval.objects.filter(pk=high_late.pk).update(expires_at=now + timedelta(days=2))
    client.force_login(approver)

    def order(**params):
        html = client.get(reverse("approvals:queue"), params).content.decode()
        found = [
            (html.find(f'data-approval-id="{a.pk}"'), a.pk) for a in (email, low_soon, high_late)
        ]
        return [pk for pos, pk in sorted(found) if pos >= 0]

    assert email.risk in ("medium", "high", "critical")
    ranks = {"critical": 0, "high": 1, "medium": 2, "low": 3}
    expected = sorted([email, low_soon, high_late], key=lambda a: (ranks[a.risk], a.expires_at))
    for a in expected:
        a.refresh_from_db()
    assert order() == [a.pk for a in sorted(expected, key=lambda a: (ranks[a.risk], a.expires_at))]
    assert order(risk="low") == [low_soon.pk]
    assert order(agent="refund-desk") == []
    assert set(order(mine="1")) == {email.pk, low_soon.pk, high_late.pk}
    html = client.get(reverse("approvals:queue"), {"risk": "low"}).content.decode()
    assert 'id="approval-rows"' in html and "approval-rows-live" not in html


def test_assigned_to_me_leaves_out_what_i_may_not_decide(client, operator, approver, gated):
    run, approval = gated
    Run.objects.filter(pk=run.pk).update(
        agent_config={
            **run.agent_config,
            "gates": {**run.agent_config["gates"], "approvers": ["zoe"]},
        }
    )
    client.force_login(approver)
    html = client.get(reverse("approvals:queue"), {"mine": "1"}).content.decode()
    assert str(approval.pk) not in html
    html = client.get(reverse("approvals:queue")).content.decode()
    assert str(approval.pk) in html


def test_queue_queries_do_not_grow_with_rows(
    client, approver, operator, no_enqueue, django_assert_max_num_queries
):
    gated_run(operator)
    client.force_login(approver)
    client.get(reverse("approvals:queue"))
    for _ in range(4):
        gated_run(operator)
    # 11: one of them reads the user's teams (accounts/teams.py), once per request.
    with django_assert_max_num_queries(11):
        response = client.get(reverse("approvals:queue"), {"mine": "1"})
    assert response.content.decode().count('class="approval-row"') == 5


def test_the_queue_is_paged_riskiest_first_and_the_live_push_renders_the_first_page(
    client, approver, gated, monkeypatch, django_assert_max_num_queries
):
    run, email = gated
    monkeypatch.setattr(listing, "QUEUE_PAGE", 4)
    questions = [question(run, tool_use_id=f"q{i}") for i in range(6)]  # low risk: after email
    client.force_login(approver)

    def shown(**params) -> tuple[list[str], str]:
        html = client.get(reverse("approvals:queue"), params).content.decode()
        return re.findall(r'class="approval-row" data-approval-id="([0-9a-f-]+)"', html), html

    def link(html: str, name: str) -> dict:
        found = re.search(rf'id="queue-{name}" href="\?([^"]+)"', html)
        return dict(parse_qsl(found[1].replace("&amp;", "&"))) if found else {}

    with django_assert_max_num_queries(12):
        first, html = shown()
    assert first[0] == str(email.pk) and len(first) == 4
    assert "7 pending" in html and not link(html, "riskier")
    assert 'id="approval-rows-live"' in html  # the first page, no filter: pushes replace it
    second, html = shown(**link(html, "next"))
    assert len(second) == 3 and not set(first) & set(second) and not link(html, "next")
    assert {str(q.pk) for q in questions} | {str(email.pk)} == set(first) | set(second)
    assert 'id="approval-rows"' in html and "approval-rows-live" not in html
    assert shown(**link(html, "riskier"))[0] == first
    # Rows decided meanwhile do not shift the next page: it starts after the last row seen.
    after_fourth = link(shown()[1], "next")
    Approval.objects.filter(pk__in=first[:2]).update(
        status=Approval.Status.CANCELLED, decided_at=timezone.now()
    )
    assert shown(**after_fourth)[0] == second
    # A filter stays in the links; a cursor that is not one shows the first page.
    _, html = shown(risk="low")
    assert link(html, "next")["risk"] == "low"
    assert shown(after="nonsense")[0] == shown()[0]
    pushed = "".join(stream_messages.render_approval_event(email.pk, teams.EVERYTHING)["html"])
    assert (
        re.findall(r'class="approval-row" data-approval-id="([0-9a-f-]+)"', pushed) == (shown()[0])
    )


def test_queue_needs_a_role(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("nobody", password="x"))
    assert client.get(reverse("approvals:queue")).status_code == 403


# --- the decision screen ---------------------------------------------------------------------
def test_screen_shows_the_exact_call_an_editable_form_and_the_buttons(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    html = client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert "<code>email_report</code>" in html
    assert "allow-list" in html  # why it was gated
    for name in ("to", "subject", "body"):
        assert f'name="arg_{name}"' in html
    assert 'value="boss@example.com" data-original="boss@example.com"' in html
    assert 'textarea id="id_reason" name="reason"' in html
    for button in ("approve", "edit-approve", "reject"):
        assert f'id="{button}"' in html
    assert 'id="decision-result"' in html
    assert "data-deadline=" in html
    assert "untrusted" in html and "Revenue?" in html  # goal
    assert 'class="step ' in html  # recent steps


def test_viewers_read_but_cannot_decide(client, viewer, gated):
    _run, approval = gated
    client.force_login(viewer)
    html = client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert 'id="approve"' not in html
    response = decide(client, approval, decision="approve")
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


def test_opening_the_screen_writes_nothing_and_the_open_is_recorded_by_post(
    client, approver, gated
):
    from approvals.models import ApprovalView

    _run, approval = gated
    client.force_login(approver)
    client.get(reverse("approvals:detail", args=[approval.pk]))
    assert not ApprovalView.objects.exists()
    url = reverse("approvals:opened", args=[approval.pk])
    assert client.get(url).status_code == 405
    assert client.post(url).status_code == 204
    assert ApprovalView.objects.get().user == approver


def test_model_prose_is_escaped_in_an_untrusted_box(client, approver, gated):
    _run, approval = gated
    Approval.objects.filter(pk=approval.pk).update(
        context_summary=XSS, args={**approval.args, "body": XSS}
    )
    client.force_login(approver)
    html = client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert "untrusted, may be wrong or manipulative" in html
    assert_payload_inert(html)


# --- deciding ----------------------------------------------------------------------------------
def test_approve_resumes_the_run_and_a_second_click_is_a_conflict(
    client, approver, admin_user, gated
):
    run, approval = gated
    client.force_login(approver)
    response = decide(client, approval, decision="approve")
    assert response.status_code == 200
    assert 'id="decision-result"' in response.content.decode()
    assert "Approved" in response.content.decode()
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.decided_by == approver
    assert run.status == Run.Status.QUEUED

    client.force_login(admin_user)
    response = decide(client, approval, decision="reject", reason="too late")
    assert response.status_code == 409
    html = response.content.decode()
    assert "Already decided." in html and "already approved by arthur" in html


def test_reject_needs_a_reason(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    response = decide(client, approval, decision="reject")
    assert response.status_code == 422
    assert "reason is required" in response.content.decode()
    response = decide(client, approval, decision="reject", reason="not to the boss")
    assert response.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED and approval.reason == "not to the boss"


def test_edit_and_approve_runs_the_edited_call(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    response = decide(
        client,
        approval,
        decision="edit_approve",
        arg_to=approval.args["to"],
        arg_subject="Revenue by category (checked)",
        arg_body=approval.args["body"],
    )
    assert response.status_code == 200, response.content
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    assert approval.edited_args == {**approval.args, "subject": "Revenue by category (checked)"}


def test_an_edit_that_policy_would_gate_harder_is_refused_clearly(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    response = decide(
        client,
        approval,
        decision="edit_approve",
        arg_to="someone-else@evil.example",
        arg_subject=approval.args["subject"],
        arg_body=approval.args["body"],
    )
    assert response.status_code == 422
    assert "edit refused" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


def test_invalid_edited_arguments_are_field_errors(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    response = decide(
        client,
        approval,
        decision="edit_approve",
        arg_to="not an email",
        arg_subject=approval.args["subject"],
        arg_body=approval.args["body"],
        hx=False,
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert 'value="not an email"' in html  # the screen keeps what was typed
    assert "field-error" in html or "arg_to" in html


def test_answer_a_question(client, approver, gated):
    run, _ = gated
    q = question(run, tool_use_id="q1")
    client.force_login(approver)
    html = client.get(reverse("approvals:detail", args=[q.pk])).content.decode()
    assert 'name="answer"' in html and 'id="answer"' in html and 'id="approve"' not in html
    response = decide(client, q, decision="answer", answer="Mars")
    assert response.status_code == 422 and "one of" in response.content.decode()
    response = decide(client, q, decision="answer", answer="EU")
    assert response.status_code == 200
    q.refresh_from_db()
    assert q.status == Approval.Status.ANSWERED and q.answer == "EU"


def test_an_unknown_decision_is_422(client, approver, gated):
    _run, approval = gated
    client.force_login(approver)
    assert decide(client, approval, decision="maybe").status_code == 422


def test_decisions_need_the_csrf_token(approver, gated):
    _run, approval = gated
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    response = client.post(reverse("approvals:decide", args=[approval.pk]), {"decision": "approve"})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


def test_four_eyes_refusal_is_shown_as_403(client, django_user_model, no_enqueue):
    from tests.conftest import make_user

    both = make_user(django_user_model, "bea", "operator", "approver")
    _run, approval = gated_run(both)
    Approval.objects.filter(pk=approval.pk).update(risk=Approval.Risk.HIGH)
    client.force_login(both)
    response = decide(client, approval, decision="approve")
    assert response.status_code == 403
    assert "four-eyes" in response.content.decode()


# --- live push ---------------------------------------------------------------------------------
def test_the_pushed_fragment_updates_count_queue_dashboard_and_open_screens(
    operator, approver, gated
):
    from approvals import decisions

    _run, approval = gated
    _other_run, other = gated_run(operator)
    Approval.objects.filter(pk=other.pk).update(risk=Approval.Risk.CRITICAL)
    notices, rows, state = stream_messages.render_approval_event(approval.pk, teams.EVERYTHING)[
        "html"
    ]
    assert 'id="nav-pending-count" class="count" hx-swap-oob="true">2<' in notices
    assert 'id="dashboard-approval-list" hx-swap-oob="true"' in notices
    assert rows.lstrip().startswith('<tbody id="approval-rows-live" hx-swap-oob="true">')
    # The whole queue, in order: the critical one first.
    assert rows.index(str(other.pk)) < rows.index(str(approval.pk))
    assert rows.count("hx-swap-oob") == 1
    # Open decision screens get the approval's state: still open, with its deadline.
    assert f'id="approval-state-{approval.pk}"' in state and 'data-status="pending"' in state
    assert "data-final" not in state

    decisions.decide(approval.pk, user=approver, decision="approve")
    notices, rows, state = stream_messages.render_approval_event(approval.pk, teams.EVERYTHING)[
        "html"
    ]
    assert 'hx-swap-oob="true">1<' in notices
    assert str(approval.pk) not in rows and str(other.pk) in rows
    assert f'id="approval-state-{approval.pk}" class="approval-state"' in state
    assert 'hx-swap-oob="true"' in state and 'data-final="approved"' in state
    assert "by arthur" in state
    assert f'id="dash-approval-{approval.pk}"' not in notices
    # Without an approval (a queue page connecting) there is no screen state to send.
    assert len(stream_messages.render_approval_event(None, teams.EVERYTHING)["html"]) == 2


# --- statistics --------------------------------------------------------------------------------
def test_stats_are_for_admins(client, approver, admin_user, gated):
    from approvals import decisions

    _run, approval = gated
    decisions.decide(approval.pk, user=approver, decision="approve")
    client.force_login(approver)
    assert client.get(reverse("approvals:stats")).status_code == 403
    client.force_login(admin_user)
    html = client.get(reverse("approvals:stats")).content.decode()
    assert 'id="stats-approvers"' in html and "<td>arthur</td>" in html
    assert client.get(reverse("approvals:stats"), {"days": "x"}).status_code == 200


# --- the argument form -------------------------------------------------------------------------
def test_argument_form_follows_the_tool_schema_and_keeps_untouched_values_exact():
    from django.http import QueryDict

    from approvals import arg_form

    original = {"order_id": 42, "amount": "30.00", "reason": "Arrived damaged"}
    fields = {f.name: f for f in arg_form.fields_for("issue_refund", original)}
    assert fields["order_id"].kind == "number" and fields["order_id"].required
    assert fields["amount"].kind == "text"  # number | string: the exact decimal text is kept
    assert fields["reason"].text == "Arrived damaged"
    same = QueryDict(mutable=True)
    same.update({"arg_order_id": "42", "arg_amount": "30.00", "arg_reason": "Arrived damaged"})
    args, errors = arg_form.parse(list(fields.values()), original, same)
    assert args == original and not errors
    edited = same.copy()
    edited["arg_order_id"] = "43"
    edited["arg_amount"] = "12.50"
    args, errors = arg_form.parse(list(fields.values()), original, edited)
    assert args == {"order_id": 43, "amount": "12.50", "reason": "Arrived damaged"}
    edited["arg_order_id"] = "forty"
    _, errors = arg_form.parse(list(fields.values()), original, edited)
    assert errors == {"arg_order_id": ["must be a number"]}


def test_json_arguments_are_edited_as_json():
    from django.http import QueryDict

    from approvals import arg_form

    original = {"question": "Which?", "options": ["a", "b"]}
    fields = arg_form.fields_for("ask_operator", original)
    options = next(f for f in fields if f.name == "options")
    assert options.kind == "json"
    post = QueryDict(mutable=True)
    post.update({"arg_question": "Which?", "arg_options": '["a", "c"]'})
    args, errors = arg_form.parse(fields, original, post)
    assert args["options"] == ["a", "c"] and not errors
    post["arg_options"] = "[oops"
    _, errors = arg_form.parse(fields, original, post)
    assert "must be JSON" in errors["arg_options"][0]


def test_the_run_page_shows_the_decision_inline(client, approver, viewer, gated):
    from approvals import decisions

    run, approval = gated
    decisions.decide(approval.pk, user=approver, decision="reject", reason="wrong person")
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'data-kind="gate"' in html and 'data-kind="decision"' in html
    assert "human: reject" in html and "wrong person" in html and "<dd>arthur</dd>" in html
    assert f'href="/approvals/{approval.pk}/"' in html
