"""What a failed delivery means: try again later, or give up. Every channel of the wing (and
the gateway's decision callbacks) raises these; approvals/tasks.py retries the first kind."""


class DeliveryError(Exception):
    """A delivery that may succeed later (5xx, 408, 429, timeout, connection): retried."""


class DeliveryRefused(Exception):
    """A delivery that will not succeed by retrying (4xx, bad URL, no secret): given up."""
