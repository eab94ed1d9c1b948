import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone
from django_otp.models import Device, TimestampMixin

# How exactly a token's last use is kept (its owner sees it in the admin).
LAST_USED_PRECISION = timedelta(minutes=1)


class Role(models.TextChoices):
    """Roles are Django groups; a user may hold several."""

    VIEWER = "viewer"  # reads runs, approvals and audit
    OPERATOR = "operator"  # launches and cancels runs
    APPROVER = "approver"  # decides gated actions and answers questions
    ADMIN = "admin"  # everything, plus approver statistics


class User(AbstractUser):
    def has_role(self, role: str) -> bool:
        if not self.is_active:
            return False
        if self.is_superuser:
            return True
        names = self._role_names()
        return role in names or Role.ADMIN in names

    def _role_names(self) -> set[str]:
        # Cached per instance: templates and permission checks ask many times per request.
        if not hasattr(self, "_roles_cache"):
            self._roles_cache = set(self.groups.values_list("name", flat=True))
        return self._roles_cache

    @property
    def can_view(self) -> bool:
        if not self.is_active:
            return False
        return bool(self._role_names() & set(Role.values)) or self.is_superuser

    @property
    def can_operate(self) -> bool:
        return self.has_role(Role.OPERATOR)

    @property
    def can_approve(self) -> bool:
        return self.has_role(Role.APPROVER)

    @property
    def is_admin(self) -> bool:
        return self.has_role(Role.ADMIN)


class ApiToken(models.Model):
    """A per-user bearer token for the API. Only its SHA-256 is stored."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user: User, name: str) -> tuple["ApiToken", str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = "ao_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=cls.hash(raw), prefix=raw[:8])
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> User | None:
        """The token's active user, or None; notes when the token was used."""
        token = (
            cls.objects.select_related("user")
            .filter(key_hash=cls.hash(raw), user__is_active=True)
            .first()
        )
        if token is None:
            return None
        now = timezone.now()
        # To the minute is what an owner needs to know; a row write on every API request is
        # not worth it.
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
            cls.objects.filter(pk=token.pk).update(last_used_at=now)
        user = token.user
        user.api_token_name = token.name  # a run launched with it says so (Run.source)
        return user


class Team(models.Model):
    """People and the agents they work on (accounts/teams.py says what a membership grants).

    The agent catalogue is declared in code, so which agents a team owns is data an admin
    edits here (TeamAgent rows naming agents by slug). An agent owned by no team is reached
    through the global roles alone, as before teams existed."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=50, unique=True, help_text="Used by the OIDC mapping.")
    # Where the team's approvals are announced besides e-mail to its deciders (each optional;
    # the installation-wide AGENTOPS_WEBHOOK_URLS / AGENTOPS_SLACK_CHANNEL are the admins').
    webhook_url = models.URLField(
        blank=True, help_text="Signed JSON webhook for this team's approvals (http or https)."
    )
    slack_channel = models.CharField(
        max_length=32, blank=True, help_text="Slack channel id for this team's approvals."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def agent_slugs(self) -> list[str]:
        return sorted(a.agent for a in self.agents.all())


class TeamAgent(models.Model):
    """One agent a team owns (an agent may belong to several teams)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    agent = models.SlugField(max_length=64)

    class Meta:
        ordering = ["agent"]
        constraints = [
            models.UniqueConstraint(fields=["team", "agent"], name="team_agent_once"),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.agent}"


class TeamMember(models.Model):
    """A user in a team. Membership alone lets them view the team's runs and approvals; the
    flags add the rest. Each is capped by the global role (a team narrows what a role reaches,
    it does not widen it), except `administer`, which is the team's own grant."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="team_memberships")
    launch = models.BooleanField(default=False, help_text="Launch and cancel runs.")
    decide = models.BooleanField(default=False, help_text="Decide approvals, answer questions.")
    administer = models.BooleanField(
        default=False, help_text="Administer the agents' gate rules (learned rules, overrides)."
    )
    # Set when the OIDC group mapping granted it: the next sign-in may take it away again,
    # while a membership an admin added by hand stays.
    from_sso = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["team", "user"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="team_member_once"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class WebAuthnCredential(TimestampMixin, Device):
    """A security key or passkey registered as a second factor (accounts/passkeys.py).

    A django-otp device, so a sign-in with it is a verified session (`django_otp.login`) like
    one with a code, and the admin's reset removes it with the others; it has no token to type,
    so `verify_token` always says no and only the WebAuthn ceremony signs in with it."""

    # base64url of the authenticator's credential id (at most 1023 bytes).
    credential_id = models.CharField(max_length=1400, unique=True)
    public_key = models.BinaryField()
    # The authenticator's use counter: one that goes backwards betrays a cloned key.
    sign_count = models.PositiveBigIntegerField(default=0)
    transports = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "security key"

    def verify_token(self, token) -> bool:
        return False
