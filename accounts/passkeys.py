"""Security keys and passkeys (WebAuthn, py_webauthn) as a second factor: the registration
ceremony for a signed-in person, and the authentication ceremony at the second step of a
password sign-in.

Each ceremony's challenge is kept server side, in the session, and used once: it is taken
out before the browser's answer is checked, so a replayed answer finds none. The relying
party id is AGENTOPS_WEBAUTHN_RP_ID, or else the host the page is served at (Django has
checked it against ALLOWED_HOSTS); the expected origin is the page's own.
"""

import json
import logging
import time
from base64 import urlsafe_b64decode

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.http.request import split_domain_port
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import bytes_to_base64url
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from .models import User, WebAuthnCredential

log = logging.getLogger("agentops.security")

RP_NAME = "agentops"
REGISTER_KEY = "agentops_webauthn_register"
AUTHENTICATE_KEY = "agentops_webauthn_authenticate"
# How long the browser may take between asking for options and answering (the options ask
# the authenticator for 60 s; a little more for the round trips).
CHALLENGE_SECONDS = 120
NAME_MAX = 64


class CeremonyError(Exception):
    """The browser's answer was refused; the message says why, in words for the person."""


def rp_id(request: HttpRequest) -> str:
    return settings.WEBAUTHN_RP_ID or split_domain_port(request.get_host())[0]


def origin(request: HttpRequest) -> str:
    return f"{request.scheme}://{request.get_host()}"


def credentials(user: User):
    return WebAuthnCredential.objects.filter(user=user, confirmed=True).order_by("created_at")


def _descriptors(user: User) -> list[PublicKeyCredentialDescriptor]:
    descriptors = []
    for key in credentials(user):
        transports = []
        for name in key.transports:
            try:
                transports.append(AuthenticatorTransport(name))
            except ValueError:  # one a newer browser knows and this library does not
                continue
        descriptors.append(
            PublicKeyCredentialDescriptor(id=_b64decode(key.credential_id), transports=transports)
        )
    return descriptors


def _b64decode(value: str) -> bytes:
    return urlsafe_b64decode(value + "=" * (-len(value) % 4))


def _remember(request: HttpRequest, key: str, user: User, challenge: bytes) -> None:
    request.session[key] = {
        "user_id": user.pk,
        "challenge": bytes_to_base64url(challenge),
        "expires": time.time() + CHALLENGE_SECONDS,
    }


def _take(request: HttpRequest, key: str, user: User) -> bytes:
    """The ceremony's challenge, removed from the session: each is answered once."""
    state = request.session.pop(key, None)
    if (
        not isinstance(state, dict)
        or state.get("user_id") != user.pk
        or time.time() > state.get("expires", 0)
    ):
        raise CeremonyError("The security key prompt expired: try again.")
    return _b64decode(state["challenge"])


def _parse(request: HttpRequest) -> dict:
    # Only JSON: a form post's body may already have been read (by the CSRF check) and gone.
    if request.content_type != "application/json":
        raise CeremonyError("The browser's answer could not be read.")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise CeremonyError("The browser's answer could not be read.") from None
    if not isinstance(data, dict) or not isinstance(data.get("credential"), dict):
        raise CeremonyError("The browser's answer could not be read.")
    return data


# Registration.


def registration_options(request: HttpRequest, user: User) -> str:
    options = generate_registration_options(
        rp_id=rp_id(request),
        rp_name=RP_NAME,
        user_name=user.get_username(),
        # Stable per person and no personal data: the primary key.
        user_id=str(user.pk).encode(),
        user_display_name=user.get_full_name() or user.get_username(),
        exclude_credentials=_descriptors(user),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
    )
    _remember(request, REGISTER_KEY, user, options.challenge)
    return options_to_json(options)


def register(request: HttpRequest, user: User) -> WebAuthnCredential:
    """Check the browser's answer to navigator.credentials.create() (the request's JSON body:
    {"name": ..., "credential": ...}) and keep the new key."""
    data = _parse(request)
    challenge = _take(request, REGISTER_KEY, user)
    name = str(data.get("name") or "").strip()[:NAME_MAX] or "Security key"
    try:
        verified = verify_registration_response(
            credential=data["credential"],
            expected_challenge=challenge,
            expected_rp_id=rp_id(request),
            expected_origin=origin(request),
        )
    except (WebAuthnException, KeyError, TypeError, ValueError) as error:
        log.warning(
            "security key registration refused for %r: %s",
            user.get_username(),
            error,
            extra={"security_event": "webauthn_refused", "username": user.get_username()},
        )
        raise CeremonyError("The security key's answer was not accepted.") from None
    transports = data["credential"].get("response", {}).get("transports") or []
    try:
        with transaction.atomic():
            key = WebAuthnCredential.objects.create(
                user=user,
                name=name,
                confirmed=True,
                credential_id=bytes_to_base64url(verified.credential_id),
                public_key=verified.credential_public_key,
                sign_count=verified.sign_count,
                transports=[str(t) for t in transports if isinstance(t, str)][:8],
            )
    except IntegrityError:
        raise CeremonyError("That security key is already registered.") from None
    log.info(
        "%r added a security key (%s)",
        user.get_username(),
        name,
        extra={"security_event": "webauthn_added", "username": user.get_username()},
    )
    return key


# Authentication.


def authentication_options(request: HttpRequest, user: User) -> str:
    options = generate_authentication_options(
        rp_id=rp_id(request),
        allow_credentials=_descriptors(user),
        user_verification=UserVerificationRequirement.PREFERRED,
    )
    _remember(request, AUTHENTICATE_KEY, user, options.challenge)
    return options_to_json(options)


def authenticate(request: HttpRequest, user: User) -> WebAuthnCredential:
    """Check the browser's answer to navigator.credentials.get() (JSON body {"credential": ...})
    against this person's keys; the key's use counter and last use are updated."""
    data = _parse(request)
    challenge = _take(request, AUTHENTICATE_KEY, user)
    credential_id = data["credential"].get("id")
    key = credentials(user).filter(credential_id=str(credential_id)).first()
    if key is None:
        raise CeremonyError("That security key is not registered for this account.")
    with transaction.atomic():
        # Locked: two answers of one key at once must not both pass the counter check.
        key = WebAuthnCredential.objects.select_for_update().get(pk=key.pk)
        try:
            verified = verify_authentication_response(
                credential=data["credential"],
                expected_challenge=challenge,
                expected_rp_id=rp_id(request),
                expected_origin=origin(request),
                credential_public_key=bytes(key.public_key),
                credential_current_sign_count=key.sign_count,
            )
        except (WebAuthnException, KeyError, TypeError, ValueError) as error:
            log.warning(
                "security key refused for %r: %s",
                user.get_username(),
                error,
                extra={"security_event": "webauthn_refused", "username": user.get_username()},
            )
            raise CeremonyError("The security key's answer was not accepted.") from None
        key.sign_count = verified.new_sign_count
        key.last_used_at = timezone.now()
        key.save(update_fields=["sign_count", "last_used_at"])
    return key
