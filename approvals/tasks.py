from celery import shared_task


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    from . import decisions

    return decisions.expire_due()
