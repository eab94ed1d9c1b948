"""Post-hoc review on by default (approvals/learning/review.py): every agent's ungated calls
with side effects are sampled, up to a number a day (the setting, or the agent's
`review_per_day`), the sample is stable, and the review page shows each agent's override
rate (the share of reviewed calls the reviewer said should have been gated)."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals.gates.config import problems
from approvals.learning import review
from approvals.models import PostHocReview
from runs.models import Run, Step
from tests.runs.factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_a_day(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "REVIEW_SAMPLE_PER_DAY": 3}


def tool_steps(run: Run, n: int, *, at=None, tool="email_report", **data) -> list[int]:
    """`n` tool steps of `run` as the engine records them (no person approved them)."""
    with transaction.atomic():
        locked = Run.locked(run.pk)
        for i in range(n):
            locked.append_step(
                Step.Kind.TOOL,
                {"tool": tool, "args": {"to": f"boss{i}@example.com"}, **data},
                created_at=at or timezone.now(),
            )
    return list(run.steps.filter(kind=Step.Kind.TOOL).values_list("pk", flat=True))


def test_every_agent_is_sampled_up_to_its_daily_number(three_a_day, operator, no_enqueue):
    # sql-analyst declares no learning: it is sampled all the same (it used not to be).
    run = make_run(operator)
    assert run.agent_config["gates"].get("learning") is None
    today = tool_steps(run, 8)
    assert review.refresh_queue() == 3
    queued = set(PostHocReview.objects.values_list("step_id", flat=True))
    # The day's sample is the steps the seeded draw ranks lowest: stable, not drawn again.
    assert queued == set(sorted(today, key=review.rank)[:3])
    assert review.refresh_queue() == 0
    tool_steps(run, 4)
    assert review.refresh_queue() == 0  # today's three are taken
    # Yesterday is a day of its own.
    yesterday = timezone.now() - timedelta(days=1)
    other = make_run(operator)
    tool_steps(other, 2, at=yesterday)
    assert review.refresh_queue() == 2
    assert (
        PostHocReview.objects.filter(
            step__created_at__lt=timezone.now() - timedelta(hours=23)
        ).count()
        == 2
    )
    assert set(PostHocReview.objects.values_list("agent", "tool")) == {
        ("sql-analyst", "email_report")
    }


def test_calls_a_person_approved_failed_or_without_side_effects_are_not_sampled(
    three_a_day, operator, no_enqueue
):
    run = make_run(operator)
    tool_steps(run, 2, tool="run_query")  # read-only
    tool_steps(run, 2, is_error=True)
    approved = make_run(operator)
    # An approval no rule decided: a person did.
    tool_steps(approved, 2, approval="6f1b1d3e-2a7c-4c55-9b8a-0d2f0b1c9a11")
    assert review.refresh_queue() == 0


def test_an_agent_sets_its_own_number_or_none(three_a_day, operator, no_enqueue):
    run = make_run(operator)
    config = {**run.agent_config, "gates": {**run.agent_config["gates"], "review_per_day": 0}}
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    tool_steps(run, 5)
    assert review.refresh_queue() == 0
    config["gates"]["review_per_day"] = 4
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    assert review.refresh_queue() == 4


def test_review_per_day_is_checked_with_the_gate_rules():
    snapshot = {"gates": {"review_per_day": -1}, "tools": []}
    assert problems(snapshot) == ["review_per_day must be a whole number from 0 to 10000, not -1"]
    assert problems({"gates": {"review_per_day": 7}, "tools": []}) == []


def _reviews(run: Run, verdicts: list[str]) -> None:
    pks = tool_steps(run, len(verdicts))
    for pk, verdict in zip(pks[-len(verdicts) :], verdicts, strict=True):
        PostHocReview.objects.create(
            run=run,
            step_id=pk,
            agent=run.agent,
            tool="email_report",
            verdict=verdict,
            reviewed_at=None if verdict == "pending" else timezone.now(),
        )


def test_the_override_rate_is_the_share_of_reviewed_calls_found_wrong(
    client, operator, approver, no_enqueue
):
    wrong = "should_have_been_gated"
    _reviews(make_run(operator), ["fine", "fine", "fine", wrong, "pending"])
    _reviews(make_run(operator, agent="refund-desk"), ["pending", "pending"])
    rates = {
        r.agent: (r.reviewed, r.overridden, r.pending, r.rate)
        for r in review.override_rates(PostHocReview.objects.all(), timezone.now() - timedelta(1))
    }
    assert rates == {"sql-analyst": (4, 1, 1, 0.25), "refund-desk": (0, 0, 2, None)}
    client.force_login(approver)
    page = client.get(reverse("approvals:review")).content.decode()
    assert (
        '<tr data-agent="sql-analyst" class="warn"><td>sql-analyst</td><td>4</td><td>1</td>' in page
    )
    assert '<td class="override-rate">25%</td>' in page
    assert (
        '<tr data-agent="refund-desk"><td>refund-desk</td><td>0</td><td>0</td>'
        '<td class="override-rate">—</td><td>2</td>' in page
    )
