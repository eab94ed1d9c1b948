"""Request checks and error answers that apply to every view, HTML and API alike."""

import json
import logging
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
NUL_MESSAGE = "the request contains a NUL character (\\x00), which is not accepted"


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _json_has_nul(request: HttpRequest) -> bool:
    # Whatever the declared content type: the API parses any body as JSON.
    try:
        body = request.body
    except (RequestDataTooBig, ValueError):
        # Too large or a garbled Content-Length: refused before anything was read, so the
        # view still answers with its own 413 or 400.
        return False
    if b"\\u0000" not in body and b"\x00" not in body:
        return False  # the cheap test first: most bodies are never parsed here
    try:
        return _has_nul(json.loads(body))
    except (ValueError, UnicodeDecodeError):
        return False  # not JSON: the view's parser reports it


def reject_nul_characters(get_response: Callable[[HttpRequest], HttpResponse]):
    """400 for a NUL character anywhere in the query, a form or a JSON body.

    PostgreSQL cannot store NUL in text or jsonb (psycopg raises DataError), so such a value
    reaching a filter or a save was a 500, and on SQLite it would be stored where nobody can
    see it. No legitimate input contains one; Django forms refuse them field by field, this
    covers everything else (API filters, JSON bodies, plain request.POST reads) in one place.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        bad = any(_has_nul(k) or _has_nul(vs) for k, vs in request.GET.lists())
        if not bad and api:
            bad = _json_has_nul(request)
        elif not bad and request.method == "POST" and request.content_type in FORM_TYPES:
            bad = any(_has_nul(k) or _has_nul(vs) for k, vs in request.POST.lists())
        if bad:
            if api:
                return JsonResponse({"detail": NUL_MESSAGE}, status=400)
            return HttpResponse(NUL_MESSAGE, status=400, content_type="text/plain")
        return get_response(request)

    return middleware


DATABASE_DOWN_MESSAGE = "the database is unavailable; retry in a few seconds"
DATABASE_RETRY_AFTER_SECONDS = 5
DATABASE_ERRORS = (OperationalError, InterfaceError)

logger = logging.getLogger(__name__)


def database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """503 with Retry-After: the request was fine, the database was not (down, restarting,
    the pool timed out). A client should retry, not report a bug."""
    logger.error("database unavailable for %s %s: %s", request.method, request.path, exc)
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
