"""The gate decision: whether a proposed call needs a person, as one ordered cascade
(cascade), over pure rules that import no model: the agent's declared policy (policy) and
whether its configuration means anything (config; its system checks in checks)."""
