"""Single sign-on's claim mapping (accounts/sso.py): which of the provider's groups grant which
role here, and how a sign-in brings a user's roles in line with them."""

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from accounts import sso
from runs import events

ROLES = "agentops-operators:operator,agentops-approvers:approver,agentops-admins:admin"


def mapping(spec: str = ROLES, claim: str = "groups") -> sso.ClaimMapping:
    return sso.ClaimMapping.parse(claim, spec)


def test_each_mapped_group_grants_its_role():
    claims = {"groups": ["agentops-operators", "agentops-admins", "finance"]}
    assert mapping().roles_for(claims) == {"operator", "admin"}


def test_unmapped_groups_and_missing_claims_grant_nothing():
    assert mapping().roles_for({"groups": ["finance", "Agentops-Operators"]}) == set()
    assert mapping().roles_for({}) == set()
    assert mapping().roles_for({"groups": None}) == set()
    assert mapping().roles_for({"groups": [42, {"name": "agentops-admins"}]}) == set()


def test_one_group_may_grant_several_roles():
    both = mapping("ops:operator, ops:approver")
    assert both.roles_for({"groups": ["ops"]}) == {"operator", "approver"}


def test_a_single_string_claim_is_read_as_space_separated_values():
    assert mapping().roles_for({"groups": "agentops-approvers other"}) == {"approver"}


def test_a_nested_claim_is_named_by_a_dotted_path():
    keycloak = mapping("agentops-admin:admin", claim="realm_access.roles")
    claims = {"realm_access": {"roles": ["offline_access", "agentops-admin"]}}
    assert keycloak.roles_for(claims) == {"admin"}
    assert keycloak.roles_for({"realm_access": ["agentops-admin"]}) == set()


def test_a_claim_value_may_hold_colons():
    urn = mapping("urn:example:group:ops:operator")
    assert urn.grants == {"urn:example:group:ops": frozenset({sso.Grant("role", "operator")})}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("agentops-operators:operatr", "unknown role 'operatr'"),
        ("agentops-operators", "is not '<claim value>:<role>'"),
        (":admin", "is not '<claim value>:<role>'"),
    ],
)
def test_a_mistake_in_the_mapping_is_named(spec, message):
    with pytest.raises(ValueError, match=message):
        mapping(spec)


def test_a_mistake_in_the_configured_mapping_stops_start_up(settings):
    settings.AGENTOPS_SSO = {**settings.AGENTOPS_SSO, "ROLES": "admins:root"}
    with pytest.raises(ImproperlyConfigured, match="AGENTOPS_OIDC_ROLES: 'admins:root'"):
        sso.configured_mapping()


def test_claims_come_from_the_id_token_and_userinfo_together():
    extra = {"id_token": {"sub": "1", "groups": ["a"]}, "userinfo": {"sub": "1", "email": "e"}}
    assert sso.merged_claims(extra) == {"sub": "1", "groups": ["a"], "email": "e"}
    # Userinfo is the fresher answer where both say something.
    extra["userinfo"]["groups"] = ["b"]
    assert sso.merged_claims(extra)["groups"] == ["b"]


def role_names(user) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


@pytest.mark.django_db
def test_sign_in_replaces_roles_and_keeps_other_groups(operator):
    operator.groups.add(Group.objects.create(name="on-call"))
    assert operator.can_operate
    added, removed = sso.sync_roles(operator, {"approver"})
    assert (added, removed) == ({"approver"}, {"operator"})
    assert role_names(operator) == {"approver", "on-call"}
    # The per-instance role cache is dropped: the same object answers with the new roles.
    assert operator.can_approve and not operator.can_operate


@pytest.mark.django_db
def test_unchanged_roles_change_nothing(operator):
    assert sso.sync_roles(operator, {"operator"}) == (set(), set())
    assert role_names(operator) == {"operator"}


@pytest.mark.django_db
def test_a_role_removed_at_the_provider_tells_the_users_sockets(
    operator, monkeypatch, django_capture_on_commit_callbacks
):
    told: list = []
    monkeypatch.setattr(events, "send", lambda group, message, **kw: told.append((group, message)))
    with django_capture_on_commit_callbacks(execute=True):
        sso.sync_roles(operator, set())
    assert (events.user_group(operator.pk), {"type": "access.changed"}) in told
    assert not operator.can_view


@pytest.mark.django_db
def test_a_role_added_ends_no_access(operator, monkeypatch, django_capture_on_commit_callbacks):
    told: list = []
    monkeypatch.setattr(events, "send", lambda group, message, **kw: told.append((group, message)))
    with django_capture_on_commit_callbacks(execute=True):
        sso.sync_roles(operator, {"operator", "approver"})
    assert told == []


@pytest.mark.django_db
def test_the_sso_backend_never_checks_a_password(operator):
    backend = sso.SsoBackend()
    request = RequestFactory().post("/accounts/login/")
    assert backend.authenticate(request, username="olivia", password="pw-olivia") is None
    # It only loads a signed-in user for their session.
    assert backend.get_user(operator.pk) == operator
