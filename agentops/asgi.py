"""HTTP and WebSocket entry point: `daphne agentops.asgi:application`."""

import os
import pprint
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
django_asgi_app = get_asgi_application()

from accounts.lockouts import refuse_forgeable_server_address  # noqa: E402

# daphne's --proxy-headers believes the client's X-Forwarded-For: refuse to serve with it
# unless proxies are declared (the sign-in lockout counts per address).
refuse_forgeable_server_address(sys.argv)

from agentops import start_checks  # noqa: E402

# A configuration `manage.py check` refuses is refused here too: daphne started without it
# must not serve (and open the gates of) an agent whose rules gate nothing (start_checks.py).
start_checks.refuse_unsound("the web process")

from autobahn.websocket import protocol as autobahn_protocol  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402

from agentops import access_log, bodies  # noqa: E402
from agentops.routing import websocket_urlpatterns  # noqa: E402
from gateway import waits  # noqa: E402


async def http(scope, receive, send):
    """Django, except for the external agents' waits: served without Django's middleware,
    so a waiting call holds no thread and no database connection (gateway/waits.py); and a
    body sent where none is taken, refused before it is read (agentops/bodies.py)."""
    endpoint = waits.route(scope) or bodies.refusal(scope) or django_asgi_app
    await endpoint(scope, receive, send)


class _FormattedWhenShown:
    """pprint.pformat(obj), computed only if a log line shows it."""

    def __init__(self, obj, *args, **kwargs):
        self.obj, self.args, self.kwargs = obj, args, kwargs

    def __str__(self) -> str:
        return pprint.pformat(self.obj, *self.args, **self.kwargs)


# autobahn (daphne's WebSocket protocol) pretty-prints its ~40 settings for a debug line on
# every connection, shown or not: a third of daphne's CPU per handshake, the largest cost of
# a reconnect storm after the database reads (bench/reconnect_storm.py). The line is still
# right when debug logging is on.
autobahn_protocol.pformat = _FormattedWhenShown  # type: ignore[assignment]

application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(
            # The session only: each consumer reads its user after the handshake
            # (runs/consumers.py `admit`).
            SessionMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

if settings.LOG_FORMAT == "json":
    # Every line of the output JSON: the access lines too, with the request id, user and
    # trace id (agentops/access_log.py).
    application = access_log.AccessLog(application)
    access_log.replace_daphnes()
