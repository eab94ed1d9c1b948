"""agentkit/signing.py: Standard Webhooks both ways, read the same as its reference library."""

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from agentkit import signing

KEY = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"event": "approval.requested", "name": "caf\xc3\xa9"}'


def test_what_it_signs_the_reference_library_verifies():
    headers = signing.sign([KEY, "plain key"], "msg_1", BODY, legacy=False)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert Webhook(KEY).verify(BODY, headers)
    assert Webhook(b"plain key").verify(BODY, headers)


def test_what_the_reference_library_signs_it_verifies():
    stamp = int(time.time())
    signed = Webhook(KEY).sign("msg_1", datetime.fromtimestamp(stamp, UTC), BODY.decode())
    headers = {"Webhook-Id": "msg_1", "Webhook-Timestamp": str(stamp), "Webhook-Signature": signed}
    verified = signing.verify([("a", "whsec_" + "A" * 32), ("b", KEY)], headers, BODY)
    assert (verified.key, verified.message_id, verified.legacy) == ("b", "msg_1", False)


@pytest.mark.parametrize("offset", [-301, 301])
def test_a_stale_or_future_request_is_refused(offset):
    headers = signing.sign(KEY, "m", BODY, timestamp=int(time.time()) + offset, legacy=False)
    with pytest.raises(signing.SignatureError):
        signing.verify([("k", KEY)], headers, BODY)


def test_a_legacy_requests_id_is_its_signature_so_a_copy_has_the_same(legacy_signatures):
    stamp = str(int(time.time()))
    headers = {
        "X-Agentops-Timestamp": stamp,
        "X-Agentops-Signature": signing.legacy_signature(KEY, stamp, BODY),
    }
    first = signing.verify([("k", KEY)], headers, BODY)
    assert (
        first.legacy and first.message_id == signing.verify([("k", KEY)], headers, BODY).message_id
    )
    later = {**headers, "X-Agentops-Timestamp": str(int(stamp) + 1)}
    later["X-Agentops-Signature"] = signing.legacy_signature(KEY, str(int(stamp) + 1), BODY)
    assert signing.verify([("k", KEY)], later, BODY).message_id != first.message_id
