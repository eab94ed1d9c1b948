"""One-tap decision links: the approval e-mail's personal link to a phone-sized decision page.
Why and how: docs/design/modules.md."""

import secrets
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.db import models, transaction
from django.utils import timezone

from ...models import Approval, DecisionLink

SALT = "approvals.one_tap"
# Wrong passwords before a link stops working (whoever holds the phone cannot keep guessing).
MAX_PASSWORD_FAILURES = 5


class LinkRefused(Exception):
    """The link cannot be used (`status` is the HTTP status to answer with)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def max_age() -> timedelta:
    return timedelta(seconds=settings.AGENTOPS["ONE_TAP_MAX_AGE_SECONDS"])


def token_for(approval: Approval, user) -> str:
    """The signed token of `user`'s link for `approval` (the same on a retried e-mail)."""
    link, _ = DecisionLink.objects.get_or_create(
        approval=approval,
        user=user,
        defaults={
            "nonce": secrets.token_urlsafe(24),
            "expires_at": min(timezone.now() + max_age(), approval.expires_at),
        },
    )
    return signing.dumps({"a": str(approval.pk), "u": user.pk, "n": link.nonce}, salt=SALT)


def read(token: str, user) -> DecisionLink:
    """The link `token` names, if `user` may use it now; LinkRefused says why not."""
    try:
        data = signing.loads(token, salt=SALT, max_age=max_age())
    except signing.SignatureExpired:
        raise LinkRefused(410, "This decision link has expired.") from None
    except signing.BadSignature:
        raise LinkRefused(
            400, "This decision link is not valid: it was damaged or altered."
        ) from None
    if not isinstance(data, dict):
        raise LinkRefused(400, "This decision link is not valid.")
    link = (
        DecisionLink.objects.select_related("approval", "approval__run", "user")
        .filter(nonce=str(data.get("n")), user_id=data.get("u"), approval_id=data.get("a"))
        .first()
    )
    if link is None:
        raise LinkRefused(400, "This decision link is not valid.")
    if link.user_id != user.pk:
        raise LinkRefused(
            403,
            "This decision link was sent to another approver. Sign in as them, or open the "
            "approval from the queue.",
        )
    if link.used_at is not None:
        raise LinkRefused(
            410, f"This decision link was already used at {link.used_at:%H:%M:%S} UTC."
        )
    if link.expires_at <= timezone.now():
        raise LinkRefused(410, "This decision link has expired.")
    if link.password_failures >= MAX_PASSWORD_FAILURES:
        raise LinkRefused(
            410,
            "This decision link is locked after too many wrong passwords; open the approval "
            "in agentops instead.",
        )
    return link


def password_failed(link: DecisionLink) -> None:
    DecisionLink.objects.filter(pk=link.pk).update(
        password_failures=models.F("password_failures") + 1
    )


def consume(link: DecisionLink) -> None:
    """Mark the link used; call inside the decision's transaction, so a decision that fails
    leaves it unused. The compare-and-set is what makes a replay or a double tap lose."""
    assert transaction.get_connection().in_atomic_block, "consume inside the decision"
    now = timezone.now()
    if not DecisionLink.objects.filter(pk=link.pk, used_at__isnull=True, expires_at__gt=now).update(
        used_at=now
    ):
        raise LinkRefused(410, "This decision link was already used or has expired.")


def needs_password(approval: Approval, decision: str) -> bool:
    """Approving a call the full screen would ask to confirm (high risk or irreversible)."""
    return decision == "approve" and approval.needs_confirmation
