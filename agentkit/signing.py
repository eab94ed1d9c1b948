"""How agentops signs a webhook, and checks one: the Standard Webhooks specification
(https://www.standardwebhooks.com), with its reference library `standardwebhooks`.
Why and how: docs/design/modules.md."""

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from django.conf import settings
from standardwebhooks.webhooks import Webhook

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
LEGACY_TIMESTAMP_HEADER = "X-Agentops-Timestamp"
LEGACY_SIGNATURE_HEADER = "X-Agentops-Signature"
LEGACY_PREFIX = "sha256="
VERSION = "v1"
# A delivery id becomes part of a run's source and a unique key: printable ASCII, bounded.
MAX_ID_LENGTH = 128
# More than any honest rotation needs; bounds the work an unsigned request can cause.
MAX_SIGNATURES = 8

Key = TypeVar("Key")


class SignatureError(Exception):
    """The request is not signed as the scheme says; the message tells the sender why."""


@dataclass(frozen=True)
class Verified(Generic[Key]):
    key: Key  # which of the receiver's keys signed it
    message_id: str  # webhook-id, or for a legacy request one derived from its signature
    legacy: bool


def legacy_accepted() -> bool:
    return bool(settings.AGENTOPS["WEBHOOK_LEGACY_SIGNATURES"])


def tolerance_seconds() -> float:
    return float(settings.AGENTOPS["WEBHOOK_TOLERANCE_SECONDS"])


def _webhook(secret: str) -> Webhook:
    if secret.startswith(Webhook._SECRET_PREFIX):
        try:
            return Webhook(secret)
        except (binascii.Error, ValueError):
            pass  # not base64 after all: its own bytes, as any other key
    return Webhook(secret.encode())


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64>` for one key."""
    moment = datetime.fromtimestamp(timestamp, tz=UTC)
    return _webhook(secret).sign(msg_id=message_id, timestamp=moment, data=body.decode())


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """The MAC under every signature agentops makes: HMAC-SHA256 of `message` keyed by `key`."""
    return hmac.new(key, message, hashlib.sha256).digest()


def derive_key(secret: str, salt: bytes) -> bytes:
    """A key of its own for one purpose (`salt` names it), derived from a shared secret
    (SECRET_KEY): HMAC-SHA256 keyed by the secret over the salt."""
    return hmac_sha256(secret.encode(), salt)


def legacy_signature(secret: str, timestamp: str, body: bytes) -> str:
    return LEGACY_PREFIX + hmac_sha256(secret.encode(), timestamp.encode() + b"." + body).hex()


def sign(
    secrets: str | Sequence[str],
    message_id: str,
    body: bytes,
    *,
    timestamp: int | None = None,
    legacy: bool | None = None,
) -> dict[str, str]:
    """The headers that sign `body` as delivery `message_id`: one v1 signature per secret
    (all of them while a key rotates), plus the legacy headers (with the first secret) while
    the legacy scheme is accepted."""
    keys = [secrets] if isinstance(secrets, str) else [s for s in secrets if s]
    if not keys:
        raise ValueError("no key to sign with")
    stamp = int(time.time()) if timestamp is None else timestamp
    headers = {
        ID_HEADER: message_id,
        TIMESTAMP_HEADER: str(stamp),
        SIGNATURE_HEADER: " ".join(signature(key, message_id, stamp, body) for key in keys),
    }
    if legacy_accepted() if legacy is None else legacy:
        headers[LEGACY_TIMESTAMP_HEADER] = str(stamp)
        headers[LEGACY_SIGNATURE_HEADER] = legacy_signature(keys[0], str(stamp), body)
    return headers


def check_timestamp(
    timestamp: str | None, *, header: str = TIMESTAMP_HEADER, now: float | None = None
) -> int:
    if not timestamp:
        raise SignatureError(f"missing {header} header (unix seconds)")
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
        raise SignatureError(f"{header} must be unix seconds, e.g. 1767225600")
    skew = int(timestamp) - (time.time() if now is None else now)
    tolerance = tolerance_seconds()
    if skew < -tolerance:
        raise SignatureError(
            f"{header} is {-skew:.0f} s old; at most {tolerance:.0f} s is accepted"
        )
    if skew > tolerance:
        raise SignatureError(
            f"{header} is {skew:.0f} s in the future; "
            f"at most {tolerance:.0f} s is accepted (is the sender's clock right?)"
        )
    return int(timestamp)


def verify(
    secrets: Iterable[tuple[Key, str]],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
) -> Verified[Key]:
    """Which of `secrets` ((key object, secret) pairs) signed the request; SignatureError
    if none did, or the request is stale, or malformed. Every candidate is compared in
    constant time. The library's own `verify` is not used: its window is fixed at five
    minutes and a malformed signature list raises ValueError instead of refusing."""
    secrets = list(secrets)
    lowered = {name.lower(): value for name, value in headers.items()}
    if SIGNATURE_HEADER not in lowered and LEGACY_SIGNATURE_HEADER.lower() in lowered:
        if not legacy_accepted():
            raise SignatureError(
                f"{LEGACY_SIGNATURE_HEADER} is no longer accepted: sign with the Standard "
                f"Webhooks headers {ID_HEADER}, {TIMESTAMP_HEADER}, {SIGNATURE_HEADER}"
            )
        return _verify_legacy(secrets, lowered, body, now=now)

    message_id = lowered.get(ID_HEADER, "")
    if not message_id:
        raise SignatureError(f"missing {ID_HEADER} header (the delivery's unique id)")
    if len(message_id) > MAX_ID_LENGTH or not (message_id.isascii() and message_id.isprintable()):
        raise SignatureError(
            f"{ID_HEADER} must be at most {MAX_ID_LENGTH} printable ASCII characters"
        )
    stamp = check_timestamp(lowered.get(TIMESTAMP_HEADER), now=now)
    given = lowered.get(SIGNATURE_HEADER, "").split()
    if not given:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    if len(given) > MAX_SIGNATURES:
        raise SignatureError(f"at most {MAX_SIGNATURES} signatures are read")
    candidates = []
    for item in given:
        version, _, encoded = item.partition(",")
        if version != VERSION:
            continue  # a later version, or an asymmetric one: not ours to read
        try:
            candidates.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            raise SignatureError(f"{SIGNATURE_HEADER} must be {VERSION},<base64>") from None
    if not candidates:
        raise SignatureError(f"{SIGNATURE_HEADER} has no {VERSION},<base64> signature")
    try:
        body.decode()
    except UnicodeDecodeError:
        raise SignatureError("the body is not UTF-8") from None
    for key, secret in secrets:
        expected = base64.b64decode(signature(secret, message_id, stamp, body).partition(",")[2])
        # Every given signature is compared, matching or not: no early exit to time.
        if any([hmac.compare_digest(expected, given_mac) for given_mac in candidates]):
            return Verified(key=key, message_id=message_id, legacy=False)
    raise SignatureError(
        "signature does not match: sign "
        f'"<{ID_HEADER}>.<{TIMESTAMP_HEADER}>.<raw body>" with a current key '
        "(Standard Webhooks v1)"
    )


def _verify_legacy(
    secrets: list[tuple[Key, str]], lowered: Mapping[str, str], body: bytes, *, now: float | None
) -> Verified[Key]:
    timestamp = lowered.get(LEGACY_TIMESTAMP_HEADER.lower())
    check_timestamp(timestamp, header=LEGACY_TIMESTAMP_HEADER, now=now)
    given = lowered.get(LEGACY_SIGNATURE_HEADER.lower(), "")
    if not given.startswith(LEGACY_PREFIX):
        raise SignatureError(f"{LEGACY_SIGNATURE_HEADER} must be {LEGACY_PREFIX}<hex HMAC-SHA256>")
    assert timestamp is not None  # check_timestamp refused a missing one
    for key, secret in secrets:
        if hmac.compare_digest(legacy_signature(secret, timestamp, body).encode(), given.encode()):
            # The signature covers timestamp and body: a replayed copy carries the same one.
            digest = hashlib.sha256(given.encode()).hexdigest()[:40]
            return Verified(key=key, message_id=f"legacy_{digest}", legacy=True)
    raise SignatureError(
        "signature does not match: sign the raw body with a current secret of this agent "
        'as HMAC-SHA256(secret, "<timestamp>.<body>")'
    )
