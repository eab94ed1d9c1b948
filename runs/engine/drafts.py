"""The model's text while it is written: drafts for the run's live trace (Agent.stream_text).

A draft is not a step: the timeline keeps the model's step only. It is a live event that
carries the seq the model's step will have and the whole text so far, so a viewer who comes
in mid-answer (on any web process) sees everything with the next draft, and a lost draft is
made good by the one after it. Drafts are throttled: the first piece at once (the first word
reaches the browser as soon as it can), then at most one every DRAFT_INTERVAL_SECONDS, and
the complete text when the answer is complete; a long answer costs a bounded number of
WebSocket messages. The web process drops a draft whose step has arrived (runs/feeds.py).
"""

import logging
import time
from uuid import UUID

from .. import events

log = logging.getLogger("agentops.engine")

# Drafts this far apart at most: four a second reads as continuous typing.
DRAFT_INTERVAL_SECONDS = 0.25
# A draft carries at most the last this many characters (a long answer's messages would
# otherwise grow with every draft); the step shows the whole text.
DRAFT_MAX_CHARS = 8000


class Draft:
    """The on_text callback of one model call: collects the pieces, publishes throttled."""

    def __init__(self, run_id: UUID | str, seq: int, *, interval: float = DRAFT_INTERVAL_SECONDS):
        self.run_id, self.seq, self.interval = run_id, seq, interval
        self.pieces: list[str] = []
        self.published_at = float("-inf")
        self.unpublished = False
        self.sent = 0  # drafts published, for the benchmarks and tests

    def __call__(self, piece: str) -> None:
        self.pieces.append(piece)
        self.unpublished = True
        now = time.monotonic()
        if now - self.published_at >= self.interval:
            self._publish(now)

    def finish(self) -> None:
        """The answer is complete: its whole text, if the last pieces were not sent yet."""
        if self.unpublished:
            self._publish(time.monotonic())

    def _publish(self, now: float) -> None:
        text = "".join(self.pieces)
        self.pieces = [text]
        self.published_at, self.unpublished = now, False
        omitted = max(0, len(text) - DRAFT_MAX_CHARS)
        try:
            events.publish_draft(self.run_id, self.seq, text[omitted:], omitted=omitted)
        except Exception:
            # A draft is a convenience for viewers: it must never fail the model call.
            log.exception("publishing a draft of run %s failed", self.run_id)
            return
        self.sent += 1
