"""Single sign-on: what the identity provider's claims grant here.
Why and how: docs/design/modules.md."""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.core.validators import slug_re
from django.db import transaction

from . import teams
from .models import Role, Team, TeamMember, User

log = logging.getLogger("agentops.security")


TEAM_POWERS = ("launch", "decide", "administer")


class TeamsSpecError(ValueError):
    """A mistake in AGENTOPS_OIDC_TEAMS (not in the roles)."""


@dataclass(frozen=True)
class Grant:
    kind: str  # "role" or "team"
    name: str  # the role, or the team's slug
    powers: frozenset[str] = frozenset()  # a team membership's (TEAM_POWERS)


@dataclass(frozen=True)
class ClaimMapping:
    claim: str
    grants: Mapping[str, frozenset[Grant]]

    @classmethod
    def parse(cls, claim: str, spec: str, teams_spec: str = "") -> "ClaimMapping":
        """`spec` is AGENTOPS_OIDC_ROLES, `teams_spec` AGENTOPS_OIDC_TEAMS; ValueError names
        the entry that is wrong."""
        claim = claim.strip()
        if not claim:
            raise ValueError("the role claim is empty (AGENTOPS_OIDC_ROLE_CLAIM)")
        grants: dict[str, set[Grant]] = {}
        for value, target, entry in _entries(spec, "<claim value>:<role>"):
            if target not in Role.values:
                raise ValueError(
                    f"{entry!r}: unknown role {target!r} (roles: {', '.join(Role.values)})"
                )
            grants.setdefault(value, set()).add(Grant("role", target))
        for value, target, entry in _entries(teams_spec, "<claim value>:<team>[+<power>…]"):
            team, *powers = (p.strip() for p in target.split("+"))
            if not slug_re.fullmatch(team):
                raise TeamsSpecError(f"{entry!r}: {team!r} is not a team slug")
            unknown = [p for p in powers if p not in TEAM_POWERS]
            if unknown:
                raise TeamsSpecError(
                    f"{entry!r}: unknown power {unknown[0]!r} (powers: {', '.join(TEAM_POWERS)})"
                )
            grants.setdefault(value, set()).add(Grant("team", team, frozenset(powers)))
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

    def teams_for(self, claims: Mapping[str, Any]) -> dict[str, set[str]]:
        """Team slug -> the powers its membership gets (the union of every value's)."""
        found: dict[str, set[str]] = {}
        for value in self.claim_values(claims):
            for grant in self.grants.get(value, ()):
                if grant.kind == "team":
                    found.setdefault(grant.name, set()).update(grant.powers)
        return found


def _entries(spec: str, shape: str):
    """(claim value, target, entry) of each comma-separated `<value>:<target>`."""
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        value, sep, target = entry.rpartition(":")
        value, target = value.strip(), target.strip()
        if not sep or not value or not target:
            raise (TeamsSpecError if "team" in shape else ValueError)(f"{entry!r} is not '{shape}'")
        yield value, target, entry


def configured_mapping() -> ClaimMapping:
    """The mapping from settings; a mistake in it stops start-up (accounts/apps.py)."""
    sso = settings.AGENTOPS_SSO
    try:
        return ClaimMapping.parse(sso["ROLE_CLAIM"], sso["ROLES"], sso.get("TEAMS", ""))
    except TeamsSpecError as e:
        raise ImproperlyConfigured(f"AGENTOPS_OIDC_TEAMS: {e}") from e
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


def sync_teams(user: User, granted: Mapping[str, set[str]]) -> tuple[set[str], set[str]]:
    """Make the memberships the mapping made exactly `granted` (team slug -> powers); hand-made
    memberships stay as the admin left them. Returns (teams joined or changed, teams left).
    Saving and deleting memberships tells the user's sockets (runs/access.py)."""
    changed: set[str] = set()
    with transaction.atomic():
        found = {t.slug: t for t in Team.objects.filter(slug__in=granted)}
        for slug in sorted(set(granted) - set(found)):
            log.warning("single sign-on grants team %r, which does not exist: skipped", slug)
        for slug, team in found.items():
            flags = {power: power in granted[slug] for power in TEAM_POWERS}
            member = TeamMember.objects.filter(team=team, user=user).first()
            if member is None:
                TeamMember.objects.create(team=team, user=user, from_sso=True, **flags)
                changed.add(slug)
            elif member.from_sso and any(getattr(member, k) != v for k, v in flags.items()):
                for power, flag in flags.items():
                    setattr(member, power, flag)
                member.save()
                changed.add(slug)
        gone = TeamMember.objects.filter(user=user, from_sso=True).exclude(team__slug__in=found)
        left = set(gone.values_list("team__slug", flat=True))
        for member in gone:
            member.delete()  # one by one: each tells the user's sockets
    teams.forget(user)
    return changed, left


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
