"""How long to wait before trying again: exponential backoff with full jitter.

Used for infrastructure errors only (a model call's timeout, rate limit or 5xx; a tool's
ToolInfraError; an engine error that re-queues the run). Whether to retry at all is the
caller's: a valid model response or a tool's business error is never retried.
"""

import random

from .owned import cfg


def backoff(
    attempt: int, *, retry_after: float | None = None, base: float | None = None, cap: float = 30.0
) -> float:
    """Seconds before attempt `attempt` + 1; a server's retry-after is a floor."""
    base = cfg("RETRY_BASE_SECONDS") if base is None else base
    delay = random.uniform(0, min(cap, base * 2 ** (attempt - 1)))
    if retry_after:
        delay = max(delay, min(retry_after, cap))
    return delay
