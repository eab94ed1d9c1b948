"""Model providers. Anthropic when ANTHROPIC_API_KEY is set, the scripted one otherwise."""

from django.conf import settings

from .base import LLMError, LLMRequest, LLMResponse, LLMTransientError, Provider, Usage

__all__ = [
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "LLMTransientError",
    "Provider",
    "Usage",
    "default_provider_name",
    "provider_for_run",
]


def default_provider_name() -> str:
    return "anthropic" if settings.ANTHROPIC_API_KEY else "scripted"


def provider_for_run(run) -> Provider:
    """The provider a run was launched with (stored on the run, so a resume never switches)."""
    from agentops.agents import get_agent

    if run.provider == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider.from_settings()
    agent = get_agent(run.agent)
    return agent.scripted_provider(run.input)
