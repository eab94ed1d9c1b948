"""Pushed events rendered in the web process: once per event per process.
Why and how: docs/design/modules.md."""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import SynchronousOnlyOperation
from django.db.models import Model
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentkit.database import any_thread

from . import events, rendering
from .models import Run, Step

log = logging.getLogger("agentops.live")

# Events are rendered within milliseconds of each other by all receivers; a few hundred
# entries cover any burst while bounding memory.
CACHE_SIZE = 512


class RenderCache:
    def __init__(self, size: int = CACHE_SIZE):
        self.size = size
        self.loop: asyncio.AbstractEventLoop | None = None
        self.futures: OrderedDict[Hashable, asyncio.Future] = OrderedDict()

    async def get(
        self, key: Hashable, render: Callable[..., dict], *args: Any, inline: bool = False
    ) -> dict:
        """The render's result, once per key. `inline`: the render needs no database."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            self.loop, self.futures = loop, OrderedDict()
        future = self.futures.get(key)
        if future is None:
            future = asyncio.ensure_future(_rendered(render, args, inline))
            self.futures[key] = future
            if len(self.futures) > self.size:
                self.futures.popitem(last=False)
        # shield: one receiver going away must not cancel the render the others wait for.
        return await asyncio.shield(future)


# Shared by every app's live events (approvals/stream_messages.py too): one cache, one loop check.
cache = RenderCache()


async def _rendered(render: Callable[..., dict], args: tuple, inline: bool) -> dict:
    if inline:
        try:
            return render(*args)
        except SynchronousOnlyOperation:
            # A template that came to read the database: still shown, rendered in the thread.
            log.warning("a live render from event data read the database", exc_info=True)
        except Exception:
            log.exception("rendering a live event failed")
            return {}
    return await any_thread(_safely)(render, *args)


def _safely(render: Callable[..., dict], *args: Any) -> dict:
    # A template error must not break a live stream: viewers get the event as JSON and the
    # page shows the step on the next load.
    try:
        return render(*args)
    except Exception:
        log.exception("rendering a live event failed")
        return {}


def summary(event: dict) -> dict:
    """The event without the data it was rendered from (what JSON subscribers get)."""
    return {k: v for k, v in event.items() if k not in events.DATA_KEYS}


# --- the event's data back into (unsaved) model instances, which the page templates show ------
def _python(model: type[Model], values: dict[str, Any]) -> dict[str, Any]:
    return {name: model._meta.get_field(name).to_python(value) for name, value in values.items()}


def step_from(run_id: Any, data: dict) -> Step:
    """A step serialised by StepOut (its fields are the model's own)."""
    return Step(run_id=run_id, **_python(Step, data))


_OUTCOMES = ("approved", "edited", "rejected", "answered", "expired", "tool_failed")


def _waited_before(data: dict, times: dict) -> float:
    """Seconds waited before the current wait (Run.seconds_waited), from the payload."""
    since = parse_datetime(str(times["waiting_since"] or ""))
    if since is None:
        return times["waiting_seconds"]
    end = parse_datetime(str(data["finished_at"] or "")) or timezone.now()
    return max(0.0, times["waiting_seconds"] - (end - since).total_seconds())


def run_from(data: dict) -> Run:
    """A run serialised by RunLiveOut, with what its header and rows show."""
    limits, counters, usage = data["limits"], data["counters"], data["usage"]
    outcome, times = data["outcome"], data["time"]
    run = Run(
        agent_config={"title": data["agent_title"], "model": data["model"]},
        **_python(
            Run,
            {
                **{
                    name: data[name]
                    for name in (
                        "id",
                        "agent",
                        "provider",
                        "status",
                        "status_detail",
                        "termination_reason",
                        "output",
                        "trigger",
                        "parent_id",
                        "created_at",
                        "started_at",
                        "finished_at",
                        "updated_at",
                        "input_summary",
                    )
                },
                **limits,
                "step_count": counters["steps"],
                "error_count": counters["errors"],
                "consecutive_errors": counters["consecutive_errors"],
                "retry_count": counters["retries"],
                "last_seq": counters["last_seq"],
                **usage,
                **{f"{name}_count": outcome[name] for name in _OUTCOMES},
                # Working time is elapsed less waited: the wait so far, minus the current one.
                "waiting_since": times["waiting_since"],
                "seconds_waited": _waited_before(data, times),
            },
        ),
    )
    if data["launched_by"] is not None:
        run.launched_by = get_user_model()(username=data["launched_by"])
    return run


# --- rendering --------------------------------------------------------------------------------
def _step_html(event: dict) -> dict:
    if "step" in event and "run" in event:
        step, run = step_from(event["run_id"], event["step"]), run_from(event["run"])
    else:
        step = Step.objects.filter(run_id=event["run_id"], seq=event["seq"]).first()
        if step is None:
            return {}
        run = Run.objects.select_related("launched_by").get(pk=event["run_id"])
    return rendering.render_step_event(step, run)


def _run_html(event: dict, launched: bool) -> dict:
    if "run" in event:
        run = run_from(event["run"])
    else:
        run = Run.objects.select_related("launched_by").filter(pk=event["run_id"]).first()
        if run is None:
            return {}
    return rendering.render_run_event(run, launched)


async def step_payload(event: dict) -> dict:
    """A run group event with its HTML: the step for #timeline plus the run's header."""
    key = ("step", event["run_id"], event["seq"])
    inline = "step" in event and "run" in event
    return {**summary(event), **await cache.get(key, _step_html, event, inline=inline)}


def _draft_html(event: dict) -> dict:
    return rendering.render_draft_event(event["seq"], event["text"], event.get("omitted", 0))


async def draft_payload(event: dict) -> dict:
    """A draft of the model's text with its HTML (#draft), without the text itself."""
    # Each draft of a step is longer than the one before; its length tells them apart.
    key = ("draft", event["run_id"], event["seq"], event.get("omitted", 0) + len(event["text"]))
    html = await cache.get(key, _draft_html, event, inline=True)
    return {"run_id": event["run_id"], "seq": event["seq"], "draft": True, **html}


async def run_payload(event: dict) -> dict:
    """A runs group event with its HTML: the run's rows in the runs list and dashboard."""
    run_id, seq = event["run_id"], event["seq"]
    # A merged event (runs/events.py) that includes the launch still inserts the row.
    launched = event.get("first", seq) == 1
    key = ("run", run_id, seq, launched)
    inline = "run" in event
    return {**summary(event), **await cache.get(key, _run_html, event, launched, inline=inline)}
