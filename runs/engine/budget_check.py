"""The budgets a run answers to (its agent's, its agent's teams') at a step boundary
(runs/budgets/models.py has the rules and the spend).
Why and how: docs/design/modules.md."""

from django.db import transaction
from django.utils import timezone

from ..budgets import models as budgets
from ..models import Run, Step
from . import gates, humans, owned, replaying
from .owned import Work
from .terminator import terminate


def at_boundary(work: Work) -> None:
    if not work.has_budget or replaying.current() is not None:
        return  # a replay re-enacts a recorded run: it spends nothing new
    over = budgets.most_severe(work.run.agent)
    if not over:
        return
    for state in over:
        for threshold in state.crossed:
            _note_crossing(work, state, threshold)
    worst = over[0]
    if worst.level == budgets.STOP:
        terminate(
            work,
            Run.Termination.BUDGET,
            f"budget exceeded: {worst.describe()}; runs stop at {worst.budget.stop_percent}%",
        )
    if worst.level == budgets.APPROVE:
        policy = gates.current()
        question = f"Budget exceeded: continue? {worst.describe()}."
        explanation = (
            f"budget: past {worst.budget.approve_percent}% of the {worst.budget.periodic} "
            f"budget a person decides whether each run goes on (runs stop at "
            f"{worst.budget.stop_percent}%)"
        )
        humans.go_on_or_stop(
            work,
            lambda: policy.budget_answer(work.run, worst.key),
            lambda: policy.open_budget_question(work.run, worst.key, question, explanation),
        )


def _note_crossing(work: Work, state: budgets.BudgetState, threshold: str) -> None:
    """The first time this period that anyone sees `threshold` crossed: a guard step here,
    and people told. The crossing's row and the step commit together (or neither)."""
    with transaction.atomic():
        crossing = budgets.record_crossing(state, threshold, work.run)
        if crossing is None:
            return
        budget = state.budget
        owned.append(
            work,
            Step.Kind.GUARD,
            {
                "guard": "budget",
                "threshold": threshold,
                "percent": getattr(budget, f"{threshold}_percent"),
                "budget": budget.pk,
                "agent": budget.agent,
                **(
                    {"team": budget.team.name, "agents": list(state.agents)}
                    if budget.team is not None
                    else {}
                ),
                "period": budget.period,
                "time_zone": budget.time_zone,
                "period_start": state.start.isoformat(),
                "amount_usd": str(budget.amount_usd),
                "spent_usd": str(state.spent_usd),
                "noticed_at": timezone.now().isoformat(),
            },
            {},
        )
        gates.current().budget_crossed(work.run, crossing.pk)
