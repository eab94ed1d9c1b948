"""agentkit: what agents are built from. The agent catalogue (agents.py), the tool registry
(tools.py), model providers (llm/), PII detectors (pii.py), verifiers (verification.py), the
tools' circuit breaker (circuit.py), metrics and log helpers (metrics.py, logs.py), webhook
signing (signing.py), Redis clients (redis_target.py), storable text (storable.py),
pooled-connection waits (database.py) and the `untrusted` template filters.
Imports no app, none of their models and nothing of agentops/ (tests/test_layering.py)."""
