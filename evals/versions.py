"""An agent version: what a regression run replays a dataset against, and how two are told
apart. The version is the agent's current definition as a run's snapshot records it (its
model, system prompt, tools with their input schemas, gate rules); the fingerprint is a short
hash of it, the same for the same definition on any machine."""

import hashlib

from agentkit.agents import Agent
from runs.models import canonical_json


def _hash(value) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def version_of(agent: Agent) -> dict:
    snapshot = agent.snapshot()
    tools = [{"name": t["name"], "input_schema": t.get("input_schema")} for t in snapshot["tools"]]
    return {
        "agent": agent.slug,
        "model": agent.model,
        "system_prompt_hash": _hash(agent.system_prompt),
        "tools": [t["name"] for t in tools],
        "tools_hash": _hash(tools),
        "gates_hash": _hash(snapshot["gates"]),
    }


def fingerprint(version: dict) -> str:
    return _hash(version)
