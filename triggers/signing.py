"""How a webhook delivery is signed, and the check of a signature (the scheme Stripe uses).

    X-Agentops-Timestamp: <unix seconds, when the sender signed>
    X-Agentops-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + raw body bytes)>

The key is the whole secret as the admin showed it (`whsec_…`). The timestamp is inside the
MAC, so it cannot be changed without the secret, and a request is refused when its timestamp
is more than AGENTOPS["WEBHOOK_TOLERANCE_SECONDS"] (300) away from the server's clock, in
either direction: a captured request cannot be replayed later. Approval notifications
(approvals/notify.py) are signed the same way, so one receiver's code checks both.
"""

import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import TypeVar

from django.conf import settings

SIGNATURE_HEADER = "X-Agentops-Signature"
TIMESTAMP_HEADER = "X-Agentops-Timestamp"
SCHEME = "sha256="

Key = TypeVar("Key")


class SignatureError(Exception):
    """The request is not signed as the scheme says; the message tells the sender why."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return SCHEME + mac.hexdigest()


def tolerance_seconds() -> float:
    return float(settings.AGENTOPS["WEBHOOK_TOLERANCE_SECONDS"])


def check_timestamp(timestamp: str | None, *, now: float | None = None) -> None:
    if not timestamp:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header (unix seconds)")
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
        raise SignatureError(f"{TIMESTAMP_HEADER} must be unix seconds, e.g. 1767225600")
    skew = int(timestamp) - (time.time() if now is None else now)
    tolerance = tolerance_seconds()
    if skew < -tolerance:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {-skew:.0f} s old; at most {tolerance:.0f} s is accepted"
        )
    if skew > tolerance:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {skew:.0f} s in the future; "
            f"at most {tolerance:.0f} s is accepted (is the sender's clock right?)"
        )


def matching_secret(
    secrets: Iterable[tuple[Key, str]], timestamp: str, body: bytes, signature: str | None
) -> Key:
    """The first of `secrets` ((key object, secret) pairs) whose signature of the request is
    `signature`; SignatureError if none is. Every candidate is compared in constant time."""
    if not signature:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    if not signature.startswith(SCHEME):
        raise SignatureError(f"{SIGNATURE_HEADER} must be {SCHEME}<hex HMAC-SHA256>")
    for key, secret in secrets:
        if hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.encode()):
            return key
    raise SignatureError(
        "signature does not match: sign the raw body with a current secret of this agent "
        'as HMAC-SHA256(secret, "<timestamp>.<body>")'
    )
