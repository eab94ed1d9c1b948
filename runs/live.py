"""Pushed events rendered in the web process: once per event per process.

Workers publish small events (`{run_id, seq, kind}`, `{approval_id, event}`); rendering them
there cost more CPU than the agent step itself. Here the first consumer that receives an
event renders it, and every other consumer of this process receiving the same event awaits
that same render: a hundred viewers of a run still cost one render per step.

The cache holds asyncio futures, so it belongs to one event loop (daphne has one; tests
start a new one per test, which starts a fresh cache).
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from channels.db import database_sync_to_async

from . import rendering
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

    async def get(self, key: Hashable, render: Callable[..., dict], *args: Any) -> dict:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            self.loop, self.futures = loop, OrderedDict()
        future = self.futures.get(key)
        if future is None:
            future = asyncio.ensure_future(database_sync_to_async(_safely)(render, *args))
            self.futures[key] = future
            if len(self.futures) > self.size:
                self.futures.popitem(last=False)
        # shield: one receiver going away must not cancel the render the others wait for.
        return await asyncio.shield(future)


# Shared by every app's live events (approvals/live.py too): one cache, one loop check.
cache = RenderCache()


def _safely(render: Callable[..., dict], *args: Any) -> dict:
    # A template error must not break a live stream: viewers get the event as JSON and the
    # page shows the step on the next load.
    try:
        return render(*args)
    except Exception:
        log.exception("rendering a live event failed")
        return {}


def _step_html(run_id: str, seq: int) -> dict:
    step = Step.objects.filter(run_id=run_id, seq=seq).first()
    if step is None:
        return {}
    run = Run.objects.select_related("launched_by").get(pk=run_id)
    return rendering.render_step_event(step, run)


async def step_payload(event: dict) -> dict:
    """A run group event with its HTML: the step for #timeline plus the run's header."""
    run_id, seq = event["run_id"], event["seq"]
    return {**event, **await cache.get(("step", run_id, seq), _step_html, run_id, seq)}


async def run_payload(event: dict) -> dict:
    """A runs group event with its HTML: the run's rows in the runs list and dashboard."""
    run_id, seq = event["run_id"], event["seq"]
    # A merged event (runs/events.py) that includes the launch still inserts the row.
    launched = event.get("first", seq) == 1
    key = ("run", run_id, seq, launched)
    return {**event, **await cache.get(key, rendering.render_run_event, run_id, launched)}
