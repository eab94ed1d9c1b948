"""The approval e-mail: one message per approver, each with that approver's own one-tap
decision link (approvals/notify/one_tap/), and the same e-mail to an escalation tier when its
time comes (approvals/notify/escalation.py).

Settings (settings.AGENTOPS, from the environment): NOTIFY_EMAIL (AGENTOPS_NOTIFY_EMAIL,
default on) sends them through Django's e-mail backend. The recipients are the agent's named
approvers and their active delegates if it names any, otherwise every active user with the
approver or admin role (or superuser), in both cases only those with an e-mail address whose
teams decide for the agent (accounts/teams.py).
"""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db.models import Q
from django.urls import reverse

from accounts import teams
from accounts.models import Role

from ..models import Approval, Delegation
from .delivery import DeliveryError
from .message import _args, _one_line, headline, links
from .one_tap import links as one_tap
from .reminders import describe


def _cfg(name: str):
    return settings.AGENTOPS[name]


def approvers_to_email(approval: Approval) -> list:
    """The users the request e-mail goes to, one per address (each gets a personal link)."""
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    named = approval.run.agent_config.get("gates", {}).get("approvers") or []
    if named:
        # An approver away on leave: their delegate (an approver too) is told instead.
        delegates = Delegation.objects.active().filter(user__username__in=named)
        users = users.filter(
            Q(username__in=named)
            | Q(
                pk__in=delegates.values("delegate_id"),
                groups__name__in=[Role.APPROVER, Role.ADMIN],
            )
        )
    else:
        users = users.filter(Q(groups__name__in=[Role.APPROVER, Role.ADMIN]) | Q(is_superuser=True))
    # Only those whose teams decide for the agent (accounts/teams.py), named approvers too.
    users = teams.members_reaching(users, teams.Power.DECIDE, approval.run.agent)
    by_address: dict[str, Any] = {}
    for user in users.distinct().order_by("email", "pk"):
        by_address.setdefault(user.email, user)
    return list(by_address.values())


def approver_emails(approval: Approval) -> list[str]:
    return [user.email for user in approvers_to_email(approval)]


def one_tap_url(approval: Approval, user) -> str:
    """The approver's personal, single-use decision link (approvals/notify/one_tap/links.py)."""
    token = one_tap.token_for(approval, user)
    return _cfg("PUBLIC_URL").rstrip("/") + reverse("approvals:one_tap", args=[token])


def send_email(approval_id: str) -> int:
    """Send the request e-mail, one per approver (each carries that approver's one-tap link);
    DeliveryError (retried) when the backend fails. Returns how many were sent."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    return _send(
        approval,
        approvers_to_email(approval),
        subject=f"[agentops] {headline(approval)}",
        key="approval-requested",
    )


def send_escalation_email(approval_id: str, tier: int) -> int:
    """Tell an escalation tier's people (approvals/notify/escalation.py); like `send_email`."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    escalation = approval.escalations.filter(tier=tier).first()
    if escalation is None:
        return 0
    users = (
        get_user_model()
        .objects.filter(is_active=True, username__in=escalation.notified)
        .exclude(email="")
        .order_by("email")
    )
    waited = int((escalation.at - approval.requested_at).total_seconds() // 60)
    return _send(
        approval,
        list(users),
        subject=f"[agentops] Escalated, no decision after {waited} min: {headline(approval)}",
        key=f"approval-escalated:{tier}",
        intro=f"Nobody has decided this after {waited} minutes; you are escalation tier {tier}.",
    )


def send_reminder_email(approval_id: str, key: str) -> int:
    """Remind the approvers of a pending approval (approvals/notify/reminders.py); like
    `send_email`, with each approver's own link again. Nothing once it is decided."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    return _send(
        approval,
        approvers_to_email(approval),
        subject=f"[agentops] Reminder: {headline(approval)}",
        key=f"approval-reminder:{key}",
        intro=describe(approval, key),
    )


def _send(approval: Approval, recipients: list, *, subject: str, key: str, intro: str = "") -> int:
    if not recipients or approval.status != Approval.Status.PENDING:
        return 0
    urls = links(approval)
    body = [*([intro, ""] if intro else []), headline(approval), "", f"Why: {approval.explanation}"]
    if approval.kind == Approval.Kind.ACTION:
        body += [
            f"Tool: {approval.tool}",
            f"Arguments: {_args(approval.masked(approval.args), 5000)}",
        ]
    else:
        body.append(f"Question: {approval.question}")
        if approval.options:
            body.append("Options: " + ", ".join(map(str, approval.options)))
    body += [
        f"Risk: {approval.risk}" + (" (sampled for review)" if approval.sampled else ""),
        f"Expires: {approval.expires_at:%Y-%m-%d %H:%M} UTC",
        "",
        f"Decide: {urls['approval']}",
        f"Run: {urls['run']}",
    ]
    sent = 0
    for user in recipients:
        personal = [
            *body,
            "",
            f"Decide on your phone (a one-time link for {user.get_username()} only, "
            f"sign-in required): {one_tap_url(approval, user)}",
        ]
        message = EmailMessage(
            subject=_one_line(subject, 200),
            body="\n".join(personal),
            to=[user.email],
            # Backends that honour it (the demo outbox) store a retried send once.
            headers={"X-Idempotency-Key": f"{key}:{approval.pk}:{user.pk}"},
        )
        try:
            sent += message.send()
        except OSError as exc:  # smtplib errors are OSErrors
            raise DeliveryError(f"e-mail for approval {approval.pk} failed: {exc}") from exc
    return sent
