"""A request body sent to an API endpoint that takes none is refused (413) before it is read.

Django's ASGI handler reads a request's whole body (to a spooled file) before any middleware
or view runs: `/runs/{id}/pause`, `/resume`, `/replay`, `/approvals/{id}/open` and the other
endpoints without a body read and ignored 10 MB. Here, before Django: an unsafe method with a
body (a non-zero Content-Length, or chunked) to an API operation that declares neither body,
form nor file parameters, nor a raw request body in its OpenAPI (`openapi_extra`
requestBody, as webhooks, imports and pending callbacks do), is answered at once; the client
sees the answer instead of waiting to upload the rest.
"""

import json
from collections.abc import Awaitable, Callable
from functools import lru_cache

from django.urls import Resolver404, resolve
from ninja.operation import PathView

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BODY_SOURCES = frozenset({"body", "form", "file"})
MESSAGE = "this endpoint takes no request body; send none (Content-Length: 0)"

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]


def refusal(scope: dict) -> ASGIApp | None:
    """The ASGI endpoint that refuses this request's body, or None (it may go on)."""
    method, path = scope.get("method", ""), scope.get("path", "")
    if method not in UNSAFE or not path.startswith("/api/") or not _carries_body(scope):
        return None
    return _refuse if _takes_no_body(method, path) else None


def _carries_body(scope: dict) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False


@lru_cache(maxsize=1024)
def _takes_no_body(method: str, path: str) -> bool:
    try:
        match = resolve(path)
    except Resolver404:
        return False
    view = _path_view(match.func)
    if view is None:
        return False  # not a ninja operation: Django's own limits apply
    for operation in view.operations:
        if method in operation.methods:
            if (operation.openapi_extra or {}).get("requestBody"):
                return False
            return not any(
                getattr(model, "__ninja_param_source__", None) in BODY_SOURCES
                for model in operation.models
            )
    return False  # ninja answers 405


def _path_view(func: Callable) -> PathView | None:
    # ninja's URL pattern calls a closure over its PathView (ninja.operation.PathView.get_view).
    for cell in getattr(func, "__closure__", None) or ():
        if isinstance(cell.cell_contents, PathView):
            return cell.cell_contents
    return None


async def _refuse(scope: dict, receive: Callable, send: Callable) -> None:
    body = json.dumps({"detail": MESSAGE}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is not read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
