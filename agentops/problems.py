"""Every error under /api/ in one shape: RFC 9457 problem details (`application/problem+json`).

Views and handlers keep answering `{"detail": …}` (and any fields of their own, such as
`errors`); this middleware turns each error response into `{"type", "title", "status",
"detail", …}`, including those no view of ours made: Django's 404 for an unknown path, a 405,
ninja's 422 (its list of field errors moves to `errors`, `detail` says them in words).
"""

import json
from collections.abc import Callable
from http import HTTPStatus

from django.http import HttpRequest, HttpResponse

CONTENT_TYPE = "application/problem+json"
# One stable `type` per kind of error; the integrators' docs (errors) list them.
TYPE_PREFIX = "urn:agentops:problem:"
KINDS = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    410: "gone",
    413: "too-large",
    415: "unsupported-media-type",
    422: "invalid-input",
    429: "rate-limited",
    503: "unavailable",
}
# The original response's headers are kept (Retry-After, WWW-Authenticate, Allow, an
# idempotent replay's marker…), but for these, which describe the new body.
BODY_HEADERS = ("Content-Type", "Content-Length")


def problem_details(get_response: Callable[[HttpRequest], HttpResponse]):
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if (
            response.status_code < 400
            or response.streaming
            or not request.path.startswith("/api/")
            or response.get("Content-Type", "").startswith(CONTENT_TYPE)
        ):
            return response
        return as_problem(request, response)

    return middleware


def as_problem(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    status = response.status_code
    body = _json_body(response)
    detail = body.pop("detail", None) if body is not None else None
    extra = body or {}
    if isinstance(detail, list):  # ninja's field errors
        extra["errors"] = detail
        detail = "invalid input: " + "; ".join(_field_error(e) for e in detail)
    if not detail:
        detail = _default_detail(request, status)
    problem = {
        "type": TYPE_PREFIX + KINDS.get(status, "server-error" if status >= 500 else "error"),
        "title": _title(status),
        "status": status,
        "detail": str(detail),
        **{k: v for k, v in extra.items() if k not in ("type", "title", "status")},
    }
    if "type" in extra:  # a view that names its error more precisely than its status
        problem["type"] = TYPE_PREFIX + str(extra["type"])
    answer = HttpResponse(
        json.dumps(problem, default=str), status=status, content_type=CONTENT_TYPE
    )
    for header, value in response.items():
        if header not in BODY_HEADERS:
            answer[header] = value
    answer.cookies = response.cookies
    return answer


def _json_body(response: HttpResponse) -> dict | None:
    if not response.get("Content-Type", "").startswith("application/json"):
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else {"detail": body}


def _field_error(error: object) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("body", "payload"))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg"))


def _default_detail(request: HttpRequest, status: int) -> str:
    if status == 404:
        return f"no such API resource: {request.path}"
    if status == 405:
        return f"{request.method} is not allowed on {request.path}"
    if status >= 500:
        return "the server failed to answer; the error was logged"
    return _title(status)


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details; some errors add fields of their own.",
    "properties": {
        "type": {"type": "string", "description": "urn:agentops:problem:<kind>, stable"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what went wrong, for a person"},
        "errors": {"description": "field errors of invalid input (422)"},
    },
    "required": ["type", "title", "status", "detail"],
    "additionalProperties": True,
}


def document(schema: dict) -> dict:
    """Every operation of an OpenAPI document answers its errors as problem details: 4XX and
    5XX responses with the Problem schema, beside the statuses it documents itself."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    answer = {"content": {CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for code, description in (("4XX", "Refused"), ("5XX", "Unavailable or failed")):
                responses.setdefault(code, {"description": description, **answer})
            for code, response in responses.items():
                if str(code)[0] in "45":  # whatever a view declared, the middleware answers
                    response.update(answer)
    return schema
