"""Approval: a gated action or a question waiting for a person's decision."""

import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts import teams
from agentkit import pii
from agentkit.tools import Tool, get_tool

from .gates.config import ON_EXPIRY

# Apps above this one whose approvals name tools that are not in the registry (an external
# agent's: gateway/) add a finder here at start-up; a finder answers None for any other.
TOOL_FINDERS: list[Callable[["Approval"], Tool | None]] = []


class ApprovalQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=Approval.Status.PENDING)

    def visible_to(self, user):
        """Approvals `user` may read: those of runs on agents their teams reach."""
        agents = teams.scope(user, teams.Power.VIEW)
        return self.none() if agents.nothing else self.filter(agents.q("run__agent"))

    def decidable_by(self, user):
        """Approvals whose agent `user` may decide for (role and team); the finer rules
        (named approvers, four-eyes, quorum) are approvals/permissions.py's."""
        agents = teams.scope(user, teams.Power.DECIDE)
        return self.none() if agents.nothing else self.filter(agents.q("run__agent"))


class Approval(models.Model):
    class Kind(models.TextChoices):
        ACTION = "action"  # a proposed tool call
        QUESTION = "question"  # the agent (or the engine) asks the operator
        PLAN = "plan"  # the agent's plan, approved once as a whole (approvals/plans/models.py)

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        ANSWERED = "answered"
        CANCELLED = "cancelled"  # its run was cancelled before anyone decided

    class Risk(models.TextChoices):
        NONE = "none"
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"
        CRITICAL = "critical"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approvals")
    gate_seq = models.PositiveIntegerField(help_text="Timeline seq of the gate step.")
    llm_seq = models.PositiveIntegerField(help_text="Seq of the model step that proposed it.")
    tool_use_id = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ACTION)
    # The exact call shown to the approver, as parsed and validated by the server.
    tool = models.CharField(max_length=64, blank=True)
    args = models.JSONField(default=dict)
    args_hash = models.CharField(max_length=64, blank=True)
    question = models.TextField(blank=True)
    options = models.JSONField(default=list, blank=True)
    explanation = models.TextField(help_text="Why it was gated, in plain words.")
    risk = models.CharField(max_length=16, choices=Risk.choices, default=Risk.MEDIUM)
    # critical = 0 ... none = 4: ascending puts the riskiest first. Kept by the database, so
    # the queue's order is an index's (approval_queue_idx), not a sort of every pending row.
    risk_rank = models.GeneratedField(
        expression=models.Case(
            *[
                models.When(risk=r, then=models.Value(i))
                for i, r in enumerate(["critical", "high", "medium", "low", "none"])
            ],
            default=models.Value(99),
        ),
        output_field=models.SmallIntegerField(),
        db_persist=True,
    )
    sampled = models.BooleanField(default=False, help_text="Gated by sampling, not by a rule.")
    context_summary = models.TextField(blank=True)
    # What the call would change (agentkit/previews.py), computed when the gate opened and
    # replaced when a decision found the data changed since; null: the tool has no preview.
    preview = models.JSONField(null=True, blank=True)
    side_effect = models.ForeignKey(
        "runs.SideEffect", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    edited_args = models.JSONField(null=True, blank=True)
    approved_args_hash = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    on_expiry = models.CharField(max_length=16, default=ON_EXPIRY)
    requested_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The standing grant that approved this call without asking anyone (approvals/grants/models.py).
    # RESTRICT: a decided approval never changes again, so its grant is not deleted under it
    # (grants are revoked, not deleted), unless both go together with their run.
    grant = models.ForeignKey(
        "Grant", null=True, blank=True, on_delete=models.RESTRICT, related_name="approvals"
    )

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["expires_at"]
        indexes = [
            models.Index(fields=["status", "expires_at"]),
            models.Index(fields=["run", "status"]),
            # The queue's "recently decided": the newest ten, read from the index's end (it
            # sorted every decided approval, 171 ms at 5 000 of them).
            models.Index(
                fields=["-decided_at"],
                condition=Q(decided_at__isnull=False),
                name="approval_decided_idx",
            ),
            # The queue, a page at a time (approvals/listing.py).
            models.Index(
                fields=["risk_rank", "expires_at", "id"],
                condition=Q(status="pending"),
                name="approval_queue_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=[
                        "pending",
                        "approved",
                        "rejected",
                        "expired",
                        "answered",
                        "cancelled",
                    ]
                ),
                name="approval_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["action", "question", "plan"]), name="approval_kind_valid"
            ),
            # One approval per proposed call: a re-run of the gate step cannot duplicate it.
            models.UniqueConstraint(
                fields=["run", "llm_seq", "tool_use_id"],
                condition=~Q(tool_use_id=""),
                name="approval_unique_per_call",
            ),
            models.CheckConstraint(
                condition=Q(status="pending") | Q(decided_at__isnull=False),
                name="approval_decided_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool or self.question[:40]} ({self.status})"

    def tool_object(self) -> Tool | None:
        """The tool this approval's call is for: a finder's (TOOL_FINDERS), else the
        registry's."""
        for find in TOOL_FINDERS:
            found = find(self)
            if found is not None:
                return found
        return get_tool(self.tool)

    @property
    def final_args(self) -> dict:
        return self.edited_args if self.edited_args is not None else self.args

    # Risks at which approving asks "are you sure" with the exact effect, whatever the tool.
    CONFIRM_RISKS = frozenset({Risk.HIGH, Risk.CRITICAL})

    def effect(self, args: dict | None = None) -> str:
        """What approving would do, in one line built from the server-parsed arguments
        ("Refund 600.00 on order 42"): the tool's own wording, or its name and arguments."""
        args = self.args if args is None else args
        found = self.tool_object()
        if found is None:
            return f"Call {self.tool}" if self.tool else ""
        return found.effect(args or {})

    def masked(self, value: Any) -> Any:
        """`value` as shown outside the decision card (e-mail, webhooks, Slack, logs): with
        personal data masked when the run's agent has a PII policy. The card itself shows the
        call in full, once, to the person deciding it."""
        return pii.masker((self.run.agent_config or {}).get("pii"))(value)

    @property
    def needs_confirmation(self) -> bool:
        """A high-risk or irreversible action: Approve is not the default-looking button, and
        the decision form's approve asks for a confirmation of the effect first."""
        if self.kind != self.Kind.ACTION:
            return False
        found = self.tool_object()
        return self.risk in self.CONFIRM_RISKS or (found is not None and not found.reversible)

    @property
    def confirmation_grounds(self) -> str:
        """Why approving asks to confirm, in words that are true of this call: "high-risk",
        "irreversible" or "high-risk, irreversible" ("" when it does not ask)."""
        if not self.needs_confirmation:
            return ""
        found = self.tool_object()
        grounds = [f"{self.risk}-risk"] if self.risk in self.CONFIRM_RISKS else []
        if found is not None and not found.reversible:
            grounds.append("irreversible")
        return ", ".join(grounds)

    @property
    def expiry_outcome(self) -> str:
        """What happens if nobody decides before the deadline, in words."""
        if self.on_expiry == "fail":
            return "it expires and the run fails."
        if self.on_expiry == "halt":
            return (
                "it expires and the run halts: nothing more happens until an operator resumes "
                "it (the agent is then told the call was not executed) or cancels it."
            )
        if self.kind == self.Kind.QUESTION:
            return "it expires unanswered and the agent is told so."
        return "it expires: the call is not executed, and the agent is told so."


class ApprovalVote(models.Model):
    """One person's decision on an approval: the audit record of who decided what, and how
    long they had it open. A quorum gate collects several before the approval is decided;
    every other gate has exactly one. Rubber-stamp statistics are computed from these rows."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        ANSWER = "answer"

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="votes")
    # Kept when the user is deleted: the record says who it was.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    decision = models.CharField(max_length=16, choices=Decision.choices)
    # The arguments this vote approved (after any edit); null for reject and answer.
    arguments = models.JSONField(null=True, blank=True)
    edited = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    opened_at = models.DateTimeField(
        null=True, blank=True, help_text="When the decider first opened the approval."
    )
    decided_at = models.DateTimeField(default=timezone.now)
    seconds_open = models.FloatField(
        null=True, blank=True, help_text="From first opened to decided; null if never opened."
    )

    class Meta:
        ordering = ["decided_at"]
        indexes = [models.Index(fields=["decided_at"]), models.Index(fields=["user", "decided_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "user"], name="approval_vote_once_per_user"
            ),
            models.CheckConstraint(
                condition=Q(decision__in=["approve", "reject", "answer"]),
                name="approval_vote_decision_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} {self.decision} {self.approval_id}"


class ApprovalView(models.Model):
    """When a person who may decide first opened an approval (time-to-decide starts here)."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="views")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    first_opened_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["approval", "user"], name="approval_view_once_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} opened {self.approval_id} at {self.first_opened_at:%Y-%m-%d %H:%M}"


class DecisionLink(models.Model):
    """A one-tap decision link e-mailed to one approver for one approval
    (approvals/notify/one_tap/links.py).

    The signed token in the e-mail names this row's nonce; the row is what makes the link
    single-use (`used_at`, set by a compare-and-set in the decision's own transaction) and
    bounds its life (`expires_at`: never later than the approval's own deadline).
    """

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="links")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    nonce = models.CharField(max_length=43, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    # Wrong passwords typed on its page; at one_tap.MAX_PASSWORD_FAILURES the link is dead.
    password_failures = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [
            # A retried e-mail carries the same link, not a second one.
            models.UniqueConstraint(fields=["approval", "user"], name="decision_link_once_per_user")
        ]

    def __str__(self) -> str:
        return f"link for {self.user_id} on {self.approval_id}"


class Escalation(models.Model):
    """A tier of the agent's escalation chain was notified about a pending approval: the row
    makes each tier's notice go out once (the sweep may run on several hosts), names who was
    told (they may decide it from then on), and is shown on the approval card."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="escalations")
    tier = models.PositiveSmallIntegerField(help_text="1 is the chain's first tier.")
    notified = models.JSONField(default=list, help_text="Usernames of the tier's people.")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tier"]
        constraints = [
            models.UniqueConstraint(fields=["approval", "tier"], name="escalation_once_per_tier")
        ]

    def __str__(self) -> str:
        return f"tier {self.tier} of {self.approval_id} at {self.at:%Y-%m-%d %H:%M}"


class DelegationQuerySet(models.QuerySet):
    def active(self, at=None):
        at = at or timezone.now()
        return self.filter(starts__lte=at, ends__gt=at)


class Delegation(models.Model):
    """`delegate` decides for `user` from `starts` to `ends` (an approver away on leave).

    The delegate may decide what `user` could (named approvers), never what the four-eyes
    rule keeps the delegate themselves from; each such decision's step records
    {"by": delegate, "acting_for": user} in the run's hash chain."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="delegations_given"
    )
    delegate = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="delegations_received"
    )
    starts = models.DateTimeField(default=timezone.now)
    ends = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    objects = DelegationQuerySet.as_manager()

    class Meta:
        ordering = ["-starts"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends__gt=models.F("starts")), name="delegation_ends_after_start"
            ),
            models.CheckConstraint(
                condition=~Q(user=models.F("delegate")), name="delegation_not_to_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.delegate_id} for {self.user_id} until {self.ends:%Y-%m-%d %H:%M}"


class SlackMessage(models.Model):
    """The Slack message that asked for this approval (approvals/notify/slack/app.py), to
    update it with who decided."""

    approval = models.OneToOneField(Approval, on_delete=models.CASCADE, related_name="slack")
    channel = models.CharField(max_length=32)
    ts = models.CharField(max_length=32)
    posted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.channel}/{self.ts}"


class SlackUser(models.Model):
    """Which agentops user a Slack user is (an admin adds these; with
    AGENTOPS_SLACK_MAP_BY_EMAIL they are found by the Slack profile's e-mail on first use)."""

    team_id = models.CharField(max_length=32)
    slack_id = models.CharField(max_length=32)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team_id", "slack_id"], name="slack_user_once")
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.slack_id} -> {self.user_id}"


# The learning gate policy's models live in their own module; imported here so Django sees them.
from .learning.models import (  # noqa: E402, F401
    AutoApproveRule,
    GateOverride,
    PostHocReview,
    RuleEvent,
    RuleHit,
    TrackRecord,
)


class ApprovalWatch(models.Model):
    """One open decision screen (its live socket): who has the approval open, and whether they
    said "I'm on it" (approvals/presence.py). A row lives as long as its socket; `seen_at` is
    refreshed while it is open, so a row left by a server that died is ignored once stale."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="watches")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    channel_name = models.CharField(max_length=200, unique=True)
    opened_at = models.DateTimeField(default=timezone.now)
    seen_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["approval", "seen_at"])]

    def __str__(self) -> str:
        return f"{self.user_id} watches {self.approval_id}"


class Grant(models.Model):
    """A standing approval an approver gave from an approval card: more than the one call
    (approvals/grants/models.py has the rules). Always bounded: by its run, an expiry or a
    count, and optionally an argument envelope; revocable at once; never for what a person
    must decide each time (high risk, four-eyes, quorum)."""

    class Scope(models.TextChoices):
        RUN = "run", "the rest of this run"
        AGENT = "agent", "this agent"

    scope = models.CharField(max_length=8, choices=Scope.choices)
    agent = models.SlugField(max_length=64)
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="grants"
    )
    tool = models.CharField(max_length=64)
    # Conditions on the arguments, each {"arg", "op": "lte" | "eq", "value"}: all must hold.
    envelope = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept when the user is deleted: the audit says who it was.
    granted_by_name = models.CharField(max_length=150)
    granted_at = models.DateTimeField(default=timezone.now)
    from_approval = models.ForeignKey(
        Approval, null=True, blank=True, on_delete=models.SET_NULL, related_name="grants_made"
    )
    note = models.CharField(max_length=500, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-granted_at", "-id"]
        indexes = [models.Index(fields=["agent", "tool", "revoked_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(scope__in=["run", "agent"]), name="grant_scope_valid"
            ),
            models.CheckConstraint(
                condition=Q(scope="agent") | Q(run__isnull=False), name="grant_run_scope_has_run"
            ),
            # Never open-ended: a run ends; an agent-wide grant needs an expiry or a count.
            models.CheckConstraint(
                condition=Q(scope="run") | Q(expires_at__isnull=False) | Q(max_uses__isnull=False),
                name="grant_is_bounded",
            ),
            models.CheckConstraint(
                condition=Q(max_uses__isnull=True) | Q(uses__lte=models.F("max_uses")),
                name="grant_uses_within_max",
            ),
        ]

    def __str__(self) -> str:
        return f"grant #{self.pk} {self.tool} for {self.get_scope_display()}"


class Plan(models.Model):
    """An agent's plan (agentkit/plan_tool.py) and how far the run got through it: one per
    `submit_plan` call, decided through its approval (kind "plan"). Once approved, the run's
    calls are matched against its steps in order (approvals/plans/models.py); `progress` holds, per
    approved step, the call that took it. The steps themselves are the approval's final
    arguments: what the operator approved, edits included."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="plans")
    approval = models.OneToOneField(Approval, on_delete=models.CASCADE, related_name="plan")
    goal = models.TextField()
    # Per approved step, once a call took it: {"tool_use_id", "approval", "seq"}; else {}.
    progress = models.JSONField(default=list, blank=True)
    next_step = models.PositiveSmallIntegerField(default=0)
    # Calls that deviated: {"tool", "kind", "reason", "approval", "tool_use_id", "seq"}.
    deviations = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"plan #{self.pk} of run {self.run_id}"

    @property
    def steps(self) -> list[dict]:
        """The steps as approved (the operator's edit, if any), else as proposed."""
        return list(self.approval.final_args.get("steps") or [])


class ApprovalReminder(models.Model):
    """A reminder sent about a pending approval (approvals/notify/reminders.py): the unique
    (approval, key) makes each one go out once, however often (and on however many hosts) the
    sweep runs."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="reminders")
    # "expiry:0.5" (half the time left), "expiry:0.1", "escalation:1" (before tier 1).
    key = models.CharField(max_length=32)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at"]
        constraints = [
            models.UniqueConstraint(fields=["approval", "key"], name="approval_reminder_once")
        ]

    def __str__(self) -> str:
        return f"reminder {self.key} of {self.approval_id}"
