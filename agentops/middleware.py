"""Request checks and error answers that apply to every view, HTML and API alike."""

import json
import logging
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from agentkit import storable
from agentkit.database import DATABASE_DOWN_MESSAGE, DATABASE_RETRY_AFTER_SECONDS

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _text_problem(value) -> str | None:
    if isinstance(value, str):
        return storable.NUL_MESSAGE if "\x00" in value else None
    return next((p for v in value if (p := _text_problem(v))), None)


def _json_problem(request: HttpRequest) -> str | None:
    # Whatever the declared content type: the API parses any body as JSON.
    try:
        body = request.body
    except (RequestDataTooBig, ValueError):
        # Too large or a garbled Content-Length: refused before anything was read, so the
        # view still answers with its own 413 or 400.
        return None
    if not storable.suspect(body):
        return None  # the cheap test first: most bodies are never parsed here
    try:
        return storable.problem(json.loads(body))
    except UnicodeDecodeError:
        return None  # not UTF-8: the view's parser reports it
    except ValueError:
        pass
    # JSON Lines (POST /api/imports): each line on its own.
    for line in body.splitlines():
        try:
            why = storable.problem(json.loads(line)) if line.strip() else None
        except ValueError:
            return None  # not JSON: the view's parser reports it
        if why:
            return why
    return None


def reject_unstorable_text(get_response: Callable[[HttpRequest], HttpResponse]):
    """400 for a NUL character anywhere in the query, a form or a JSON body, and for a lone
    UTF-16 surrogate in a JSON body (agentkit/storable.py: neither can be stored).

    Such a value reaching a filter or a save was a 500, sometimes after part of the request
    had been written. No legitimate input contains one; Django forms refuse NULs field by
    field, this covers everything else (every JSON endpoint: the API, the gateway, signed
    webhooks, imports; API filters; plain request.POST reads) in one place, before any view.
    A query string or a form cannot hold a surrogate: Django decodes them as UTF-8.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        why = next((p for k, vs in request.GET.lists() if (p := _text_problem([k, *vs]))), None)
        if not why and api:
            why = _json_problem(request)
        elif not why and request.method == "POST" and request.content_type in FORM_TYPES:
            why = next(
                (p for k, vs in request.POST.lists() if (p := _text_problem([k, *vs]))), None
            )
        if why:
            if api:
                return JsonResponse({"detail": why}, status=400)
            return HttpResponse(why, status=400, content_type="text/plain")
        return get_response(request)

    return middleware


DATABASE_ERRORS = (OperationalError, InterfaceError)

logger = logging.getLogger(__name__)


def database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """503 with Retry-After: the request was fine, the database was not (down, restarting,
    the pool timed out). A client should retry, not report a bug."""
    logger.error("database unavailable for %s %s: %s", request.method, request.path, exc)
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": DATABASE_DOWN_MESSAGE}, status=503)
    else:
        response = HttpResponse(DATABASE_DOWN_MESSAGE, status=503, content_type="text/plain")
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """A view that fails on a database connection error answers 503, never 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DATABASE_ERRORS):
            return database_unavailable(request, exc)
        return None
