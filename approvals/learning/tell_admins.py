"""Telling admins what the learning gate policy did: a rule proposed, revoked or expired, a
"should have been gated" incident. E-mailed after commit by a task, so a decision or an
engine step never waits on the mail server."""

import logging

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q

from accounts.models import Role

log = logging.getLogger("agentops.approvals")


def admin_emails() -> list[str]:
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    users = users.filter(Q(groups__name=Role.ADMIN) | Q(is_superuser=True))
    return sorted(set(users.values_list("email", flat=True)))


def tell_admins_on_commit(subject: str, body: str) -> None:
    transaction.on_commit(lambda: _queue(subject, body))


def _queue(subject: str, body: str) -> None:
    # Never raises: a broker hiccup must not fail the decision or step that committed.
    try:
        notify_admins.delay(subject, body)
    except Exception:
        log.exception("could not queue the admin notice %r", subject)


# Named as it was when this module was approvals/learning_notify.py: queued messages carry it.
@shared_task(
    name="approvals.learning_notify.notify_admins",
    ignore_result=True,
    autoretry_for=(OSError,),
    retry_backoff=2,
    max_retries=8,
)
def notify_admins(subject: str, body: str) -> int:
    recipients = admin_emails()
    if not recipients or not settings.AGENTOPS["NOTIFY_EMAIL"]:
        return 0
    url = settings.AGENTOPS["PUBLIC_URL"].rstrip("/") + "/approvals/rules/"
    message = EmailMessage(
        subject=f"[agentops] {subject}"[:200], body=f"{body}\n\nRules: {url}", to=recipients
    )
    return message.send()
