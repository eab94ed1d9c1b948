"""What the learning gate policy remembers (approvals/learning/rules.py): the record of people's
decisions per (agent, tool, argument pattern), the auto-approve rules it proposes, their
history, every call a rule approved or was checked on, post-hoc reviews of ungated calls, and
the overrides a "should have been gated" review leaves behind.

A rule's status changes only through AutoApproveRule.transition_to (compare-and-set), and
every change leaves a RuleEvent row: the history is never rewritten, only appended to.
"""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone


class TrackRecord(models.Model):
    """People's decisions on the calls of one (agent, tool) that fall in one pattern."""

    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=64)
    pattern_key = models.CharField(max_length=64)  # learning.key(pattern)
    pattern = models.JSONField(default=list)
    # Consecutive approvals without an edit, newest last, and the approvals they are.
    streak = models.PositiveIntegerField(default=0)
    evidence = models.JSONField(default=list)
    approvals = models.PositiveIntegerField(default=0)
    edits = models.PositiveIntegerField(default=0)
    rejections = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "tool", "pattern_key"], name="track_record_once_per_pattern"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.tool} {self.pattern_key}: streak {self.streak}"


class AutoApproveRule(models.Model):
    """A rule that lets matching calls of one (agent, tool) run without a person. Proposed by
    the system from a track record, active only once an admin accepted it."""

    class Status(models.TextChoices):
        PROPOSED = "proposed"
        ACTIVE = "active"
        DECLINED = "declined"
        REVOKED = "revoked"
        EXPIRED = "expired"

    TRANSITIONS: dict[str, set[str]] = {
        Status.PROPOSED: {Status.ACTIVE, Status.DECLINED},
        Status.ACTIVE: {Status.REVOKED, Status.EXPIRED},
    }

    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=64)
    pattern_key = models.CharField(max_length=64)
    pattern = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    # The approvals (consecutive, unedited) the proposal rests on.
    evidence = models.JSONField(default=list)
    proposed_at = models.DateTimeField(default=timezone.now)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    # Scope: the rule approves at most max_hits calls, and nothing after expires_at.
    max_hits = models.PositiveIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    hits = models.PositiveIntegerField(default=0)
    ended_at = models.DateTimeField(null=True, blank=True)
    cause = models.TextField(blank=True, help_text="Why it was declined, revoked or expired.")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["agent", "tool", "status"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["proposed", "active", "declined", "revoked", "expired"]),
                name="auto_rule_status_valid",
            ),
            # An active rule always has its scope: an admin gave both when accepting.
            models.CheckConstraint(
                condition=~Q(status="active")
                | Q(expires_at__isnull=False, max_hits__isnull=False, accepted_at__isnull=False),
                name="auto_rule_active_has_scope",
            ),
        ]

    def __str__(self) -> str:
        return f"rule #{self.pk} {self.tool} ({self.status})"

    def transition_to(self, new: str, *, by=None, cause: str = "", approval=None, **fields) -> bool:
        """Compare-and-set from the status this object holds; False when another request
        moved the rule first. Appends the RuleEvent that is the rule's history."""
        old = self.status
        if new not in self.TRANSITIONS.get(old, set()):
            return False
        now = timezone.now()
        if new in (self.Status.DECLINED, self.Status.REVOKED, self.Status.EXPIRED):
            fields.setdefault("ended_at", now)
            fields.setdefault("cause", cause)
        moved = AutoApproveRule.objects.filter(pk=self.pk, status=old).update(status=new, **fields)
        if not moved:
            return False
        for name, value in fields.items():
            setattr(self, name, value)
        self.status = new
        RuleEvent.objects.create(
            rule=self, from_status=old, to_status=new, at=now, by=by, cause=cause, approval=approval
        )
        return True

    def count_hit(self) -> None:
        AutoApproveRule.objects.filter(pk=self.pk).update(hits=F("hits") + 1)


class RuleEvent(models.Model):
    """One change of a rule's status: who or what, when, and why."""

    rule = models.ForeignKey(AutoApproveRule, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16)
    at = models.DateTimeField(default=timezone.now)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cause = models.TextField(blank=True)
    approval = models.ForeignKey(
        "approvals.Approval", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"rule #{self.rule_id}: {self.from_status or '-'} -> {self.to_status}"


class RuleHit(models.Model):
    """A call a rule covered: approved by it (`checked` False), or sent to a person anyway as
    a sampled check of it (`checked` True). The approval is the call's audit record."""

    rule = models.ForeignKey(AutoApproveRule, on_delete=models.PROTECT, related_name="uses")
    approval = models.OneToOneField(
        "approvals.Approval", on_delete=models.CASCADE, related_name="rule_use"
    )
    checked = models.BooleanField(default=False)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        what = "checked" if self.checked else "approved"
        return f"rule #{self.rule_id} {what} {self.approval_id}"


class GateOverride(models.Model):
    """After a "should have been gated" review: every call of this agent's tool goes to a
    person until an admin clears it."""

    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=64)
    review = models.ForeignKey(
        "approvals.PostHocReview", on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["agent", "tool"])]

    def __str__(self) -> str:
        return f"gate every {self.tool} of {self.agent}"


class PostHocReview(models.Model):
    """A call that ran without a person, sampled for review after the fact."""

    class Verdict(models.TextChoices):
        PENDING = "pending"
        FINE = "fine"
        SHOULD_HAVE_BEEN_GATED = "should_have_been_gated"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    # No foreign key in the database: Postgres partitions the timeline (runs/migrations/0028),
    # and a key to a partitioned table must hold the partition key. The step is never
    # rewritten; when its run is archived (runs/retention/) the review keeps its id.
    step = models.OneToOneField(
        "runs.Step", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=64)
    args = models.JSONField(default=dict)
    rule = models.ForeignKey(
        AutoApproveRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="reviews"
    )
    sampled_at = models.DateTimeField(default=timezone.now)
    verdict = models.CharField(max_length=32, choices=Verdict.choices, default=Verdict.PENDING)
    reason = models.TextField(blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-sampled_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(verdict__in=["pending", "fine", "should_have_been_gated"]),
                name="posthoc_verdict_valid",
            )
        ]

    def __str__(self) -> str:
        return f"review of {self.tool} in {self.run_id}: {self.verdict}"

    @property
    def is_incident(self) -> bool:
        return self.verdict == self.Verdict.SHOULD_HAVE_BEEN_GATED
