"""Input from outside checked exactly as POST /api/runs checks it: the JSON types against the
agent's published schema first (a form would coerce `true` into "True"), then the agent's own
form. Webhooks check each delivery's input with it, schedules their fixed input."""

from typing import Any

from django.conf import settings

from agentkit.agents import Agent
from runs.api import json_type_errors
from runs.models import canonical_json


def max_input_bytes() -> int:
    return int(settings.AGENTOPS["MAX_INPUT_BYTES"])


def input_size(data: Any) -> int:
    """The input's size as the API counts it (its canonical JSON)."""
    return len(canonical_json(data).encode())


def validate_input(agent: Agent, data: Any) -> tuple[dict | None, dict[str, list[str]]]:
    """(cleaned input, {}) or (None, field errors keyed by field name, "__all__" for the
    whole input)."""
    if not isinstance(data, dict):
        return None, {"__all__": ["input must be an object"]}
    errors = json_type_errors(agent.input_schema(), data)
    if errors:
        return None, errors
    return agent.validate_input(data)
