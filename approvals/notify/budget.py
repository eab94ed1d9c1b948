"""Telling people that an agent's budget crossed a threshold (runs/budgets/models.py): an e-mail to
every active approver and admin with an address, and a signed JSON POST to each generic URL of
AGENTOPS_WEBHOOK_URLS (Slack URLs get a {"text"} message), once per crossing (a budget's
threshold is crossed once per period). The same channels, settings and signature as an
approval's (email.py, webhooks.py)."""

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db.models import Q
from django.urls import reverse

from accounts import teams
from accounts.models import Role, TeamMember
from agentkit import signing
from runs.models import Budget, BudgetCrossing

from .delivery import DeliveryError, DeliveryRefused
from .webhooks import _opener, signing_keys, target

WORDS: dict[str, str] = {
    BudgetCrossing.Threshold.WARN: "is nearly spent",
    BudgetCrossing.Threshold.APPROVE: "is spent: its runs go on only when approved",
    BudgetCrossing.Threshold.STOP: "is overspent: its runs are stopped and new ones refused",
}


def headline(crossing: BudgetCrossing) -> str:
    b = crossing.budget
    return (
        f"Budget of {b.owner} {WORDS[crossing.threshold]} "
        f"({crossing.spent_usd:.2f} of {b.amount_usd} USD this {b.period})"
    )


def payload(crossing: BudgetCrossing) -> dict:
    b = crossing.budget
    base = settings.AGENTOPS["PUBLIC_URL"].rstrip("/")
    return {
        "event": "budget.threshold_crossed",
        "crossing": crossing.pk,
        "threshold": crossing.threshold,
        "agent": b.agent,
        "team": b.team.slug if b.team is not None else None,
        "period": b.period,
        "time_zone": b.time_zone,
        "period_start": crossing.period_start.isoformat(),
        "amount_usd": str(b.amount_usd),
        "spent_usd": str(crossing.spent_usd),
        "percent": {"warn": b.warn_percent, "approve": b.approve_percent, "stop": b.stop_percent},
        "run": str(crossing.run_id) if crossing.run_id else None,
        "text": headline(crossing),
        "links": {"budgets": base + reverse("runs:budgets")},
    }


def recipients(budget: Budget) -> list[str]:
    """The approvers and admins who would decide the budget's approval: for an agent's
    budget those whose teams reach the agent (accounts/teams.py); for a team's budget the
    admins and the team's members who decide."""
    users = (
        get_user_model()
        .objects.filter(is_active=True)
        .exclude(email="")
        .filter(Q(groups__name__in=[Role.APPROVER, Role.ADMIN]) | Q(is_superuser=True))
    )
    if budget.team_id:
        deciders = TeamMember.objects.filter(team_id=budget.team_id, decide=True).values("user_id")
        admins = Q(is_superuser=True) | Q(groups__name=Role.ADMIN)
        users = users.filter(admins | Q(pk__in=deciders)).distinct()
    else:
        users = teams.members_reaching(users, teams.Power.DECIDE, budget.agent)
    return sorted(set(users.values_list("email", flat=True)))


def send_email(crossing_id: int) -> int:
    crossing = BudgetCrossing.objects.select_related("budget__team").get(pk=crossing_id)
    to = recipients(crossing.budget)
    if not to:
        return 0
    data = payload(crossing)
    body = [
        data["text"],
        "",
        f"Period: from {crossing.period_start:%Y-%m-%d %H:%M} UTC ({data['time_zone']} calendar)",
        f"Noticed on run: {data['run'] or '—'}",
        f"Budgets: {data['links']['budgets']}",
    ]
    message = EmailMessage(
        subject=f"[agentops] {data['text']}"[:200],
        body="\n".join(body),
        bcc=to,
        headers={"X-Idempotency-Key": f"budget-crossed:{crossing.pk}"},
    )
    try:
        return message.send()
    except OSError as exc:
        raise DeliveryError(f"e-mail not sent: {exc}") from None


def deliver_webhook(crossing_id: int, url: str) -> int:
    crossing = BudgetCrossing.objects.select_related("budget__team").get(pk=crossing_id)
    post_to, slack = target(url)
    if urlsplit(post_to).scheme not in ("http", "https"):
        raise DeliveryRefused(f"webhook URL must be http(s): {post_to!r}")
    keys = signing_keys()
    if not keys and not slack:
        raise DeliveryRefused("AGENTOPS_WEBHOOK_SECRET is not set; generic webhooks are not sent")
    data = payload(crossing)
    body = json.dumps({"text": data["text"]} if slack else data, ensure_ascii=False).encode()
    message_id = f"budget-{crossing.pk}"
    headers = {"Content-Type": "application/json", "User-Agent": "agentops-webhook/1"}
    if keys:
        headers.update(signing.sign(keys, message_id, body))
    else:
        headers[signing.ID_HEADER] = message_id
    request = urllib.request.Request(post_to, data=body, headers=headers, method="POST")  # noqa: S310 (scheme checked above)
    try:
        with _opener.open(request, timeout=settings.AGENTOPS["WEBHOOK_TIMEOUT_SECONDS"]) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code in (408, 429):
            raise DeliveryError(f"webhook {post_to} answered {exc.code}") from None
        raise DeliveryRefused(f"webhook {post_to} answered {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DeliveryError(f"webhook {post_to} unreachable: {exc}") from None
