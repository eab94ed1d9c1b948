"""Local business data the demo agents act on: a refunds ledger and an e-mail outbox."""

from decimal import Decimal

from django.db import models
from django.db.models import Q


class Refund(models.Model):
    order_id = models.PositiveIntegerField(db_index=True)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    reason = models.CharField(max_length=300, blank=True)
    # The engine's idempotency key: a retried call with the same key returns this row.
    idempotency_key = models.CharField(max_length=64, unique=True, null=True, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Reversed (reverse_refund, the compensation of issue_refund): the money was taken back,
    # so the refund no longer counts toward what was refunded on the order.
    reversed_at = models.DateTimeField(null=True, blank=True)
    reversal_key = models.CharField(max_length=64, unique=True, null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount__gt=Decimal(0)), name="refund_amount_positive"
            )
        ]

    def __str__(self) -> str:
        return f"refund {self.amount} on order {self.order_id}"


class OutboxEmail(models.Model):
    """Every e-mail the product sends lands here (see demo/mail.py) for operators to inspect."""

    from_email = models.CharField(max_length=254)
    to = models.JSONField()
    subject = models.CharField(max_length=998)
    body = models.TextField()
    headers = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=64, unique=True, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.subject} → {', '.join(self.to)}"
