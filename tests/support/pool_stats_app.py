"""The project's ASGI app, plus GET /-/pool: this process's database pool statistics as JSON
(psycopg_pool's get_stats() and the connections checked out), for tests that look at the pool
of a real daphne from outside (tests/test_pool_restarts.py). Never served in production.

    daphne tests.support.pool_stats_app:application
"""

import json

from django.db import connection

PATH = "/-/pool"


def pool_stats() -> dict:
    pool = connection._connection_pools.get(connection.alias)
    if pool is None:
        return {"open": False}
    stats = pool.get_stats()
    return {"open": True, **stats, "checked_out": pool.checked_out()}


async def application(scope, receive, send):
    if scope["type"] != "http" or scope["path"] != PATH:
        # Imported here: a worker reads pool_stats() without building the ASGI app.
        from agentops.asgi import application as project_application

        return await project_application(scope, receive, send)
    body = json.dumps(pool_stats()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
