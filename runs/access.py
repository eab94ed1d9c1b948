"""Access ends when access ends: the live streams (runs/consumers.py, approvals/consumers.py)
check who may watch when a socket connects, and again whenever that may have changed.
Why and how: docs/design/modules.md."""

import hashlib
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
    user_logged_out,
)
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from django.utils.crypto import constant_time_compare

from accounts.models import TeamAgent, TeamMember

from . import events


def session_digest(session_key: str) -> str:
    """What a logout announces: its session, without sending the session key itself through
    the channel layer."""
    return hashlib.sha256(session_key.encode()).hexdigest()


def session_user(session_key: str | None) -> Any | None:
    """The active user a session belongs to now, read from the database; None once it was
    logged out, expired, its user deactivated or deleted, or their password changed.

    django.contrib.auth.get_user() without its side effects: a socket must not flush or
    cycle the browser's session (it cannot give the browser a new cookie).
    """
    if not session_key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    try:
        user_id = get_user_model()._meta.pk.to_python(session[SESSION_KEY])
        backend_path = session[BACKEND_SESSION_KEY]
    except KeyError:  # no such session (logged out or expired), or nobody logged in
        return None
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(user_id)  # None if inactive or gone
    if user is None:
        return None
    if hasattr(user, "get_session_auth_hash"):
        shown = session.get(HASH_SESSION_KEY) or ""
        valid = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
        if not any(constant_time_compare(shown, h) for h in valid):
            return None
    return user


# --- who is told ------------------------------------------------------------------------------
def on_logged_out(sender, request, user, **kwargs) -> None:
    if user is None or request is None:
        return
    # The session is flushed right after this signal: its sockets cannot wait to find that
    # out from the database, they close because the event names their session.
    key = getattr(getattr(request, "session", None), "session_key", None)
    events.publish_access_changed(user.pk, session=session_digest(key) if key else None)


def on_user_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    # Logging in saves last_login, and nothing else: no access ends there.
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    events.publish_access_changed(instance.pk)


def on_user_deleted(sender, instance, **kwargs) -> None:
    events.publish_access_changed(instance.pk)


def on_groups_changed(sender, instance, action: str, reverse: bool, pk_set, **kwargs) -> None:
    """user.groups.remove/clear() (instance: the user), or group.user_set.remove/clear()
    (instance: the group, pk_set: the users). Adding a role ends no access."""
    if not reverse:
        if action in ("post_remove", "post_clear"):
            events.publish_access_changed(instance.pk)
    elif action == "post_remove":
        for user_id in pk_set or ():
            events.publish_access_changed(user_id)
    elif action == "pre_clear":
        # After the clear nobody is left to tell; announced on commit, once it is done.
        _tell_members(instance)


def on_group_changed(sender, instance, created: bool = False, **kwargs) -> None:
    """A role group renamed (post_save) or deleted (pre_delete: its members are still there
    to be found; they are told on commit)."""
    if not created and instance.pk is not None:
        _tell_members(instance)


def _tell_members(group: Group) -> None:
    for user_id in group.user_set.values_list("pk", flat=True):
        events.publish_access_changed(user_id)


def on_membership_changed(sender, instance, **kwargs) -> None:
    """A team membership changed or ended: its user may see less (accounts/teams.py)."""
    events.publish_access_changed(instance.user_id)


def on_team_agents_changed(sender, instance, **kwargs) -> None:
    """An agent joined or left a team: that team's members may see less. Everyone else who
    lost the agent (it was owned by no team until now) finds out at the periodic re-check."""
    for user_id in TeamMember.objects.filter(team_id=instance.team_id).values_list(
        "user_id", flat=True
    ):
        events.publish_access_changed(user_id)


def connect_signals() -> None:
    """Called once, from runs/apps.py."""
    user_model = get_user_model()
    uid = "runs.access"
    user_logged_out.connect(on_logged_out, dispatch_uid=uid)
    post_save.connect(on_user_saved, sender=user_model, dispatch_uid=uid)
    post_delete.connect(on_user_deleted, sender=user_model, dispatch_uid=uid)
    m2m_changed.connect(on_groups_changed, sender=user_model.groups.through, dispatch_uid=uid)
    post_save.connect(on_group_changed, sender=Group, dispatch_uid=uid)
    pre_delete.connect(on_group_changed, sender=Group, dispatch_uid=uid)
    for signal in (post_save, post_delete):
        signal.connect(on_membership_changed, sender=TeamMember, dispatch_uid=uid)
        signal.connect(on_team_agents_changed, sender=TeamAgent, dispatch_uid=uid)
