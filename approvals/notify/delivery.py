"""What a failed delivery means, try again later or give up, and how later is later. Every
channel of the wing (and the gateway's decision callbacks) raises these, and their Celery tasks
take RETRIED_DELIVERY."""

from typing import TypedDict


class DeliveryError(Exception):
    """A delivery that may succeed later (5xx, 408, 429, timeout, connection): retried."""


class DeliveryRefused(Exception):
    """A delivery that will not succeed by retrying (4xx, bad URL, no secret): given up."""


# A delivery task's options: the first kind retried with backoff up to 2, 4, 8 ... 256 s (full
# jitter), 8 retries (at most ~8.5 minutes in all), then given up and logged; acknowledged
# after it ran, so a worker that dies mid-delivery does not lose it.
class RetryOptions(TypedDict, total=False):
    """The options given to shared_task (typed, so a checker matches them to its arguments)."""

    ignore_result: bool
    acks_late: bool
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int


RETRIED_DELIVERY: RetryOptions = {
    "ignore_result": True,
    "acks_late": True,
    "autoretry_for": (DeliveryError,),
    "retry_backoff": 2,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
}
