"""Approvals' Celery tasks: the expiry sweep, the notifications of a new approval, reminders.

Each notification channel is its own task so one dead endpoint is retried alone, as every
delivery is (approvals/notify/delivery.py RETRIED_DELIVERY). What is sent, and how, is the
notify wing's (approvals/notify/). The tasks are the app's Celery entry points (their names
are in the beat schedule and in queued messages), so they stay here and call into the wings.
"""

import logging

from celery import shared_task
from django.conf import settings
from slack_sdk.errors import SlackApiError

from accounts import teams
from runs.models import BudgetCrossing

from . import decisions
from .evidence import export as evidence_export
from .learning import rules as learning
from .models import Approval
from .notify import budget, email, escalation, reminders, webhooks
from .notify.delivery import RETRIED_DELIVERY, DeliveryError, DeliveryRefused, RetryOptions
from .notify.slack import app as slack

log = logging.getLogger("agentops.notify")


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    # Auto-approve rules past their expiry or cap end on the same beat (approvals/learning/).
    learning.expire_due()
    return decisions.expire_due()


@shared_task(ignore_result=True)
def export_decisions() -> str:
    """The scheduled compliance export of the previous period (AGENTOPS_DECISIONS_EXPORT_CRON)."""
    written = evidence_export.write_scheduled()
    if not written:
        log.warning("decisions export scheduled but AGENTOPS_DECISIONS_EXPORT_DIR is not set")
        return ""
    log.info("decisions export written to %s (and %d team file(s))", written[0], len(written) - 1)
    return str(written[0])


@shared_task(ignore_result=True)
def escalate_approvals() -> int:
    """Reminders first (one may warn of the escalation that is due next), then the tiers that
    are due. Returns how many tiers were told."""
    reminders.remind_due(approval_reminded)
    return escalation.escalate_due(approval_escalated)


def approval_reminded(approval_id: str, key: str) -> None:
    """Queue a reminder's deliveries (after commit); never raises, like below."""
    try:
        if settings.AGENTOPS["NOTIFY_EMAIL"]:
            send_reminder_email.delay(approval_id, key)
        for url in webhook_urls(Approval.objects.select_related("run").get(pk=approval_id)):
            deliver_reminder_webhook.delay(approval_id, url, key)
        if slack.enabled():
            post_reminder_to_slack.delay(approval_id, key)
    except Exception:
        log.exception("approval %s: could not queue the reminder %s", approval_id, key)


def approval_escalated(approval_id: str, tier: int) -> None:
    """Queue the e-mail to an escalation tier (after commit); never raises, like below."""
    if not settings.AGENTOPS["NOTIFY_EMAIL"]:
        return
    try:
        send_escalation_email.delay(approval_id, tier)
    except Exception:
        log.exception("approval %s: could not queue the escalation e-mail", approval_id)


def approval_requested(approval_id) -> None:
    """Queue the notifications for a new approval (called after commit). Never raises: a
    broker hiccup must not turn into an error in the engine's on-commit callbacks."""
    try:
        notify_approval_requested.delay(str(approval_id))
    except Exception:
        log.exception("approval %s: could not queue notifications", approval_id)


def webhook_urls(approval: Approval) -> list[str]:
    """The installation's webhooks get every approval (and its reminders); a team's own, its
    agents' approvals."""
    team_urls = [t.webhook_url for t in teams.teams_owning(approval.run.agent) if t.webhook_url]
    return list(dict.fromkeys([*settings.AGENTOPS["WEBHOOK_URLS"], *team_urls]))


@shared_task(ignore_result=True)
def notify_approval_requested(approval_id: str) -> int:
    """Queue one delivery task per channel; returns how many were queued."""
    approval = Approval.objects.select_related("run").filter(pk=approval_id).first()
    if approval is None:
        return 0
    queued = 0
    if settings.AGENTOPS["NOTIFY_EMAIL"] and email.approver_emails(approval):
        send_approval_email.delay(str(approval.pk))
        queued += 1
    for url in webhook_urls(approval):
        deliver_approval_webhook.delay(str(approval.pk), url)
        queued += 1
    if slack.enabled():
        post_approval_to_slack.delay(str(approval.pk))
        queued += 1
    return queued


@shared_task(**RETRIED_DELIVERY)
def send_approval_email(approval_id: str) -> int:
    return email.send_email(approval_id)


@shared_task(**RETRIED_DELIVERY)
def deliver_approval_webhook(approval_id: str, url: str) -> int:
    try:
        return webhooks.deliver_webhook(approval_id, url)
    except DeliveryRefused as exc:
        log.warning("approval %s: webhook not delivered: %s", approval_id, exc)
        return 0


@shared_task(**RETRIED_DELIVERY)
def send_reminder_email(approval_id: str, key: str) -> int:
    return email.send_reminder_email(approval_id, key)


@shared_task(**RETRIED_DELIVERY)
def deliver_reminder_webhook(approval_id: str, url: str, key: str) -> int:
    try:
        return webhooks.deliver_webhook(approval_id, url, reminder=key)
    except DeliveryRefused as exc:
        log.warning("approval %s: reminder webhook not delivered: %s", approval_id, exc)
        return 0


@shared_task(**RETRIED_DELIVERY)
def send_escalation_email(approval_id: str, tier: int) -> int:
    return email.send_escalation_email(approval_id, tier)


# Slack's client raises its own errors, and OSError for a connection that failed.
SLACK_DELIVERY: RetryOptions = {
    **RETRIED_DELIVERY,
    "autoretry_for": (DeliveryError, SlackApiError, OSError),
}


@shared_task(**SLACK_DELIVERY)
def post_approval_to_slack(approval_id: str) -> str:
    return slack.post_request(approval_id)


@shared_task(**SLACK_DELIVERY)
def post_reminder_to_slack(approval_id: str, key: str) -> str:
    return slack.post_reminder(approval_id, key)


def slack_on_decided(sender, approval_id, **kwargs) -> None:
    """A decided or expired approval: its Slack message says so (decisions.decided)."""
    if not slack.enabled():
        return
    try:
        update_slack_message.delay(str(approval_id))
    except Exception:
        log.exception("approval %s: could not queue the Slack update", approval_id)


@shared_task(ignore_result=True)
def update_slack_message(approval_id: str) -> None:
    approval = Approval.objects.select_related("run", "decided_by").filter(pk=approval_id).first()
    if approval is not None:
        slack.update_message(approval)


def budget_crossed(crossing_id: int) -> None:
    """Queue the notifications of a budget threshold crossed (called after commit); never
    raises, like approval_requested."""
    try:
        notify_budget_crossed.delay(crossing_id)
    except Exception:
        log.exception("budget crossing %s: could not queue notifications", crossing_id)


@shared_task(ignore_result=True)
def notify_budget_crossed(crossing_id: int) -> int:
    queued = 0
    crossing = BudgetCrossing.objects.filter(pk=crossing_id).select_related("budget__team").first()
    if crossing is None:
        return 0
    if settings.AGENTOPS["NOTIFY_EMAIL"] and budget.recipients(crossing.budget):
        send_budget_email.delay(crossing_id)
        queued += 1
    # As for approvals: the installation's webhooks, and the team's own (a team's budget: its
    # team's; an agent's: the teams owning the agent).
    owners = (
        [crossing.budget.team]
        if crossing.budget.team_id
        else teams.teams_owning(crossing.budget.agent)
    )
    team_urls = [t.webhook_url for t in owners if t is not None and t.webhook_url]
    for url in dict.fromkeys([*settings.AGENTOPS["WEBHOOK_URLS"], *team_urls]):
        deliver_budget_webhook.delay(crossing_id, url)
        queued += 1
    return queued


@shared_task(**RETRIED_DELIVERY)
def send_budget_email(crossing_id: int) -> int:
    return budget.send_email(crossing_id)


@shared_task(**RETRIED_DELIVERY)
def deliver_budget_webhook(crossing_id: int, url: str) -> int:
    try:
        return budget.deliver_webhook(crossing_id, url)
    except DeliveryRefused as exc:
        log.warning("budget crossing %s: webhook not delivered: %s", crossing_id, exc)
        return 0
