"""HTTP and WebSocket entry point: `daphne agentops.asgi:application`."""

import os
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

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentops.routing import websocket_urlpatterns  # noqa: E402
from gateway import waits  # noqa: E402


async def http(scope, receive, send):
    """Django, except for the external agents' waits: served without Django's middleware,
    so a waiting call holds no thread and no database connection (gateway/waits.py)."""
    endpoint = waits.route(scope) or django_asgi_app
    await endpoint(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
