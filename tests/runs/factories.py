"""Runs and steps for tests: made the way the product makes them (launch, append_step)."""

from decimal import Decimal

from django.db import transaction

from agentkit.agents import get_agent
from runs import engine
from runs.models import Run, Step

XSS = (
    '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    '<button hx-post="/runs/new/" hx-trigger="load">x</button>'
    '<div id="nav-pending-count" hx-swap-oob="true">999</div>'
)


def make_run(user, *, agent="sql-analyst", status=Run.Status.QUEUED, **fields) -> Run:
    """A run as the launch path creates it (launched step, checkpoint), not enqueued."""
    a = get_agent(agent)
    data, errors = a.validate_input(
        {"question": "Revenue?", "report_to": "boss@example.com"}
        if agent == "sql-analyst"
        else {"order_id": 42, "reason": "damaged"}
    )
    assert not errors
    with transaction.atomic():
        run = engine.launch(
            agent=a, input=data, launched_by=user, provider="scripted", trigger=Run.Trigger.FORM
        )
    if status != Run.Status.QUEUED or fields:
        fields.setdefault("termination_reason", "completed" if status == "succeeded" else "")
        if status in Run.TERMINAL_STATUSES and not fields["termination_reason"]:
            fields["termination_reason"] = "max_steps"
        Run.objects.filter(pk=run.pk).update(status=status, **fields)
        run.refresh_from_db()
    return run


def add_steps(run: Run, n: int, *, text: str = "thinking") -> None:
    with transaction.atomic():
        locked = Run.locked(run.pk)
        for i in range(n):
            if i % 2 == 0:
                locked.append_step(
                    Step.Kind.LLM,
                    {
                        "model": "claude-sonnet-4-5",
                        "content": [
                            {"type": "text", "text": f"{text} {i}"},
                            {
                                "type": "tool_use",
                                "id": f"t{i}",
                                "name": "run_query",
                                "input": {"sql": "select 1"},
                            },
                        ],
                        "stop_reason": "tool_use",
                        "usage": {"input_tokens": 10, "output_tokens": 5},
                    },
                    cost_usd=Decimal("0.0012"),
                )
            else:
                locked.append_step(
                    Step.Kind.TOOL,
                    {
                        "tool_use_id": f"t{i}",
                        "tool": "run_query",
                        "args": {"sql": "select 1"},
                        "is_error": False,
                        "attempts": 1,
                        "duration_ms": 3,
                        "result": {"rows": [[i]]},
                    },
                )
