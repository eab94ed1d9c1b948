"""What outside triggers remember: webhook secrets and deliveries, and schedules."""

import base64
import hashlib
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from accounts import teams
from agentkit.agents import CATALOGUE, get_agent
from runs.models import Run

from .inputs import input_size, max_input_bytes, validate_input

SECRET_PREFIX = "whsec_"
# How long the secrets in use stay valid once a new one is made (the admin's "rotate").
ROTATION_GRACE = timedelta(hours=24)
# Schedules are swept every 15 s; cron itself counts in minutes.
MIN_INTERVAL_SECONDS = 60


def new_secret() -> str:
    # Standard base64, as the Standard Webhooks libraries decode it (agentkit/signing.py).
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def unknown_agent(slug: str) -> str:
    return f"unknown agent {slug!r}; known agents: {', '.join(sorted(CATALOGUE))}"


# --- webhooks ----------------------------------------------------------------------------------
class WebhookSecretQuerySet(models.QuerySet):
    def usable(self, now: datetime | None = None):
        """Neither revoked nor expired at `now`."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )

    def visible_to(self, user):
        """Those of agents the user's teams see (accounts/teams.py)."""
        agents = teams.scope(user, teams.Power.VIEW)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))


class WebhookSecret(models.Model):
    """A key that signs one agent's webhook deliveries (agentkit/signing.py).

    An agent may have several: a rotation adds a new one and lets the ones in use expire a
    while later, so a sender switches without a gap. Stored as given, not hashed, because
    checking an HMAC needs the key itself; the admin shows it once, when it is made, and
    `fingerprint` tells secrets apart everywhere else.
    """

    agent = models.SlugField(max_length=64)
    name = models.CharField(
        max_length=100, blank=True, help_text="Who signs with it, e.g. “billing system”."
    )
    secret = models.CharField(max_length=100, default=new_secret, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from this time on. Empty: never expires."
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = WebhookSecretQuerySet.as_manager()

    class Meta:
        ordering = ["agent", "-created_at"]
        indexes = [models.Index(fields=["agent", "-created_at"])]

    def __str__(self) -> str:
        label = f" ({self.name})" if self.name else ""
        return f"{self.agent} secret {self.fingerprint}{label}"

    @property
    def fingerprint(self) -> str:
        """Tells secrets apart without showing them: `printf %s "$SECRET" | sha256sum`."""
        return hashlib.sha256(self.secret.encode()).hexdigest()[:12]

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def clean(self) -> None:
        if self.agent not in CATALOGUE:
            raise ValidationError({"agent": unknown_agent(self.agent)})

    @classmethod
    def rotate(
        cls, agent: str, *, grace: timedelta = ROTATION_GRACE, name: str = "", now=None
    ) -> "WebhookSecret":
        """A new secret for `agent`; the ones usable now stay valid for `grace` (or until
        they expire, if sooner), so both are accepted while senders switch."""
        now = now or timezone.now()
        until = now + grace
        with transaction.atomic():
            cls.objects.usable(now).filter(agent=agent).filter(
                Q(expires_at__isnull=True) | Q(expires_at__gt=until)
            ).update(expires_at=until)
            return cls.objects.create(agent=agent, name=name, created_at=now)

    def revoke(self, now: datetime | None = None) -> bool:
        """Refused from now on. False if it was already revoked."""
        now = now or timezone.now()
        done = WebhookSecret.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if done:
            self.revoked_at = now
        return bool(done)


class WebhookDelivery(models.Model):
    """One accepted webhook request and the run it launched.

    `message_id` is the signed delivery id (webhook-id; for a request signed the deprecated
    way, one derived from its signature), unique per agent: a replayed request, or a retry of
    one delivery, answers with the run the first launched and never launches another. `key`
    is what the run's source shows: the webhook-id, or a legacy request's Idempotency-Key,
    unique per agent too. The constraints are the guards against two requests racing.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.SlugField(max_length=64)
    key = models.CharField(
        max_length=128,
        blank=True,
        help_text="The webhook-id, or a legacy request's Idempotency-Key; empty if none.",
    )
    message_id = models.CharField(
        max_length=128,
        blank=True,
        help_text="The signed delivery id (webhook-id), or legacy_<digest of its signature>.",
    )
    legacy = models.BooleanField(
        default=False, help_text="Signed with the deprecated X-Agentops-Signature scheme."
    )
    body_sha256 = models.CharField(max_length=64, help_text="Of the body's canonical JSON.")
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="+")
    secret = models.ForeignKey(
        WebhookSecret, null=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "key"], condition=~Q(key=""), name="webhookdelivery_key_unique"
            ),
            models.UniqueConstraint(
                fields=["agent", "message_id"],
                condition=~Q(message_id=""),
                name="webhookdelivery_message_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent} delivery {self.key or self.pk}"

    @property
    def source(self) -> str:
        """What the run records as its source (Run.source)."""
        return f"delivery {self.key or self.pk}"


# --- schedules ---------------------------------------------------------------------------------
class ScheduleQuerySet(models.QuerySet):
    def due(self, now: datetime):
        return self.filter(enabled=True, next_run_at__lte=now)

    def visible_to(self, user):
        """Those of agents the user's teams see (accounts/teams.py)."""
        agents = teams.scope(user, teams.Power.VIEW)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))


class Schedule(models.Model):
    """An agent launched on a cron expression or every N seconds, always with the same input.

    `next_run_at` is the slot the sweep launches next (triggers/scheduler.py moves it on in
    the transaction that launches). By default a slot is skipped while the schedule's
    previous run is still active, and the skip is recorded (`last_skip_reason`).
    """

    name = models.CharField(max_length=100, unique=True)
    agent = models.SlugField(max_length=64)
    input = models.JSONField(
        default=dict,
        blank=True,
        help_text="The input of every run, as JSON; checked against the agent's input schema "
        "(GET /api/agents).",
    )
    cron = models.CharField(
        max_length=100,
        blank=True,
        help_text="Five fields: minute hour day-of-month month day-of-week, e.g. "
        "“0 9 * * 1-5” (9:00 on weekdays). Leave empty for an interval.",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="The cron expression's zone, e.g. Europe/Paris."
    )
    interval_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=f"Or: every this many seconds (at least {MIN_INTERVAL_SECONDS}).",
    )
    enabled = models.BooleanField(default=True)
    allow_overlap = models.BooleanField(
        default=False, help_text="Launch even while the previous run is still active."
    )
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    last_skipped_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_skip_reason = models.CharField(max_length=300, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run_at"], condition=Q(enabled=True), name="triggers_schedule_due_idx"
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(interval_seconds__isnull=False))
                | (~Q(cron="") & Q(interval_seconds__isnull=True)),
                name="schedule_cron_xor_interval",
                violation_error_message="Give either a cron expression or an interval, not both.",
            ),
            models.CheckConstraint(
                condition=Q(interval_seconds__isnull=True)
                | Q(interval_seconds__gte=MIN_INTERVAL_SECONDS),
                name="schedule_interval_min",
                violation_error_message=f"The interval is at least {MIN_INTERVAL_SECONDS} s.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if self.next_run_at is None:
            self.reschedule()
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "next_run_at"}
        super().save(*args, **kwargs)

    @property
    def description(self) -> str:
        """When it runs, in words: "cron 0 9 * * 1-5 (Europe/Paris)", "every 15 min"."""
        if self.cron:
            return f"cron {self.cron} ({self.timezone})"
        seconds = self.interval_seconds or 0
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds and seconds % size == 0:
                return f"every {seconds // size} {unit}"
        return f"every {seconds} s"

    # --- validation ----------------------------------------------------------------------------
    def clean(self) -> None:
        """Field errors for the admin's form: the agent, the cron expression, the time zone,
        and the input checked as POST /api/runs checks it (then stored as cleaned)."""
        errors: dict[str, list[str]] = {}
        self.cron = " ".join(self.cron.split())
        if self.cron:
            error = cron_error(self.cron)
            if error:
                errors["cron"] = [error]
        if zone_error(self.timezone):
            errors["timezone"] = [zone_error(self.timezone)]
        agent = get_agent(self.agent)
        if agent is None:
            errors["agent"] = [unknown_agent(self.agent)]
        elif input_size(self.input) > max_input_bytes():
            errors["input"] = [f"larger than {max_input_bytes()} bytes"]
        else:
            cleaned, input_errors = validate_input(agent, self.input)
            if input_errors:
                errors["input"] = [
                    message if field == "__all__" else f"{field}: {message}"
                    for field, messages in input_errors.items()
                    for message in messages
                ]
            else:
                self.input = cleaned
        if errors:
            raise ValidationError(errors)

    # --- time ----------------------------------------------------------------------------------
    def first_slot(self, now: datetime) -> datetime:
        """The first slot after `now` of a new or changed schedule."""
        if self.cron:
            return self._cron_after(now)
        return now + timedelta(seconds=self.interval_seconds)

    def slot_after(self, now: datetime) -> datetime:
        """The slot that follows the due one: the first strictly after `now`. The slots
        missed in between are skipped, not caught up, so a schedule that was down for a day
        launches once. An interval keeps to its grid (every N seconds from its first slot)."""
        if self.cron:
            return self._cron_after(now)
        step = timedelta(seconds=self.interval_seconds)
        anchor = self.next_run_at
        if anchor is None or anchor > now:
            return now + step
        return anchor + ((now - anchor) // step + 1) * step

    def _cron_after(self, moment: datetime) -> datetime:
        # In the schedule's own zone, so "0 9 * * *" is 9:00 there across DST changes.
        local = moment.astimezone(ZoneInfo(self.timezone))
        return next(CronSim(self.cron, local)).astimezone(UTC)

    def reschedule(self, now: datetime | None = None) -> None:
        """Start over from `now`: after the schedule's timing changed or it was re-enabled."""
        self.next_run_at = self.first_slot(now or timezone.now())

    # --- what the sweep records ------------------------------------------------------------------
    def record_launch(self, run: Run, now: datetime) -> None:
        self.last_run, self.last_run_at = run, now
        self.save(update_fields=["next_run_at", "last_run", "last_run_at", "updated_at"])

    def record_skip(self, reason: str, now: datetime) -> None:
        self.last_skip_reason, self.last_skipped_at = reason[:300], now
        self.save(
            update_fields=["next_run_at", "last_skip_reason", "last_skipped_at", "updated_at"]
        )


def cron_error(expression: str) -> str:
    """Why `expression` is not a five-field cron expression, or ""."""
    if len(expression.split()) != 5:
        return "Give five fields: minute hour day-of-month month day-of-week."
    try:
        CronSim(expression, timezone.now())
    except CronSimError as exc:
        return f"Not a valid cron expression: {exc}."
    return ""


def zone_error(name: str) -> str:
    """Why `name` is not an IANA time zone, or ""."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"Unknown time zone {name!r}; use an IANA name such as Europe/Paris or UTC."
    return ""
