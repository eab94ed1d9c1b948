"""Recovery codes: ten single-use codes (django-otp's static device) a person keeps on paper or
in a password manager, for the day the authenticator app or the security key is not at hand.

They are a fallback, never a first factor: someone with only recovery codes is not "enrolled"
(accounts/two_factor.py). Codes are shown once, when made; regenerating replaces every code
left. A code is checked through django-otp (the device row locked, each wrong code makes the
next try wait 1, 2, 4, … s) and deleted as it is used.
"""

import re

from django.db import transaction
from django_otp import verify_token
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken

from .models import User

COUNT = 10
DEVICE_NAME = "Recovery codes"
# The session key holding codes just made, until the security page shows them (once).
FRESH_KEY = "agentops_fresh_recovery_codes"


def device(user: User) -> StaticDevice | None:
    return StaticDevice.objects.filter(user=user, name=DEVICE_NAME).first()


def remaining(user: User) -> int:
    return StaticToken.objects.filter(device__user=user, device__name=DEVICE_NAME).count()


def regenerate(user: User) -> list[str]:
    """Ten new codes, in the form shown to people ("abcd-efgh"); the old ones stop working."""
    with transaction.atomic():
        static, _ = StaticDevice.objects.select_for_update().get_or_create(
            user=user, name=DEVICE_NAME, defaults={"confirmed": True}
        )
        static.token_set.all().delete()
        tokens = [StaticToken.random_token() for _ in range(COUNT)]
        StaticToken.objects.bulk_create(StaticToken(device=static, token=t) for t in tokens)
        static.throttle_reset()
    return [f"{t[:4]}-{t[4:]}" for t in tokens]


def normalise(typed: str) -> str:
    """What people type (upper case, dashes, spaces) as stored: 8 lower-case base32 characters."""
    return re.sub(r"[\s-]", "", typed).lower()


def use(user: User, code: str) -> str:
    """Spend one code: "ok", or why not ("throttled", "wrong")."""
    static = device(user)
    if static is None:
        return "wrong"
    static.refresh_from_db()
    allowed, _ = static.verify_is_allowed()
    if not allowed:
        return "throttled"
    # verify_token locks the device row (select_for_update), so one code spent by two
    # sign-ins at once signs in only one of them.
    return "ok" if verify_token(user, static.persistent_id, normalise(code)) else "wrong"


def offer_first(request, user: User) -> bool:
    """On a person's first second factor, their first codes (kept in the session until the
    security page shows them); False if they already have codes (spent or not)."""
    if device(user) is not None:
        return False
    request.session[FRESH_KEY] = regenerate(user)
    return True
