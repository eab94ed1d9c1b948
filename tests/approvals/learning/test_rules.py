"""The learning gate policy through the engine: records, proposals, accepted rules approving
calls (and saying so in the timeline), sampled checks, revocation, expiry, and what it will
never do. The goodwill desk (demo) grants credits, which the base table gates (irreversible,
medium); test-payer's transfers are irreversible and high: never learned."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from agentkit.tools import Blast, get_tool, tool
from approvals import engine_gates
from approvals.decisions import decide
from approvals.gates import cascade
from approvals.learning import rules as learning
from approvals.models import Approval, AutoApproveRule, RuleEvent, RuleHit, TrackRecord
from history.replay import replay
from runs.models import Run, Step
from tests.conftest import make_user

from ..conftest import EXECUTED, drive, gated, launch

pytestmark = pytest.mark.django_db

if get_tool("test_tag_ticket") is None:

    @tool(reversible=True, blast=Blast.LOW, name="test_tag_ticket")
    def tag_ticket(ticket: str) -> dict:
        """Tag a support ticket (undone by removing the tag)."""
        return {"tagged": ticket}


LEARNS = {
    "bar": 3,
    "bands": [0.1, 0.25, 0.5, 1.0],
    "match_fields": {"grant_goodwill_credit": ["reason"]},
    "check_rate": 0.0,
    "default_expiry_seconds": 3600,
    "default_max_hits": 10,
}
CREDIT = {"customer_email": "ann@example.com", "amount": "15", "reason": "late delivery"}


def credit_run(amount="15", reason="late delivery", **learns) -> Run:
    return launch(
        "goodwill-desk",
        {**CREDIT, "amount": amount, "reason": reason},
        learning={**LEARNS, **learns},
    )


def approve_credits(user, n: int, amount="15", **learns) -> list[Approval]:
    decided = []
    for _ in range(n):
        run = credit_run(amount, **learns)
        assert drive(run) == Run.Status.WAITING
        approval = Approval.objects.get(run=run)
        decide(approval.pk, user=user, decision="approve")
        decided.append(approval)
    return decided


@pytest.fixture
def admin(django_user_model):
    return make_user(django_user_model, "adele", "admin")


@pytest.fixture
def active_rule(approver, admin, no_enqueue) -> AutoApproveRule:
    approve_credits(approver, 3)
    rule = AutoApproveRule.objects.get()
    learning.accept(rule, by=admin, expires_at=timezone.now() + timedelta(hours=1), max_hits=10)
    return rule


def test_it_proposes_a_rule_only_at_the_bar(approver, no_enqueue):
    first = approve_credits(approver, 2)
    assert not AutoApproveRule.objects.exists()
    third = approve_credits(approver, 1)
    rule = AutoApproveRule.objects.get()
    assert rule.status == AutoApproveRule.Status.PROPOSED
    # The narrowest band 15 falls in (25 = a quarter of the 100 limit), and the reason.
    assert learning.describe(rule.tool, rule.pattern) == (
        "grant_goodwill_credit: amount <= 25, reason = 'late delivery'"
    )
    assert rule.evidence == [str(a.pk) for a in first + third]
    assert [e.to_status for e in rule.events.all()] == ["proposed"]


def test_an_edit_or_rejection_restarts_the_record(approver, no_enqueue):
    approve_credits(approver, 2)
    _run, approval = gated("goodwill-desk", CREDIT, learning=LEARNS)
    decide(
        approval.pk, user=approver, decision="approve", arguments={**approval.args, "amount": 10}
    )
    approve_credits(approver, 2)
    assert not AutoApproveRule.objects.exists()
    record = next(r for r in TrackRecord.objects.all() if r.pattern[0]["value"] == "25")
    assert (record.streak, record.edits, record.approvals) == (2, 1, 4)


def test_nothing_changes_until_an_admin_accepts(approver, no_enqueue):
    approve_credits(approver, 3)
    run = credit_run()
    assert drive(run) == Run.Status.WAITING  # proposed is not active


def test_an_accepted_rule_approves_a_matching_call_and_says_so(active_rule, no_enqueue):
    run = credit_run(amount="20")
    assert drive(run) == Run.Status.SUCCEEDED
    approval = Approval.objects.get(run=run)
    assert approval.status == Approval.Status.APPROVED and approval.decided_by is None
    assert RuleHit.objects.get(approval=approval).rule == active_rule
    gate = run.steps.get(kind=Step.Kind.GATE)
    assert gate.data["approved_by_rule"] == active_rule.pk
    tool_step = run.steps.get(kind=Step.Kind.TOOL)
    assert tool_step.data["approval"] == str(approval.pk) and not tool_step.data["is_error"]
    assert run.steps.filter(kind=Step.Kind.DECISION).count() == 0  # nobody was asked
    assert not run.steps.filter(data__event="paused").exists()
    active_rule.refresh_from_db()
    assert active_rule.hits == 1


def test_a_call_outside_the_pattern_is_still_gated(active_rule, no_enqueue):
    assert drive(credit_run(amount="30")) == Run.Status.WAITING  # above 25
    assert drive(credit_run(reason="other")) == Run.Status.WAITING  # another reason
    assert drive(credit_run(amount="150")) == Run.Status.WAITING  # over the threshold


def test_a_rejection_in_a_sampled_check_revokes_the_rule(active_rule, approver, no_enqueue):
    run = credit_run(check_rate=1.0)
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.sampled and RuleHit.objects.get(approval=approval).checked
    assert f"sampled check of auto-approve rule #{active_rule.pk}" in approval.explanation
    decide(approval.pk, user=approver, decision="reject", reason="not for this customer")
    active_rule.refresh_from_db()
    assert active_rule.status == AutoApproveRule.Status.REVOKED
    event = active_rule.events.last()
    assert event.to_status == "revoked" and event.approval_id == approval.pk
    assert "rejected a call it covers in a sampled check" in event.cause
    # The next matching call goes to a person again.
    assert drive(credit_run()) == Run.Status.WAITING


def test_admins_are_told_of_a_revocation(
    active_rule, approver, admin, no_enqueue, django_capture_on_commit_callbacks, eager
):
    run = credit_run(check_rate=1.0)
    drive(run)
    approval = Approval.objects.get(run=run)
    admin.email = "adele@example.com"
    admin.save()
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        decide(approval.pk, user=approver, decision="reject", reason="no")
    subjects = [m.subject for m in mail.outbox if "adele@example.com" in m.to]
    assert any(f"rule #{active_rule.pk} revoked" in s for s in subjects), subjects


def test_an_edit_in_a_sampled_check_revokes_the_rule(active_rule, approver, no_enqueue):
    run = credit_run(check_rate=1.0)
    drive(run)
    approval = Approval.objects.get(run=run)
    decide(approval.pk, user=approver, decision="approve", arguments={**approval.args, "amount": 5})
    active_rule.refresh_from_db()
    assert active_rule.status == AutoApproveRule.Status.REVOKED
    assert "edited" in active_rule.cause


def test_an_unedited_approval_in_a_sampled_check_keeps_the_rule(active_rule, approver, no_enqueue):
    run = credit_run(check_rate=1.0)
    drive(run)
    decide(Approval.objects.get(run=run).pk, user=approver, decision="approve")
    active_rule.refresh_from_db()
    assert active_rule.status == AutoApproveRule.Status.ACTIVE


def test_a_rule_ends_at_its_expiry_and_its_cap(active_rule, no_enqueue):
    AutoApproveRule.objects.filter(pk=active_rule.pk).update(hits=10)
    assert drive(credit_run()) == Run.Status.WAITING  # the cap: matches nothing more
    assert learning.expire_due() == 1
    active_rule.refresh_from_db()
    assert active_rule.status == AutoApproveRule.Status.EXPIRED
    assert "cap" in active_rule.cause
    assert RuleEvent.objects.filter(rule=active_rule, to_status="expired").exists()


def test_the_setting_switches_learning_off(active_rule, settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "LEARNING_POLICY": False}
    assert drive(credit_run()) == Run.Status.WAITING


def test_irreversible_high_risk_calls_are_never_learned_nor_matched(approver, admin, no_enqueue):
    payer = {
        **LEARNS,
        "match_fields": {},
    }
    for _ in range(4):
        run, approval = gated("test-payer", {"to": "acme", "amount": "10"}, learning=payer)
        decide(approval.pk, user=approver, decision="approve")
    assert not TrackRecord.objects.filter(tool="test_transfer").exists()
    assert not AutoApproveRule.objects.exists()
    # Even a rule forced into the table (no admin could accept it) matches nothing.
    forced = AutoApproveRule.objects.create(
        agent="test-payer",
        tool="test_transfer",
        pattern=[],
        status=AutoApproveRule.Status.ACTIVE,
        accepted_at=timezone.now(),
        expires_at=timezone.now() + timedelta(hours=1),
        max_hits=10,
    )
    tool = get_tool("test_transfer")
    assert learning.covering_rule("test-payer", tool, {"to": "acme", "amount": "1"}, "high") is None
    with pytest.raises(learning.RuleError):
        forced.status = AutoApproveRule.Status.PROPOSED
        learning.accept(forced, by=admin, expires_at=timezone.now() + timedelta(1), max_hits=1)
    run = launch("test-payer", {"to": "acme", "amount": "1"}, learning=payer)
    assert drive(run) == Run.Status.WAITING


def test_agents_that_do_not_learn_ask_the_database_nothing_more(
    django_assert_num_queries, no_enqueue
):
    run = launch("test-payer", {"to": "acme", "amount": "10"})
    item = {"id": "t1", "llm_seq": 2, "args": {"to": "acme", "amount": Decimal(10)}}
    with django_assert_num_queries(0):
        assert engine_gates.gate_for_call(run, item, get_tool("test_transfer")) is not None


def test_seeded_sampling_is_the_same_for_the_same_call(settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "GATE_SAMPLING_SEED": "s1"}
    run = launch("test-notifier", {"to": "x", "amount": "1"})
    tool = get_tool("test_use_region")
    draws = []
    for i in range(40):
        item = {"id": "t", "llm_seq": 2, "args": {"region": f"eu-{i}"}}
        first = cascade.sampler(run, item, tool, "borderline").random()
        second = cascade.sampler(run, item, tool, "borderline").random()
        assert first == second
        draws.append(first < 0.5)
    assert 5 < sum(draws) < 35  # a share, not all or nothing


def test_executed_credit_ran_once(active_rule, no_enqueue):
    mail.outbox.clear()
    run = credit_run()
    drive(run)
    assert [m.subject for m in mail.outbox] == ["A goodwill credit of 15 for you"]
    assert EXECUTED == []  # the demo tool e-mails; test tools were not involved


def test_a_run_with_a_rule_approved_call_replays_identically(active_rule, no_enqueue):
    run = credit_run()
    assert drive(run) == Run.Status.SUCCEEDED
    result = replay(run)
    assert result.identical, result.summary


def test_a_rule_never_stands_in_for_a_quorum(active_rule, no_enqueue):
    run = credit_run()
    config = run.agent_config
    config["gates"]["quorum_from"] = "medium"
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    assert drive(run) == Run.Status.WAITING


def test_the_approval_page_of_a_rule_approved_call_says_so(active_rule, client, viewer):
    run = credit_run()
    drive(run)
    client.force_login(viewer)
    approval = Approval.objects.get(run=run)
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert f"approved by rule #{active_rule.pk}" in page
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"approved by rule #{active_rule.pk}" in run_page


def test_an_agent_that_learns_samples_borderline_calls_by_default(settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "GATE_SAMPLING_SEED": "default-rate"}
    tag = get_tool("test_tag_ticket")  # reversible, low reach: borderline
    learns = launch("test-notifier", {"to": "x", "amount": "1"}, learning=LEARNS)
    plain = launch("test-notifier", {"to": "x", "amount": "1"})

    def sampled(run) -> int:
        calls = ({"id": "t", "llm_seq": 2, "args": {"ticket": f"T-{i}"}} for i in range(300))
        return sum(engine_gates.gate_for_call(run, item, tag) is not None for item in calls)

    assert 25 < sampled(learns) < 70  # about 15 %
    assert sampled(plain) == 0  # GateRules.sample_rate is 0 unless declared


def test_an_agent_that_learns_pays_one_query_per_call_with_side_effects(
    django_assert_num_queries, no_enqueue
):
    run = credit_run()
    tool = get_tool("grant_goodwill_credit")
    args = tool.validate({**CREDIT})
    with django_assert_num_queries(1):  # the covering rule's lookup
        assert engine_gates.gate_for_call(run, {"id": "t", "llm_seq": 2, "args": args}, tool)
