from celery import shared_task


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    from . import decisions

    return decisions.expire_due()


# --- approval notifications (approvals/notify.py) -----------------------------------------------
# Each channel is its own task so one dead endpoint is retried alone. Backoff: up to 2, 4, 8 ...
# 256 s (full jitter), 8 retries (at most ~8.5 minutes in all), then given up and logged.
import logging  # noqa: E402  (kept with this section: approvals/tasks.py is shared)

from . import notify  # noqa: E402
from .notify import DeliveryError, DeliveryRefused  # noqa: E402

log = logging.getLogger("agentops.notify")

_DELIVERY = {
    "ignore_result": True,
    "acks_late": True,
    "autoretry_for": (DeliveryError,),
    "retry_backoff": 2,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(ignore_result=True)
def notify_approval_requested(approval_id: str) -> int:
    return notify.fan_out(approval_id)


@shared_task(**_DELIVERY)
def send_approval_email(approval_id: str) -> int:
    return notify.send_email(approval_id)


@shared_task(**_DELIVERY)
def deliver_approval_webhook(approval_id: str, url: str) -> int:
    try:
        return notify.deliver_webhook(approval_id, url)
    except DeliveryRefused as exc:
        log.warning("approval %s: webhook not delivered: %s", approval_id, exc)
        return 0
