"""`Idempotency-Key` on every state-changing call of the API (agentops/api.py).
Why and how: docs/design/modules.md."""

import contextlib
import functools
import hashlib
import inspect
import json
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.utils import timezone

from .models import IdempotentRequest

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 128
KEY_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
IN_PROGRESS_RETRY_AFTER_SECONDS = 1
PRUNE_BATCH = 5000


def window() -> timedelta:
    return timedelta(seconds=settings.AGENTOPS["IDEMPOTENCY_WINDOW_SECONDS"])


def lock_period() -> timedelta:
    return timedelta(seconds=settings.AGENTOPS["IDEMPOTENCY_LOCK_SECONDS"])


class KeyRefused(ValueError):
    pass


def parse_key(raw: str) -> str:
    if not KEY_RE.fullmatch(raw):
        raise KeyRefused(
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters without "
            f"spaces (got {len(raw)} characters); a UUID is a good key"
        )
    return raw


def fingerprint(request: HttpRequest) -> str:
    """What makes two requests under one key the same request: the query string and the
    body, a JSON body in one spelling (key order and spaces do not count)."""
    try:
        body = request.body
    except RawPostDataException:
        # A multipart body already parsed into request.POST and FILES: those, in order.
        parts = sorted(request.POST.lists()) + sorted(
            (name, [(f.name, f.size) for f in files]) for name, files in request.FILES.lists()
        )
        body = json.dumps(parts, default=str).encode()
    with contextlib.suppress(ValueError, RecursionError):  # not JSON: the bytes as sent
        body = json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    digest = hashlib.sha256(request.META.get("QUERY_STRING", "").encode())
    digest.update(b"\n")
    digest.update(body)
    return digest.hexdigest()


def principal_of(auth: Any) -> str | None:
    """'accounts.user:7', 'gateway.externalagent:3': what a key belongs to; None (no key
    handling) for anything that is not a stored principal."""
    meta = getattr(auth, "_meta", None)
    if meta is None or getattr(auth, "pk", None) is None:
        return None
    return f"{meta.label_lower}:{auth.pk}"


def _refusal(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


def _in_progress(key: str) -> JsonResponse:
    response = _refusal(
        409,
        f"a request with {HEADER} {key!r} is still in progress; retry in a moment to get its "
        "answer",
    )
    response["Retry-After"] = str(IN_PROGRESS_RETRY_AFTER_SECONDS)
    return response


def _other_body(row: IdempotentRequest) -> JsonResponse:
    return _refusal(
        422,
        f"{HEADER} {row.key!r} was already used for another request to {row.method} "
        f"{row.path} (another body or query); send a new key for a new request",
    )


@dataclass
class Attempt:
    """One request with a key, from the transaction around it to its stored answer."""

    key: str
    method: str
    path: str
    row: IdempotentRequest | None = None  # this request's claim, once made
    scope: dict = field(default_factory=dict)

    # --- sync views: claim, view and answer in one transaction ------------------------------
    def claim(self, request: HttpRequest) -> HttpResponse | None:
        """Claim the key inside the transaction `guard` opened; an answer instead when the
        key is taken (the first answer again, 409 or 422)."""
        principal = principal_of(getattr(request, "auth", None))
        if principal is None:
            return None
        self.scope = {"principal": principal, "method": self.method, "path": self.path}
        self.scope["key"] = self.key
        if connection.vendor == "postgresql" and not _advisory_lock(self.scope):
            return _in_progress(self.key)
        # SQLite: transactions are IMMEDIATE (settings), so the holder has committed by now.
        now = timezone.now()
        found = IdempotentRequest.objects.filter(**self.scope).first()
        if found is not None and found.expires_at <= now:
            found.delete()  # past the window: the key is free again
            found = None
        mine = fingerprint(request)
        if found is not None:
            return self._answer_for(found, mine, now)
        try:
            with transaction.atomic():
                self.row = IdempotentRequest.objects.create(
                    **self.scope,
                    fingerprint=mine,
                    created_at=now,
                    expires_at=now + window(),
                )
        except IntegrityError:
            # Only if the lock above was not taken (another database): someone holds it.
            return _in_progress(self.key)
        return None

    def _answer_for(self, found: IdempotentRequest, mine: str, now) -> HttpResponse:
        if found.fingerprint != mine:
            return _other_body(found)
        if found.status is None:
            return _in_progress(self.key)
        return found.replay()

    def keep(self, response: HttpResponse) -> None:
        """Store the answer with the claim, or give the key up with the work (5xx)."""
        if response.status_code >= 500:
            # The view failed (or the database did): nothing it did is kept, nor the key.
            transaction.set_rollback(True)
            return
        if self.row is None:
            return
        if response.streaming:
            IdempotentRequest.objects.filter(pk=self.row.pk).delete()  # no answer to keep
            return
        IdempotentRequest.objects.filter(pk=self.row.pk).update(**_answer_fields(response))

    # --- async views: the claim commits first, the answer after -----------------------------
    def claim_committed(self, request: HttpRequest) -> HttpResponse | None:
        principal = principal_of(getattr(request, "auth", None))
        if principal is None:
            return None
        self.scope = {"principal": principal, "method": self.method, "path": self.path}
        self.scope["key"] = self.key
        now = timezone.now()
        mine = fingerprint(request)
        with transaction.atomic():
            found = IdempotentRequest.objects.select_for_update().filter(**self.scope).first()
            if found is not None and found.expires_at <= now:
                found.delete()
                found = None
            if found is not None:
                stale = found.status is None and (found.locked_until or now) <= now
                if not stale or found.fingerprint != mine:
                    return self._answer_for(found, mine, now)
                # Its process died before answering: this request takes the key over.
                found.locked_until = now + lock_period()
                found.save(update_fields=["locked_until"])
                self.row = found
                return None
            try:
                with transaction.atomic():
                    self.row = IdempotentRequest.objects.create(
                        **self.scope,
                        fingerprint=mine,
                        created_at=now,
                        expires_at=now + window(),
                        locked_until=now + lock_period(),
                    )
            except IntegrityError:
                return _in_progress(self.key)
        return None

    def keep_committed(self, response: HttpResponse) -> None:
        if self.row is None:
            return
        mine = IdempotentRequest.objects.filter(pk=self.row.pk, status__isnull=True)
        if response.status_code >= 500 or response.streaming:
            mine.delete()
            return
        mine.update(**_answer_fields(response), locked_until=None)


def _answer_fields(response: HttpResponse) -> dict:
    return {
        "status": response.status_code,
        "body": response.content,
        "content_type": response.get("Content-Type", "")[:100],
        "location": response.get("Location", "")[:400],
    }


def _advisory_lock(scope: dict) -> bool:
    """A transaction-scoped lock on the key: False when another transaction holds it."""
    digest = hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_id])
        return bool(cursor.fetchone()[0])


def _attempt_or_refusal(request: HttpRequest) -> Attempt | HttpResponse | None:
    raw = request.headers.get(HEADER)
    if raw is None or request.method not in UNSAFE_METHODS:
        return None
    try:
        key = parse_key(raw)
    except KeyRefused as exc:
        return _refusal(400, str(exc))
    return Attempt(key=key, method=request.method, path=request.path[:400])


def _operation_of(run) -> Any:
    """The ninja Operation whose `run` this is, under the view decorators already on it
    (`decorate_view`, which keep `__wrapped__`)."""
    while not hasattr(run, "__self__"):
        run = run.__wrapped__
    return run.__self__


def guard(run):
    """`view` mode: the transaction around the whole operation (authentication, the view,
    its answer), for operations that have a principal and change state."""
    operation = _operation_of(run)
    if not operation.auth_callbacks:
        return run  # signed webhooks and callbacks: their own replay protection
    if not UNSAFE_METHODS & set(operation.methods):
        return run

    if inspect.iscoroutinefunction(run):

        @functools.wraps(run)
        async def guarded_async(request: HttpRequest, *args, **kwargs):
            attempt = _attempt_or_refusal(request)
            if not isinstance(attempt, Attempt):
                return attempt or await run(request, *args, **kwargs)
            setattr(request, "_idempotency", attempt)  # noqa: B010  # read by the inner guard
            response = await run(request, *args, **kwargs)
            await sync_to_async(attempt.keep_committed)(response)
            return response

        return guarded_async

    @functools.wraps(run)
    def guarded(request: HttpRequest, *args, **kwargs):
        attempt = _attempt_or_refusal(request)
        if not isinstance(attempt, Attempt):
            return attempt or run(request, *args, **kwargs)
        setattr(request, "_idempotency", attempt)  # noqa: B010  # read by the inner guard
        with transaction.atomic():
            response = run(request, *args, **kwargs)
            attempt.keep(response)
        return response

    return guarded


def claim(view_func):
    """`operation` mode: after authentication and the body's validation, claim the key or
    answer from it."""
    if inspect.iscoroutinefunction(view_func):

        @functools.wraps(view_func)
        async def claimed_async(request: HttpRequest, *args, **kwargs):
            attempt = getattr(request, "_idempotency", None)
            if attempt is not None:
                answer = await sync_to_async(attempt.claim_committed)(request)
                if answer is not None:
                    return answer
            return await view_func(request, *args, **kwargs)

        return claimed_async

    @functools.wraps(view_func)
    def claimed(request: HttpRequest, *args, **kwargs):
        attempt = getattr(request, "_idempotency", None)
        if attempt is not None:
            answer = attempt.claim(request)
            if answer is not None:
                return answer
        return view_func(request, *args, **kwargs)

    return claimed


def install(api) -> None:
    """Both decorators on every operation of `api` (a NinjaAPI), before its routers are
    built."""
    api.add_decorator(guard, mode="view")
    api.add_decorator(claim, mode="operation")


def prune(now=None) -> int:
    """Delete keys past their window, in bounded batches; how many went."""
    now = now or timezone.now()
    pruned = 0
    while True:
        batch = list(
            IdempotentRequest.objects.filter(expires_at__lte=now).values_list("pk", flat=True)[
                :PRUNE_BATCH
            ]
        )
        if not batch:
            return pruned
        pruned += IdempotentRequest.objects.filter(pk__in=batch).delete()[0]


# The header in the OpenAPI document, on every operation `guard` covers.
OPENAPI_PARAMETER = {
    "name": HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH},
    "description": (
        "Makes a retry safe: the same key again (same principal, method and path) within "
        "the idempotency window (24 h by default) is answered with the first answer, marked "
        f"`{REPLAYED_HEADER}: true`, and nothing is done twice. The same key with another "
        "body: 422. While the first request with the key still runs: 409 with Retry-After. "
        f"1 to {MAX_KEY_LENGTH} printable ASCII characters without spaces (a UUID), else 400. "
        "Answers of 500 and more are not kept."
    ),
}


def document(schema: dict) -> dict:
    """Add the header to every authenticated state-changing operation of an OpenAPI
    document (those `guard` covers)."""
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if method.upper() not in UNSAFE_METHODS or not operation.get("security"):
                continue
            parameters = operation.setdefault("parameters", [])
            if not any(p.get("name") == HEADER for p in parameters):
                parameters.append(dict(OPENAPI_PARAMETER))
    return schema
