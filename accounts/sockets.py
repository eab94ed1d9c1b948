"""Who a WebSocket is: the session's user, as Django's sign-in left it (the same check of the
password's fingerprint as a page), read by the consumer once the handshake is accepted
(runs/consumers.py `admit`, which says why), on any executor thread.

channels' AuthMiddlewareStack read it before the handshake was answered, on asgiref's one
thread_sensitive thread where every socket's call waited behind every other's."""

from types import SimpleNamespace

from django.contrib import auth


def user_of(session):
    """The session's user, or AnonymousUser (sync: reads the database). A session whose user
    changed password is flushed, as django.contrib.auth does for a page."""
    return auth.get_user(SimpleNamespace(session=session))
