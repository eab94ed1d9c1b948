"""Thousands of decisions through the learning gate policy, by scripted approvers.

Each call goes the engine's way through the gate interface (gate_for_call, open_gate) and
each person decides through the real decision service. An admin accepts every proposal at
once (the most trusting admin there is). Three approvers share the queue:

- careful: approves credits of up to 20 for a late delivery, edits larger ones down, rejects
  the rest ("other");
- rubber-stamper: approves everything unedited;
- adversarial: approves long runs of anything, including irreversible high-risk transfers,
  then rejects one at random, to get rules proposed for what it will later contradict.

Then it checks from the records alone that rules were proposed only where the record
supports them, revoked on the first contradicting decision, never covered an irreversible
high-risk call, and that every auto-approved call is traceable to its rule.
"""

import os
import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agentkit.tools import get_tool
from approvals import engine_gates
from approvals.decisions import decide
from approvals.learning import rules as learning
from approvals.models import Approval, AutoApproveRule, RuleHit
from runs.models import Step
from tests.conftest import make_user

from ..conftest import launch

pytestmark = pytest.mark.django_db

# 450 in the suite: every promise below is checked (three shifts), in about 25 s.
# bench/learning_simulation.py runs it with thousands (SIM_DECISIONS); any size works, the
# expectations follow the shifts worked.
DECISIONS = int(os.environ.get("SIM_DECISIONS", 450))
# Calls in a row decided by one approver (careful, rubber-stamper, adversary, careful...).
SHIFT = 150
LEARNS = {
    "bar": 30,
    "bands": [0.1, 0.25, 0.5, 1.0],
    "match_fields": {"grant_goodwill_credit": ["reason"]},
    "check_rate": 0.15,
    "default_expiry_seconds": 3600,
    "default_max_hits": 10_000,
}


def careful(args: dict, rng: random.Random) -> tuple[str, dict | None]:
    if args.get("reason") == "other":
        return "reject", None
    if Decimal(str(args["amount"])) > 20:
        return "approve", {**args, "amount": "20"}
    return "approve", None


def rubber_stamper(args: dict, rng: random.Random) -> tuple[str, dict | None]:
    return "approve", None


def adversarial(args: dict, rng: random.Random) -> tuple[str, dict | None]:
    return ("reject", None) if rng.random() < 0.02 else ("approve", None)


# Thousands of decisions through the real policy: CPU-bound, minutes on a loaded runner.
@pytest.mark.timeout(900)
def test_thousands_of_decisions_keep_the_promises(django_user_model, no_enqueue, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "GATE_SAMPLING_SEED": "simulation"}
    rng = random.Random(19)
    admin = make_user(django_user_model, "adm", "admin")
    people = {
        "careful": (make_user(django_user_model, "carla", "approver"), careful),
        "stamper": (make_user(django_user_model, "sam", "approver"), rubber_stamper),
        "adversary": (make_user(django_user_model, "eve", "approver"), adversarial),
    }
    credit_run = launch(
        "goodwill-desk",
        {"customer_email": "a@example.com", "amount": "5", "reason": "late delivery"},
        learning=LEARNS,
    )
    payer_run = launch("test-payer", {"to": "acme", "amount": "5"}, learning=LEARNS)
    credit, transfer = get_tool("grant_goodwill_credit"), get_tool("test_transfer")

    decided = auto = 0
    seq = 10
    while decided < DECISIONS:
        seq += 1
        # The shift decides who is on the queue: long stretches of one approver each.
        who = ("careful", "stamper", "adversary")[(seq // SHIFT) % 3]
        user, script = people[who]
        if rng.random() < 0.2:
            run, tool = payer_run, transfer
            args = {"to": "acme", "amount": Decimal(rng.choice(["5", "40", "300"]))}
        else:
            run, tool = credit_run, credit
            args = {
                "customer_email": f"c{rng.randrange(40)}@example.com",
                "amount": Decimal(rng.choice(["5", "8", "15", "18", "40", "90"])),
                "reason": rng.choice(["late delivery", "late delivery", "damaged item", "other"]),
            }
        run.refresh_from_db()
        item = {"id": f"sim-{seq}", "llm_seq": seq, "args": tool.validate(args)}
        gate = engine_gates.gate_for_call(run, item, tool)
        assert gate is not None  # both tools are gated by the base table
        approval = Approval.objects.get(pk=engine_gates.open_gate(run, item, gate))
        if approval.status == Approval.Status.APPROVED:
            auto += 1
            continue
        decision, edited = script(approval.args, rng)
        decide(
            approval.pk,
            user=user,
            decision=decision,
            arguments=edited,
            reason="scripted" if decision == "reject" else "",
        )
        decided += 1
        # The most trusting admin: accepts whatever is proposed, at once.
        for rule in AutoApproveRule.objects.filter(status=AutoApproveRule.Status.PROPOSED):
            learning.accept(
                rule, by=admin, expires_at=timezone.now() + timedelta(hours=1), max_hits=10_000
            )

    rules = list(AutoApproveRule.objects.all())
    shifts = seq // SHIFT  # whole shifts worked: what the record must show depends on them
    if shifts >= 2:
        assert rules, "the rubber-stamper's stretch earns rules"
        assert auto > 0, "accepted rules approved calls"
    if shifts >= 3:
        assert any(r.status == AutoApproveRule.Status.REVOKED for r in rules), (
            "the adversary's stretch contradicts a rule it earned"
        )

    for rule in rules:
        _proposed_only_where_the_record_supports_it(rule)
        _revoked_on_the_first_contradiction(rule)
        # Never an irreversible high-risk tool.
        assert rule.tool == "grant_goodwill_credit"

    # Every auto-approved call is traceable to its rule, in the table and in the timeline.
    by_rule = Approval.objects.filter(status=Approval.Status.APPROVED, decided_by__isnull=True)
    assert by_rule.count() == auto
    hits = {h.approval_id: h for h in RuleHit.objects.filter(checked=False)}
    for approval in by_rule:
        hit = hits[approval.pk]
        assert approval.tool == "grant_goodwill_credit"
        assert learning.matches(hit.rule.pattern, approval.args)
        gate = Step.objects.get(run=approval.run, seq=approval.gate_seq)
        assert gate.kind == Step.Kind.GATE and gate.data["approved_by_rule"] == hit.rule_id
        assert hit.at < (hit.rule.ended_at or timezone.now())
    for rule in rules:
        assert rule.hits == sum(1 for h in hits.values() if h.rule_id == rule.pk)
    print(f"\n{decided} decisions, {auto} auto-approved, {len(rules)} rules")


def _human_decisions(rule: AutoApproveRule, before) -> list[Approval]:
    """The people's decisions on calls the rule's pattern covers, oldest first."""
    decided = Approval.objects.filter(
        run__agent=rule.agent,
        tool=rule.tool,
        decided_by__isnull=False,
        decided_at__lte=before,
    ).order_by("decided_at", "requested_at")
    return [a for a in decided if learning.matches(rule.pattern, a.args)]


def _proposed_only_where_the_record_supports_it(rule: AutoApproveRule) -> None:
    last = _human_decisions(rule, rule.proposed_at)[-LEARNS["bar"] :]
    assert len(last) == LEARNS["bar"]
    for approval in last:
        assert approval.status == Approval.Status.APPROVED and approval.edited_args is None
    assert [str(a.pk) for a in last] == rule.evidence


def _revoked_on_the_first_contradiction(rule: AutoApproveRule) -> None:
    if rule.accepted_at is None:
        return
    after = [
        a
        for a in _human_decisions(rule, timezone.now())
        if a.decided_at >= rule.accepted_at
        and (a.status == Approval.Status.REJECTED or a.edited_args is not None)
    ]
    if not after:
        assert rule.status == AutoApproveRule.Status.ACTIVE
        return
    first = after[0]
    assert rule.status == AutoApproveRule.Status.REVOKED
    assert rule.events.get(to_status="revoked").approval_id == first.pk
    assert not RuleHit.objects.filter(rule=rule, at__gt=first.decided_at).exists()
