"""What the engine needs from a model provider, independent of the vendor."""

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

# Called with each piece of text the model writes, as it writes it (streaming). Never with
# tool-call arguments. The pieces joined are the response's text blocks.
OnText = Callable[[str], None]


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    # Of the cache writes, those kept an hour (priced 2x an input token, not 1.25x).
    cache_creation_1h_input_tokens: int = 0

    @property
    def total_input_tokens(self) -> int:
        # The API counts cache writes and cache reads apart from input_tokens; together they
        # are the prompt the model read.
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        } | (
            {"cache_creation_1h_input_tokens": self.cache_creation_1h_input_tokens}
            if self.cache_creation_1h_input_tokens
            else {}
        )


@dataclass(frozen=True)
class LLMRequest:
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int = 1024
    # Engine facts a provider may use (the scripted provider picks its turn by "turn").
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMResponse:
    content: list[dict[str, Any]]  # Messages API blocks: {"type": "text"|"tool_use", ...}
    stop_reason: str
    usage: Usage
    model: str
    cost_usd: Decimal
    latency_ms: int = 0
    request_id: str = ""  # the HTTP request's, for the provider's support
    message_id: str = ""  # the model's answer's own id (Messages API `id`)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")


class LLMError(Exception):
    """A model call that did not produce a usable response."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        overloaded: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        # The model has no capacity now (529, or an overloaded_error event mid-stream): an
        # agent's fallback model answers at once instead (runs/engine/model.py).
        self.overloaded = overloaded or status == 529


class LLMTransientError(LLMError):
    """Timeout, connection error, 429, 5xx/529: safe to retry with backoff."""

    retryable = True


class Provider(Protocol):
    name: str

    def complete(self, request: LLMRequest, *, on_text: OnText | None = None) -> LLMResponse:
        """The model's answer. With `on_text`, a provider that can stream calls it with the
        text as it arrives; the response is the same as without it."""
