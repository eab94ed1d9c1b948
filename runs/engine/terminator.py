"""The terminator: the explicit decision that a run must stop, and the write that ends it.

Before each model call: max steps, consecutive errors, max cost (with an upper bound of what
the next call may cost); at every step boundary, max seconds of working time (time spent
waiting for people does not count); when the model repeats one call with the same arguments,
no progress; at every claim, before anything runs, gate rules the policy cannot apply
(`refuse_unsound_gates`). A run that completes ends here too (`termination`), written with its final
answer. It reads the run and the conversation's size; it may not call the model or tools.
"""

import hashlib
from decimal import Decimal

from django.utils import timezone

from agentkit.llm import pricing

from ..models import Run, Step, canonical_json
from . import gates, owned
from .conversation import context_budget
from .owned import Stop, Work

NO_PROGRESS_REPEATS = 3  # the same tool call with the same arguments, this many times
# ... among the run's last this many calls. A bounded window keeps the checkpointed state
# the same size at step 5 and at step 500; a loop longer than this is max_steps' to stop.
NO_PROGRESS_WINDOW = 30
# Anthropic adds a tool-use system prompt of a few hundred tokens when tools are given.
TOOL_USE_OVERHEAD_TOKENS = 500
SUMMARY_MAX_TOKENS = 1024  # a summary's output (summary.py asks for at most this)


def precheck(work: Work) -> None:
    """Stop the run before a model call it may not make."""
    run = work.run
    if run.step_count >= run.max_steps:
        terminate(
            work, Run.Termination.MAX_STEPS, f"{run.step_count} of {run.max_steps} steps used"
        )
    if run.consecutive_errors >= run.max_consecutive_errors:
        terminate(
            work,
            Run.Termination.CONSECUTIVE_ERRORS,
            f"{run.consecutive_errors} consecutive errors (limit {run.max_consecutive_errors})",
        )
    estimate = estimate_next_cost(work)
    if run.cost_usd + estimate > run.max_cost_usd:
        terminate(
            work,
            Run.Termination.MAX_COST,
            f"spent {run.cost_usd:.4f} USD; the next call could cost up to {estimate:.4f} "
            f"and the limit is {run.max_cost_usd} USD",
        )


def refuse_unsound_gates(work: Work) -> None:
    """Stop a run whose gate rules the policy cannot apply, before anything of it runs (at
    every claim: a start or a continuation). A rule naming a tool, argument or approver group
    the snapshot does not have gates nothing, so the run would go on ungated: `manage.py
    check` refuses such an agent at start, and a process started without it must not run it
    either. The app's policy judges, even while a replay answers in its place."""
    policy = gates.registered() or gates.current()  # current() raises when there is none
    found = policy.config_problems(work.agent_config)
    if found:
        terminate(
            work,
            Run.Termination.BLOCKED,
            f"the agent's gate rules cannot be applied, nothing was run: {'; '.join(found)}",
        )


def check_deadline(work: Work) -> None:
    """Stop the run past max_seconds of working time."""
    if work.active_seconds >= work.run.max_seconds:
        detail = f"{work.active_seconds:.0f}s of {work.run.max_seconds}s"
        if work.waited:
            detail += f" (not counting {work.waited:.0f}s waiting for people)"
        terminate(work, Run.Termination.MAX_SECONDS, detail)


def repeats(state: dict, tool: str, args: dict) -> bool:
    """Note a validated call in the run's recent calls; True when it makes NO_PROGRESS_REPEATS
    of the same call within the window."""
    key = hashlib.sha256(canonical_json([tool, args]).encode()).hexdigest()[:16]
    recent: list[str] = state.setdefault("recent_calls", [])
    recent.append(key)
    del recent[:-NO_PROGRESS_WINDOW]
    return recent.count(key) >= NO_PROGRESS_REPEATS


def request_chars(work: Work) -> int:
    """System prompt, tool schemas and the whole conversation, as canonical JSON (which
    escapes non-ASCII text, so characters here are bytes)."""
    if work.head_chars is None:  # the run's snapshot: the same all through a claim
        work.head_chars = len(
            canonical_json([work.agent_config["system_prompt"], work.tool_schemas()])
        )
    return work.head_chars + work.messages_chars


def estimate_next_cost(work: Work) -> Decimal:
    """An upper bound for the next call: the whole untrimmed conversation, the tool schemas,
    and max_tokens of output. Bytes, not characters, so non-Latin text is not underestimated.
    Scripted runs are priced by the same table, so cost limits behave the same in demos."""
    config = work.agent_config
    tokens = request_chars(work) // 3 + 1 + TOOL_USE_OVERHEAD_TOKENS
    # The fallback model may be the one that answers (model.call_with_retries): the dearer.
    models = [
        config["model"],
        *([config["fallback_model"]] if config.get("fallback_model") else []),
    ]
    max_tokens = config.get("max_tokens", 1024)
    cost = max(pricing.estimate_max_cost(m, tokens, max_tokens) for m in models)
    if config.get("summarise_context") and tokens > context_budget(config):
        # The call may be preceded by a summary of the older turns, which reads about as much.
        summarising = config.get("step_models", {}).get("summary") or config["model"]
        cost += pricing.estimate_max_cost(summarising, tokens, SUMMARY_MAX_TOKENS)
    return cost


def terminate(work: Work, reason: str, detail: str = "", *, output: str = "") -> None:
    """End the run (running -> succeeded/failed, Run.TRANSITIONS) with its terminated step, by
    the same compare-and-set that appends the step: only while it is still ours. Raises Stop."""
    step, update = termination(work, reason, detail, output=output)
    owned.append(work, Step.Kind.STATUS, step, update)
    raise Stop


def termination(
    work: Work, reason: str, detail: str = "", *, output: str = ""
) -> tuple[dict, dict]:
    """The terminated step's data and the run's fields for it."""
    status = Run.Status.SUCCEEDED if reason == Run.Termination.COMPLETED else Run.Status.FAILED
    now = timezone.now()
    step = Run.terminated_step(Run.Status.RUNNING, status, reason, detail)
    update = {
        "status": status,
        "termination_reason": reason,
        "status_detail": detail[:500],
        "output": output,
        "finished_at": now,
        "lease_owner": "",
        "lease_expires_at": None,
        "updated_at": now,
        "version": work.run.version + 1,
    }
    return step, update
