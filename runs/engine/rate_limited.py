"""Rate limits on actions, counted in the database across all runs and workers.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from agentkit.tools import Tool, window_words

from ..models import RateLimitScope, RateLimitUse, RateLimitWait, Step
from . import owned, replaying
from .owned import Stop, Work, renewal


@dataclass(frozen=True)
class Scope:
    name: str
    calls: int
    per: timedelta
    on_limit: str  # "wait" or "fail"
    label: str  # "send_email: at most 20 per hour across all runs"


@dataclass(frozen=True)
class Refusal:
    scope: Scope
    retry_at: datetime  # when the window first has room again


def reserve(
    scopes: list[Scope], *, key: str, run_id: UUID | str, tool: str, now: datetime | None = None
) -> Refusal | None:
    """Record the call's use in every scope if each has room (None), else the first full
    scope and when it has room again (nothing recorded). A call already recorded under this
    key (a resumed call) is not counted again."""
    now = now or timezone.now()
    names = sorted({s.name for s in scopes})
    with transaction.atomic():
        RateLimitScope.objects.bulk_create(
            [RateLimitScope(scope=n) for n in names], ignore_conflicts=True
        )
        # In one order, so two calls under the same two limits cannot deadlock.
        list(RateLimitScope.objects.select_for_update().filter(scope__in=names).order_by("scope"))
        if RateLimitUse.objects.filter(scope__in=names, key=key).exists():
            return None
        for scope in scopes:
            window = RateLimitUse.objects.filter(scope=scope.name, at__gt=now - scope.per)
            used = window.count()
            if used >= scope.calls:
                # The window has room when enough of its uses have aged out of it.
                frees = window.order_by("at").values_list("at", flat=True)[used - scope.calls]
                return Refusal(scope, frees + scope.per)
        RateLimitUse.objects.bulk_create(
            [RateLimitUse(scope=s.name, key=key, run_id=run_id, tool=tool, at=now) for s in scopes]
        )
        for scope in scopes:
            # Uses out of the window count for nothing any more.
            RateLimitUse.objects.filter(scope=scope.name, at__lte=now - scope.per).delete()
    return None


def used(scope: str, per: timedelta, now: datetime | None = None) -> int:
    """How many calls ran in the scope's window up to `now`."""
    now = now or timezone.now()
    return RateLimitUse.objects.filter(scope=scope, at__gt=now - per).count()


def scopes_for(work: Work, tool: Tool) -> list[Scope]:
    """The limits on this call: the tool's own (across all runs) and the agent's."""
    scopes = []
    if tool.rate_limit is not None:
        limit = tool.rate_limit
        scopes.append(
            Scope(
                f"tool:{tool.name}",
                limit.calls,
                limit.per,
                limit.on_limit,
                f"{tool.name}: {limit.describe()} across all runs",
            )
        )
    declared = (work.agent_config.get("rate_limits") or {}).get(tool.name)
    if declared:
        agent = work.run.agent
        per = timedelta(seconds=declared["per_seconds"])
        scopes.append(
            Scope(
                f"agent:{agent}:{tool.name}",
                declared["calls"],
                per,
                declared["on_limit"],
                f"{tool.name}: at most {declared['calls']} per {window_words(per)} "
                f"across all runs of {agent}",
            )
        )
    return scopes


def admit(work: Work, item: dict, tool: Tool, key: str) -> str | None:
    """None when the call may run now (its use recorded); else why it was refused (its
    guard step written; the caller records the error). A run that waits for room is parked
    (Stop)."""
    if replaying.current() is not None:
        return None  # a replay's calls are the recording's, not new uses
    scopes = scopes_for(work, tool)
    if not scopes:
        return None
    refusal = reserve(scopes, key=key, run_id=work.run.pk, tool=tool.name)
    if refusal is None:
        return None
    if refusal.scope.on_limit == "wait":
        _wait(work, item, tool, refusal)
    guard = _guard_step(item, tool, refusal, "fail")
    owned.append(work, Step.Kind.GUARD, guard, renewal(model_call_next=False))
    return (
        f"rate limit reached, not run: {refusal.scope.label}; "
        f"the next slot opens at {refusal.retry_at:%Y-%m-%d %H:%M:%S} UTC"
    )


def _guard_step(item: dict, tool: Tool, refusal: Refusal, action: str) -> dict:
    return {
        "guard": "rate_limit",
        "tool": tool.name,
        "tool_use_id": item["id"],
        "scope": refusal.scope.name,
        "limit": refusal.scope.label,
        "action": action,
        "retry_at": refusal.retry_at.isoformat(),
    }


def _wait(work: Work, item: dict, tool: Tool, refusal: Refusal) -> None:
    """Park the run until the window has room (the call stays pending). Raises Stop."""
    until = refusal.retry_at
    detail = f"rate limit of {tool.name}: resumes at {until:%Y-%m-%d %H:%M:%S} UTC"
    with transaction.atomic():
        run = owned.locked(work)
        RateLimitWait.objects.update_or_create(
            run=run, defaults={"tool": tool.name, "scope": refusal.scope.name, "until": until}
        )
        run.append_step(Step.Kind.GUARD, _guard_step(item, tool, refusal, "wait"))
        run.park(detail, reason="rate limit", note=f"{refusal.scope.label}; {detail}")
        work.run = run
        owned.write_checkpoint(work)
    raise Stop
