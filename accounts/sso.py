"""Single sign-on: what the identity provider's claims grant here.

The provider (OpenID Connect through django-allauth, accounts/oidc.py) says who the person
is and which groups they are in; `ClaimMapping` turns one claim of theirs (`groups` by
default, a dotted path such as `realm_access.roles` for a nested one) into our roles, from
`AGENTOPS_OIDC_ROLES`:

    agentops-operators:operator,agentops-approvers:approver,agentops-admins:admin

Each entry is `<claim value>:<target>`, split at the last colon (a claim value may itself
hold colons, as URNs do). A target is a role name today; the parsed `Grant` carries its
kind so that teams can be granted the same way later (`<value>:team:<slug>`).

The roles are recomputed at every sign-in and replace the user's role groups (groups that
are not roles are left alone): a group removed at the provider is a role removed here, and
taking a role away announces it to the user's open sockets (runs/access.py), which close.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from .models import Role, User


@dataclass(frozen=True)
class Grant:
    kind: str  # "role" (teams will add "team")
    name: str


@dataclass(frozen=True)
class ClaimMapping:
    claim: str
    grants: Mapping[str, frozenset[Grant]]

    @classmethod
    def parse(cls, claim: str, spec: str) -> "ClaimMapping":
        """`spec` is AGENTOPS_OIDC_ROLES; ValueError names the entry that is wrong."""
        claim = claim.strip()
        if not claim:
            raise ValueError("the role claim is empty (AGENTOPS_OIDC_ROLE_CLAIM)")
        grants: dict[str, set[Grant]] = {}
        for entry in spec.split(","):
            entry = entry.strip()
            if not entry:
                continue
            value, sep, target = entry.rpartition(":")
            value, target = value.strip(), target.strip()
            if not sep or not value:
                raise ValueError(f"{entry!r} is not '<claim value>:<role>'")
            if target not in Role.values:
                raise ValueError(
                    f"{entry!r}: unknown role {target!r} (roles: {', '.join(Role.values)})"
                )
            grants.setdefault(value, set()).add(Grant("role", target))
        return cls(claim=claim, grants={v: frozenset(g) for v, g in grants.items()})

    def claim_values(self, claims: Mapping[str, Any]) -> set[str]:
        """The values of the mapped claim: a list of strings, or one string (some providers
        send a single group as a string, a few send them space-separated)."""
        found: Any = claims
        for part in self.claim.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if isinstance(found, str):
            return set(found.split())
        if isinstance(found, list | tuple):
            return {v for v in found if isinstance(v, str)}
        return set()

    def roles_for(self, claims: Mapping[str, Any]) -> set[str]:
        return {
            grant.name
            for value in self.claim_values(claims)
            for grant in self.grants.get(value, ())
            if grant.kind == "role"
        }


def configured_mapping() -> ClaimMapping:
    """The mapping from settings; a mistake in it stops start-up (accounts/apps.py)."""
    sso = settings.AGENTOPS_SSO
    try:
        return ClaimMapping.parse(sso["ROLE_CLAIM"], sso["ROLES"])
    except ValueError as e:
        raise ImproperlyConfigured(f"AGENTOPS_OIDC_ROLES: {e}") from e


def sync_roles(user: User, roles: Iterable[str]) -> tuple[set[str], set[str]]:
    """Make the user's role groups exactly `roles`; other groups stay. Returns (added,
    removed). Removing goes through `groups.remove`, whose signal tells the user's sockets
    (runs/access.py)."""
    wanted = set(roles)
    with transaction.atomic():
        held = {g.name: g for g in user.groups.filter(name__in=Role.values)}
        removed = set(held) - wanted
        added = wanted - set(held)
        if removed:
            user.groups.remove(*(held[name] for name in removed))
        if added:
            user.groups.add(*(Group.objects.get_or_create(name=name)[0] for name in added))
    if hasattr(user, "_roles_cache"):
        del user._roles_cache
    return added, removed


def merged_claims(extra_data: Mapping[str, Any]) -> dict[str, Any]:
    """allauth keeps the ID token's claims and the userinfo answer apart; either may carry
    the groups (Keycloak and Okta can put them in both, Entra in the ID token)."""
    claims: dict[str, Any] = {}
    for part in ("id_token", "userinfo"):
        if isinstance(extra_data.get(part), Mapping):
            claims.update(extra_data[part])
    return claims or dict(extra_data)


class SsoBackend(ModelBackend):
    """The backend a single sign-on session records. It checks no password (the provider
    did the authenticating); it only loads the session's user, so single sign-on keeps
    working when password sign-in (ModelBackend) is turned off."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        return None
