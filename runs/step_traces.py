"""What a committed step adds to the trace (agentkit/tracing.py): the step that ends a run
records the run's span, from its launch to now, under the ids its children have used since
launch; an external agent's reported tool call (gateway) records its `execute_tool` span,
which ran in the agent's process. The engine's own steps are traced as they run
(runs/engine/). Called after commit beside the metrics (runs/events.py), only when tracing
is on.
"""

from datetime import timedelta

from django.utils import timezone

from agentkit import tracing

from .models import Run, Step
from .step_metrics import TERMINAL


def trace_committed_step(step: Step) -> None:
    if step.kind == Step.Kind.TOOL and step.run.trigger == Run.Trigger.EXTERNAL:
        _external_tool_call(step)
    if step.kind != Step.Kind.STATUS:
        return
    data = step.data
    if data.get("to") not in TERMINAL or data.get("from") in TERMINAL:
        return
    run = step.run
    status = data["to"]
    tracing.record_run(
        run.traceparent,
        agent=run.agent,
        start=run.created_at,
        end=run.finished_at or timezone.now(),
        attributes={
            "agentops.run.id": str(run.pk),
            "agentops.run.status": status,
            "agentops.run.termination_reason": data.get("reason") or "",
            "agentops.run.trigger": run.trigger,
            "agentops.run.steps": run.last_seq,
            "gen_ai.usage.input_tokens": run.tokens_in,
            "gen_ai.usage.output_tokens": run.tokens_out,
            "agentops.cost_usd": float(run.cost_usd),
        },
        error=(data.get("detail") or data.get("reason") or status)
        if status == Run.Status.FAILED
        else "",
    )


def _external_tool_call(step: Step) -> None:
    data = step.data
    tool = data.get("tool") or "unknown"
    tracing.record(
        f"execute_tool {tool}",
        step.run.traceparent,
        start=step.created_at - timedelta(milliseconds=step.latency_ms),
        end=step.created_at,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": data.get("tool_use_id") or "",
            "agentops.run.id": str(step.run_id),
            "agentops.step.seq": step.seq,
        },
        error=data.get("error") or "" if data.get("is_error") else "",
    )
