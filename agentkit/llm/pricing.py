"""USD per million tokens. Unknown models are priced like the most expensive known one, so
cost limits err on the side of stopping early.

Prompt caching: a token written to the cache costs 1.25x an input token (kept 5 minutes) or 2x
(kept an hour), a token read from it 0.1x (the Anthropic price list); `cache_savings` is what
that saved.
"""

from decimal import Decimal

from .base import Usage

M = Decimal(1_000_000)

# model prefix -> (input, output, cache write, cache read) per million tokens
PRICES: dict[str, tuple[Decimal, Decimal, Decimal, Decimal]] = {
    "claude-opus-4": (Decimal(15), Decimal(75), Decimal("18.75"), Decimal("1.50")),
    "claude-opus-4-5": (Decimal(5), Decimal(25), Decimal("6.25"), Decimal("0.50")),
    "claude-sonnet-4": (Decimal(3), Decimal(15), Decimal("3.75"), Decimal("0.30")),
    "claude-haiku-4": (Decimal(1), Decimal(5), Decimal("1.25"), Decimal("0.10")),
    "claude-3-5-haiku": (Decimal("0.80"), Decimal(4), Decimal(1), Decimal("0.08")),
}
FALLBACK = PRICES["claude-opus-4"]


def prices_for(model: str) -> tuple[Decimal, Decimal, Decimal, Decimal]:
    # Longest matching prefix wins: "claude-opus-4-5-…" before "claude-opus-4".
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            return PRICES[prefix]
    return FALLBACK


HOUR_WRITE_FACTOR = 2  # an hour's cache write, in input tokens


def cost(model: str, usage: Usage) -> Decimal:
    inp, out, cache_w, cache_r = prices_for(model)
    hour = usage.cache_creation_1h_input_tokens
    total = (
        usage.input_tokens * inp
        + usage.output_tokens * out
        + (usage.cache_creation_input_tokens - hour) * cache_w
        + hour * inp * HOUR_WRITE_FACTOR
        + usage.cache_read_input_tokens * cache_r
    ) / M
    return total.quantize(Decimal("0.000001"))


def cache_savings(model: str, usage: Usage) -> Decimal:
    """What prompt caching saved on one call: the cache reads' price at the input rate less
    what they cost, less the writes' premium over the input rate (negative for a call that
    only wrote: the saving comes on the calls that read it)."""
    inp, _, cache_w, cache_r = prices_for(model)
    hour = usage.cache_creation_1h_input_tokens
    saved = (
        usage.cache_read_input_tokens * (inp - cache_r)
        - (usage.cache_creation_input_tokens - hour) * (cache_w - inp)
        - hour * inp * (HOUR_WRITE_FACTOR - 1)
    ) / M
    return saved.quantize(Decimal("0.000001"))


def estimate_max_cost(model: str, input_tokens: int, max_output_tokens: int) -> Decimal:
    """A conservative upper bound for one call, checked before it is made."""
    inp, out, cache_w, _ = prices_for(model)
    worst_input = max(inp, cache_w)
    return ((input_tokens * worst_input + max_output_tokens * out) / M).quantize(
        Decimal("0.000001")
    )


def estimate_tokens(payload: str) -> int:
    # ~4 characters per token for English and JSON; rounded up to stay conservative.
    return len(payload) // 3 + 1
