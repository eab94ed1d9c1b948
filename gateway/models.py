"""External agents: agents that run elsewhere and ask agentops before their tool calls.
Why and how: docs/design/modules.md."""

import hashlib
import secrets
import uuid
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agentkit.agents import CATALOGUE, GateRules, Limits
from agentkit.tools import Blast
from approvals.gates import checks as gate_checks
from approvals.gates import config as gate_config

TOKEN_PREFIX = "aoa_"
BLAST_LABELS = [b.label for b in Blast]


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ExternalAgent(models.Model):
    """One external agent: its identity (a bearer token, only its SHA-256 stored), its gate
    rules, and the tools it registered (ExternalTool)."""

    slug = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    # GateRules as JSON: {"always_gate": [...], "thresholds": {"tool": {"arg": 500}}, ...};
    # "approval_timeout_seconds" stands for GateRules.approval_timeout.
    gates = models.JSONField(default=dict, blank=True)
    # Each session's limits as JSON: {"max_steps": 500, "max_seconds": 3600, "max_cost_usd":
    # "5.00", "max_consecutive_errors": 3}; what is left out is an internal agent's default.
    # Enforced at each call as the engine's terminator does (gateway/sessions.py): a step is
    # a call, cost is what the agent reports, time is working time.
    limits = models.JSONField(default=dict, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, editable=False)
    token_prefix = models.CharField(max_length=12, blank=True, editable=False)
    token_issued_at = models.DateTimeField(null=True, blank=True, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["token_hash"], condition=~Q(token_hash=""), name="external_token_unique"
            )
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        # Runs name their agent by slug: one name must not mean an internal agent too.
        if self.slug in CATALOGUE:
            raise ValidationError({"slug": f"{self.slug!r} is an internal agent's name"})
        try:
            self.gate_rules()
        except ValueError as exc:
            raise ValidationError({"gates": str(exc)}) from None
        # Its rules must name people that exist, and arguments its registered tools take (a
        # session would be refused otherwise; a tool it never registered may be named).
        snapshot = self.snapshot() if self.pk else {"gates": self.gate_rules(), "tools": []}
        named = gate_config.named_users(snapshot["gates"])
        found = gate_config.problems(
            {**snapshot, "external": True}, existing_users=gate_checks.existing_users(named)
        )
        if found:
            raise ValidationError({"gates": found})
        try:
            limits_from_json(self.limits)
        except ValueError as exc:
            raise ValidationError({"limits": str(exc)}) from None

    def gate_rules(self) -> dict:
        """The rules as GateRules.as_dict() (what a run's snapshot holds); ValueError with
        what is wrong when the JSON is not valid GateRules."""
        return gate_rules_from_json(self.gates)

    def issue_token(self) -> str:
        """A new token; the old one stops working now. The raw value is returned once."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.token_hash, self.token_prefix = _hash(raw), raw[:10]
        self.token_issued_at = timezone.now()
        self.save(update_fields=["token_hash", "token_prefix", "token_issued_at"])
        return raw

    @classmethod
    def authenticate(cls, raw: str) -> "ExternalAgent | None":
        if not raw.startswith(TOKEN_PREFIX):
            return None
        return cls.objects.filter(token_hash=_hash(raw), active=True).first()

    @classmethod
    def deactivated(cls, raw: str) -> "ExternalAgent | None":
        """The switched-off agent whose current token this is (refused all the same)."""
        if not raw.startswith(TOKEN_PREFIX):
            return None
        return cls.objects.filter(token_hash=_hash(raw), active=False).first()

    def snapshot(self) -> dict:
        """What a session's run stores at registration (Run.agent_config)."""
        return {
            "slug": self.slug,
            "title": self.title,
            "external": True,
            "model": "",
            "tools": [t.metadata() for t in self.tools.order_by("name")],
            "limits": limits_from_json(self.limits),
            "gates": self.gate_rules(),
        }


def external_agent_slugs() -> list[str]:
    return list(ExternalAgent.objects.values_list("slug", flat=True))


class ExternalTool(models.Model):
    """A tool an external agent declared once: its schema (edits are validated against it)
    and its risk, which per-call hints can raise but never lower."""

    agent = models.ForeignKey(ExternalAgent, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(null=True, blank=True)
    reversible = models.BooleanField(default=False)
    blast = models.CharField(
        max_length=16, choices=[(b, b) for b in BLAST_LABELS], default=Blast.MEDIUM.label
    )

    class Meta:
        ordering = ["agent", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="external_tool_once_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.name}"

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "reversible": self.reversible,
            "blast": self.blast,
            "input_schema": self.input_schema or {"type": "object"},
        }


class ExternalCall(models.Model):
    """One tool call an external session submitted, and what became of it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="external_calls")
    approval = models.OneToOneField(
        "approvals.Approval",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="external_call",
    )
    tool = models.CharField(max_length=64)
    args = models.JSONField(default=dict)
    # The tool's metadata for this call: registered risk raised by the call's hints.
    tool_meta = models.JSONField(default=dict)
    summary = models.TextField(blank=True)
    callback_url = models.URLField(max_length=500, blank=True)
    callback_sent_at = models.DateTimeField(null=True, blank=True)
    # The step that records what the agent reported happened (POST .../result); null until.
    result_seq = models.PositiveIntegerField(null=True, blank=True)
    # "<agent slug>:<the agent's own id for the call>" (a LangGraph interrupt id, a
    # tool_use_id): submitting the same id again, from any session of the agent, is the same
    # call, so a restarted agent waits on the approval it opened before.
    client_key = models.CharField(max_length=300, blank=True)
    # The agent gave the call up (its framework timed it out or cancelled it): it must never
    # run, and a pending approval was withdrawn with it.
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["client_key"], condition=~Q(client_key=""), name="external_call_key_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({self.run_id})"


# --- Limits from JSON -----------------------------------------------------------------------------
def limits_from_json(data: Any) -> dict:
    """Limits.as_dict() of the JSON an admin wrote (defaults for what is left out);
    ValueError naming the first problem."""
    if data in (None, ""):
        data = {}
    if not isinstance(data, dict):
        raise ValueError("limits must be a JSON object")
    known = set(Limits.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown limit(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "max_cost_usd":
            number = _limit("limits", value)
            if number <= 0:
                raise ValueError("max_cost_usd must be more than 0")
            kwargs[name] = number
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
            kwargs[name] = value
        else:
            raise ValueError(f"{name} must be a positive whole number")
    return Limits(**kwargs).as_dict()


# --- GateRules from JSON -------------------------------------------------------------------------
_LISTS = ("always_gate", "never_gate", "approvers")
_NUMBERS = {"confidence_threshold": float, "sample_rate": float, "quorum": int}


def gate_rules_from_json(data: Any) -> dict:
    """GateRules.as_dict() of the JSON an admin wrote; ValueError naming the first problem."""
    if data in (None, ""):
        data = {}
    if not isinstance(data, dict):
        raise ValueError("gate rules must be a JSON object")
    fields = set(GateRules.__dataclass_fields__) - {"approval_timeout"}
    known = fields | {"approval_timeout_seconds"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown rule(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    kwargs: dict[str, Any] = {}
    for name in _LISTS:
        if name in data:
            value = data[name]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a list of names")
            kwargs[name] = tuple(value)
    for name, kind in _NUMBERS.items():
        if data.get(name) is not None:
            try:
                kwargs[name] = kind(data[name])
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a number") from None
    for name in ("four_eyes_from", "quorum_from"):
        if name in data:
            if data[name] not in ("", *BLAST_LABELS):
                raise ValueError(f"{name} must be one of {', '.join(BLAST_LABELS)} or empty")
            kwargs[name] = data[name]
    if "on_expiry" in data:
        if data["on_expiry"] not in ("reject", "fail", "halt"):
            raise ValueError("on_expiry must be reject, fail or halt")
        kwargs["on_expiry"] = data["on_expiry"]
    if "approval_timeout_seconds" in data:
        seconds = data["approval_timeout_seconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
            raise ValueError("approval_timeout_seconds must be a positive whole number")
        kwargs["approval_timeout"] = timedelta(seconds=seconds)
    if data.get("continue_every_n_steps"):
        raise ValueError("continue_every_n_steps counts model steps: external agents have none")
    kwargs["thresholds"] = _per_tool(data.get("thresholds"), "thresholds", _limit)
    kwargs["allow_lists"] = _per_tool(data.get("allow_lists"), "allow_lists", _allowed)
    rates = data.get("sample_rates") or {}
    if not isinstance(rates, dict):
        raise ValueError('sample_rates must look like {"tool": 0.1}')
    try:
        kwargs["sample_rates"] = {tool: float(rate) for tool, rate in rates.items()}
    except (TypeError, ValueError):
        raise ValueError("sample_rates: each rate must be a number") from None
    # Read but never applied would be a rule that silently gates nothing.
    for name in ("escalation", "learning"):
        if data.get(name):
            raise ValueError(f"{name} is not available to external agents yet")
    return GateRules(**kwargs).as_dict()


def _per_tool(value: Any, name: str, parse) -> dict:
    if value in (None, {}):
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(f'{name} must look like {{"tool": {{"argument": ...}}}}')
    return {tool: {arg: parse(name, v) for arg, v in args.items()} for tool, args in value.items()}


def _limit(name: str, value: Any) -> Decimal:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValueError(f"{name}: {value!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"{name}: {value!r} is not a number")
    return number


def _allowed(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name}: each allow-list is a list of strings")
    return tuple(value)
