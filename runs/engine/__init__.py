"""The durable agent loop, one file per part:

- loop.py: launch a run; advance it step by step for a time slice (the order of things)
- lease.py: claim, ownership checks, parking for people, time slices, crashes, the sweep
- owned.py: the run a worker owns: what it holds, and the writes it makes under its lease
- model.py: asking the model, with retries, and recording its answer with what follows it
- in_flight.py: a worker's model calls awaited on one event loop per process, no thread held
- conversation.py: the model's conversation rebuilt from the timeline, fitted to the budget
- summary.py: past the budget, the oldest turns summarised by a model call (when declared)
- tool_calls.py: planning the calls the model asked for, calling a tool, describing the call
- idempotency.py: the key of a tool call (the same call, the same key)
- deadlines.py: a tool call on a pool thread, abandoned as timed out past its deadline
- ledger.py: calls with side effects happen once (intent, outcome, "outcome unknown")
- humans.py: gated calls, questions and "continue?" checkpoints; applying decisions
- gates.py: the interface through which the approvals app says what needs a person
- terminator.py: the explicit decision that a run stops (limits, no progress, completion)
- answer_check.py: a final answer (or a chosen tool's call) checked before the run may succeed:
  its output schema, the agent's verifier; a failure goes back to the agent or to a person
- retry.py: backoff with jitter for infrastructure errors
- replaying.py: while a replay runs (history/replay.py), the recording answers for the model,
  the tools and the people

The engine imports nothing of approvals (gates.py is the interface the approvals app fills
at start-up), no view and no template; tools and consumers never import it
(tests/test_layering.py). Why and how: docs/design/modules.md."""

from .conversation import conversation, fit_context
from .gates import Decision, Gates, use_gates
from .idempotency import idempotency_key
from .lease import claim, new_worker_id, sweep
from .loop import ForkPoint, advance, launch
from .retry import backoff

__all__ = [
    "Decision",
    "ForkPoint",
    "Gates",
    "advance",
    "backoff",
    "claim",
    "conversation",
    "fit_context",
    "idempotency_key",
    "launch",
    "new_worker_id",
    "sweep",
    "use_gates",
]
