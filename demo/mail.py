"""An e-mail backend that delivers into the local outbox table.

A message carrying an `X-Idempotency-Key` header is stored once per key: a retried send with
the same key is a no-op, which is what lets the engine retry it safely.
"""

from django.core.mail.backends.base import BaseEmailBackend
from django.db import IntegrityError, transaction

from .models import OutboxEmail


class OutboxEmailBackend(BaseEmailBackend):
    def send_messages(self, email_messages) -> int:
        sent = 0
        for message in email_messages:
            key = message.extra_headers.get("X-Idempotency-Key") or None
            try:
                with transaction.atomic():
                    OutboxEmail.objects.create(
                        from_email=message.from_email,
                        to=list(message.recipients()),
                        subject=message.subject,
                        body=message.body,
                        headers=dict(message.extra_headers),
                        idempotency_key=key,
                    )
            except IntegrityError:
                if not key:
                    raise
                # Same key already delivered: the first delivery stands.
            sent += 1
        return sent
