"""Ask agentops before your agent's tool calls. See AgentopsClient."""

from .client import (
    AgentopsClient,
    AgentopsError,
    ApprovalTimeout,
    Decision,
    Session,
)

__all__ = ["AgentopsClient", "AgentopsError", "ApprovalTimeout", "Decision", "Session"]
