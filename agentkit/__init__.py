"""agentkit: what agents are built from. The agent catalogue (agents.py), the tool registry
(tools.py), model providers (llm/), PII detectors (pii.py), verifiers (verification.py), the
tools' circuit breaker (circuit.py), metrics and log helpers (metrics.py, logs.py), webhook
signing (signing.py), Redis clients for a plain or Sentinel REDIS_URL (redis_target.py),
storable text (storable.py), pooled-connection waits (database.py) and the `untrusted` template
filters.

Imported by the apps and by the project's wiring (agentops/); imports none of them: no app
(runs, approvals, gateway, triggers, history, accounts, demo), none of their models, nothing of
agentops/. What it needs from an app is handed to it at start-up (tests/test_layering.py).
"""
