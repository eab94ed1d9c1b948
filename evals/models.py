"""Regression datasets made of people's decisions, and the regression runs that replay them.

A Dataset belongs to one agent (its team's, through accounts/teams.py). Each Case is one
gated call a person decided: the run's input, the conversation the model had when it proposed
the call (its context), the call it proposed, and what the person wanted: approved as is,
approved with edited arguments, or rejected. Or one final answer the agent's verifier failed:
the conversation before the answer, the answer (`proposed_args["answer"]`, `tool` names the
verifier), and what is wanted: an answer that passes the verifier. A case copies all of it,
so it outlives the run (retention, deletion) and a dataset can be replayed against any later
version of the agent.

A RegressionRun replays every case of a dataset against one agent version (evals/rehearsal.py)
and keeps a CaseResult per case: pass or fail, with what the agent proposed and how it differs.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models

from accounts import teams


class ScopedQuerySet(models.QuerySet):
    """Rows of the agents a user reaches with a power (the one rule: accounts/teams.py)."""

    field = "agent"

    def reachable_by(self, user, power: str):
        agents = teams.scope(user, power)
        return self.none() if agents.nothing else self.filter(agents.q(self.field))


class Dataset(models.Model):
    name = models.SlugField(max_length=80, unique=True, help_text="Used on the command line.")
    agent = models.CharField(max_length=64, db_index=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ScopedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Case(models.Model):
    class Verdict(models.TextChoices):
        APPROVED = "approved"  # the proposed call, as it was
        EDITED = "edited"  # the call with the approver's arguments
        REJECTED = "rejected"  # not this call
        VERIFIER_FAILED = "verifier_failed", "verifier failed"  # an answer that passes it

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="cases")
    # Where it came from; the case keeps its own copy of everything it needs.
    source_run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_approval = models.ForeignKey(
        "approvals.Approval", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_seq = models.PositiveIntegerField(
        null=True, blank=True, help_text="The failed verify step of a verifier's case."
    )
    input = models.JSONField(default=dict)
    context = models.JSONField(default=list, help_text="The conversation before the model turn.")
    state = models.JSONField(default=dict, help_text="The engine's state at that point.")
    tool = models.CharField(max_length=64)
    proposed_args = models.JSONField(default=dict)
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    expected_args = models.JSONField(default=dict)
    reason = models.TextField(blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    added_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "source_approval"], name="evals_case_once_per_dataset"
            ),
            models.UniqueConstraint(
                fields=["dataset", "source_run", "source_seq"],
                condition=models.Q(source_seq__isnull=False),
                name="evals_verifier_case_once_per_dataset",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    verdict__in=["approved", "edited", "rejected", "verifier_failed"]
                ),
                name="evals_case_verdict_known",
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.pk}: {self.verdict} {self.tool}"


class RegressionRun(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="regression_runs")
    agent = models.CharField(max_length=64, db_index=True, help_text="The agent replayed.")
    provider = models.CharField(max_length=32)
    version = models.JSONField(default=dict, help_text="model, prompt and tools' hashes")
    fingerprint = models.CharField(max_length=16, db_index=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cases = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0))
    error = models.TextField(blank=True, help_text="Why the run itself failed, if it did.")

    objects = ScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"regression run {self.pk} of {self.dataset_id}"

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.cases if self.cases else None


class CaseResult(models.Model):
    class Outcome(models.TextChoices):
        PASS = "pass"
        FAIL = "fail"
        ERROR = "error"  # the case could not be replayed (its input no longer valid, ...)

    regression_run = models.ForeignKey(
        RegressionRun, on_delete=models.CASCADE, related_name="results"
    )
    case = models.ForeignKey(Case, null=True, on_delete=models.SET_NULL, related_name="results")
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    # What the agent proposed: a tool and its arguments, or nothing (it answered).
    proposed_tool = models.CharField(max_length=64, blank=True)
    proposed_args = models.JSONField(null=True, blank=True)
    diff = models.JSONField(default=list, help_text="[{field, expected, proposed}]")
    detail = models.TextField(blank=True)
    said = models.TextField(blank=True, help_text="The model's text in its last turn.")
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0))

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(fields=["regression_run", "case"], name="evals_result_once")
        ]

    def __str__(self) -> str:
        return f"{self.outcome} (case {self.case_id})"

    @property
    def passed(self) -> bool:
        return self.outcome == self.Outcome.PASS
