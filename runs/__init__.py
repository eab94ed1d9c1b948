"""runs: Run, its timeline (Step), checkpoints and the side-effect ledger; the engine
(runs/engine/); Celery tasks; live events and the run consumer; run pages and API.

Imports agentkit and accounts; never approvals, gateway, triggers or history (they stand
above it), and of agentops only the Celery app, in queue.py (tests/test_layering.py).
"""
