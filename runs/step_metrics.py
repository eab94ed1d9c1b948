"""What a committed step adds to the metrics (agentkit/metrics.py).

Called once per step after its transaction commits (runs/events.py), never while it is being
written: a step in a transaction that is rolled back (a replay, a lost race) counts nothing,
and a step counts once whichever process wrote it. No query: the step and its run are in
memory, and a few counters per step are all the hot path pays.
"""

from agentkit import metrics
from agentkit.metrics import labelled

from .models import Run, Step

MODEL_CHECKS = frozenset({Step.Kind.SUMMARY, Step.Kind.VERIFY})
TERMINAL = frozenset({Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED})


def count_committed_step(step: Step) -> None:
    run = step.run
    data = step.data
    labelled(metrics.steps, run.agent, step.kind).inc()
    if step.kind == Step.Kind.LLM or (step.kind in MODEL_CHECKS and data.get("model")):
        # A context summary and a model verifier's check are model calls the run pays too.
        model = data.get("model") or _model(run)
        labelled(metrics.model_calls, model, "ok").inc()
        labelled(metrics.model_tokens, model, "input").inc(step.tokens_in)
        labelled(metrics.model_tokens, model, "output").inc(step.tokens_out)
        labelled(metrics.model_cost, model).inc(float(step.cost_usd))
        labelled(metrics.model_seconds, model).observe(step.latency_ms / 1000)
    elif step.kind == Step.Kind.LLM_ERROR:
        labelled(metrics.model_calls, _model(run), "error").inc()
    elif step.kind == Step.Kind.TOOL:
        tool = data.get("tool") or "unknown"
        labelled(metrics.tool_calls, tool, "error" if data.get("is_error") else "ok").inc()
        if step.cost_usd:
            labelled(metrics.tool_cost, tool).inc(float(step.cost_usd))
        if data.get("attempts"):
            # Calls refused before running (bad arguments, unknown tool) took no time.
            labelled(metrics.tool_seconds, tool).observe(data.get("duration_ms", 0) / 1000)
    elif step.kind == Step.Kind.STATUS:
        _count_status(run, data)


def _count_status(run: Run, data: dict) -> None:
    to = data.get("to")
    if to in TERMINAL and data.get("from") not in TERMINAL:
        labelled(metrics.runs_finished, run.agent, to, data.get("reason") or to).inc()
    elif data.get("event") == "resumed" and data.get("from") == Run.Status.RUNNING:
        # A claim that took the run over from a worker whose lease expired (lease.claim).
        labelled(metrics.lease_takeovers, run.agent).inc()


def _model(run: Run) -> str:
    return (run.agent_config or {}).get("model") or "unknown"
