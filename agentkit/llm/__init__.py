"""Model providers. Anthropic when ANTHROPIC_API_KEY is set, the scripted one otherwise.

A provider turns a request into a response: it imports no ORM (django.db) and no app; the
engine records what it answers.
"""

from django.conf import settings

from .base import LLMError, LLMRequest, LLMResponse, LLMTransientError, OnText, Provider, Usage

__all__ = [
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "LLMTransientError",
    "OnText",
    "Provider",
    "Usage",
    "default_provider_name",
]


def default_provider_name() -> str:
    return "anthropic" if settings.ANTHROPIC_API_KEY else "scripted"
