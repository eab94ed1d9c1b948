"""Telling people that an agent's budget crossed a threshold (runs/budgets/models.py): an e-mail to
every active approver and admin with an address, and a signed JSON POST to each generic URL of
AGENTOPS_WEBHOOK_URLS (Slack URLs get a {"text"} message), once per crossing (a budget's
threshold is crossed once per period). The same channels, settings and signature as an
approval's: the webhook goes through webhooks.post_signed, the wing's one POST."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db.models import Q
from django.urls import reverse

from accounts import teams
from accounts.models import Role, TeamMember
from runs.models import Budget, BudgetCrossing

from .delivery import DeliveryError
from .webhooks import post_signed

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
    data = payload(crossing)
    return post_signed(
        url, f"budget-{crossing.pk}", lambda slack: {"text": data["text"]} if slack else data
    )
