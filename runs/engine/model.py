"""Asking the model: one call with its retries, and recording what it answered.
Why and how: docs/design/modules.md."""

import dataclasses
import logging
import time

from django.db import transaction

from agentkit import llm, tracing
from agentkit.circuit import CircuitBreaker
from agentkit.llm import pricing
from agentkit.verification import checks_final_answer

from ..models import Run, Step
from . import (
    awaiting,
    drafts,
    gates,
    in_flight,
    lease,
    owned,
    pii_guard,
    retry,
    summary,
    terminator,
    tool_calls,
)
from .conversation import context_budget, fit_context, tool_result_block
from .owned import Stop, Work, cfg, renewal

log = logging.getLogger("agentops.engine")

FINISHED = ("end_turn", "stop_sequence", "tool_use", "")
CUT_OFF = ("max_tokens", "model_context_window_exceeded")
PAUSED = "pause_turn"
REFUSED = "refusal"
# A cut-off answer is asked again with 2x, then 4x the agent's max_tokens; then the run fails.
MAX_ROOM_FACTOR = 4
ROOM = "max_tokens_room"  # work.state: the max_tokens of the next call, while asking again


def ask(work: Work) -> None:
    """One model call for the run's next turn, and its answer recorded: here, or where the
    answer arrives when the call is in flight (in_flight.py)."""
    config = work.agent_config
    budget = context_budget(config)
    if config.get("summarise_context"):
        summary.fit(work, budget)  # past the budget: the oldest turns become a summary
    messages, trimmed = fit_context(work.messages, budget, chars=work.messages_chars)
    system = config["system_prompt"]
    if work.state.get("awaiting"):
        system += awaiting.in_context(work.state)
    request = llm.LLMRequest(
        model=config["model"],
        system=system,
        messages=messages,
        tools=work.tool_schemas(),
        max_tokens=work.state.get(ROOM) or config.get("max_tokens", 1024),
        metadata={
            "turn": work.run.step_count,
            "run_id": str(work.run.pk),
            # The untrimmed request's size, which the engine keeps anyway (Work).
            "input_chars": terminator.request_chars(work),
            "cache_ttl": config.get("prompt_cache_ttl", "5m"),
        },
    )
    asking = Asking(work, request)
    if in_flight.takes(work, asking, lambda w, response: record_response(w, response, trimmed)):
        return  # awaited on the process's loop; this thread is free for another run
    record_response(work, asking.in_this_thread(), trimmed)


class _ModelsResting(CircuitBreaker):
    """Models an agent's calls left for its fallback: one failure opens (the switch itself
    was the verdict), for the configured cooldown; shared by the workers through Redis."""

    def __init__(self) -> None:
        super().__init__(threshold=1, cooldown=0.0)

    def record(self, name: str, *, ok: bool) -> None:
        self.cooldown = cfg("LLM_FALLBACK_COOLDOWN_SECONDS")
        if ok or self.cooldown > 0:
            super().record(f"model:{name}", ok=ok)

    def allow(self, name: str) -> bool:
        return super().allow(f"model:{name}")


models_resting = _ModelsResting()


def call_with_retries(work: Work, request: llm.LLMRequest) -> llm.LLMResponse:
    """The model's response, infrastructure errors retried (each failed attempt a step)."""
    return Asking(work, request).in_this_thread()


class Asking:
    """One model call's attempts, made in a thread (call_with_retries) or awaited on the
    process's loop (in_flight.py); everything between attempts happens in a thread.

    With the agent's `fallback_model`, a call its model cannot answer (overloaded, 529, or
    still failing after LLM_MAX_RETRIES) goes to the fallback at once, with retries of its
    own; the response then says so (extra["fallback_from"]). For LLM_FALLBACK_COOLDOWN_SECONDS
    after that, every worker's calls of that model go to the fallback first (a model known
    overloaded is not asked again by each call, each paying a failed attempt); then calls
    start with the agent's model again. A request the API refuses (4xx) is not sent to
    another model: it would refuse it too."""

    def __init__(self, work: Work, request: llm.LLMRequest):
        self.work = work
        self.asked = request.model
        self.fallback = work.agent_config.get("fallback_model") or ""
        if self.fallback and self.asked != self.fallback and not models_resting.allow(self.asked):
            request = dataclasses.replace(request, model=self.fallback)
        self.request = request
        self.attempt = 0

    def in_this_thread(self) -> llm.LLMResponse:
        """The response, each attempt waited for in this thread."""
        work = self.work
        while True:
            request = self.next_attempt()
            try:
                with tracing.model_call(work.provider.name, request) as span:
                    try:
                        response = _complete(work, request)
                    except llm.LLMError as exc:
                        tracing.failed(span, type(exc).__name__, str(exc))
                        raise
                    tracing.model_answered(span, response)
            except llm.LLMError as exc:
                time.sleep(self.failed(exc))
                continue
            return self.answered(response)

    def next_attempt(self) -> llm.LLMRequest:
        """The request to send now. Stop if the run was cancelled or ran out of time while
        a failed attempt's backoff was waited."""
        self.attempt += 1
        if self.attempt > 1:
            lease.still_mine(self.work, lease_for=cfg("LLM_TIMEOUT_SECONDS"))
        owned.release_connection()
        return self.request

    def failed(self, exc: llm.LLMError) -> float:
        """The failed attempt recorded; the seconds to wait before the next one. Stop when
        there is none: the run has ended (model call failed)."""
        work, request, fallback = self.work, self.request, self.fallback
        budget_left = work.run.retry_count < cfg("RUN_MAX_RETRIES")
        switch = bool(
            fallback
            and request.model != fallback
            and exc.retryable
            and budget_left
            and (exc.overloaded or self.attempt > cfg("LLM_MAX_RETRIES"))
        )
        will_retry = switch or (
            exc.retryable and self.attempt <= cfg("LLM_MAX_RETRIES") and budget_left
        )
        _record_error(
            work,
            exc,
            self.attempt,
            will_retry=will_retry,
            model=request.model,
            next_model=fallback if switch else "",
        )
        if not will_retry:
            detail = f"model call failed after {self.attempt} attempt(s): {exc}"
            terminator.terminate(work, Run.Termination.LLM_ERROR, detail)
        if switch:
            # Another model's capacity: no backoff, and retries of its own.
            models_resting.record(request.model, ok=False)
            self.request = dataclasses.replace(request, model=fallback)
            self.attempt = 0
            return 0.0
        return retry.backoff(self.attempt, retry_after=exc.retry_after)

    def answered(self, response: llm.LLMResponse) -> llm.LLMResponse:
        if self.request.model != self.asked:
            return dataclasses.replace(
                response, extra={**response.extra, "fallback_from": self.asked}
            )
        if self.fallback:
            models_resting.record(self.asked, ok=True)
        return response


def _complete(work: Work, request: llm.LLMRequest) -> llm.LLMResponse:
    if not work.agent_config.get("stream_text"):
        return work.provider.complete(request)
    # The seq the model's step will have: an error step takes it if this attempt fails,
    # and the next attempt's drafts carry the one after.
    draft = drafts.Draft(work.run.pk, work.run.last_seq + 1)
    response = work.provider.complete(request, on_text=draft)
    draft.finish()
    return response


def _record_error(
    work: Work,
    exc: llm.LLMError,
    attempt: int,
    *,
    will_retry: bool,
    model: str = "",
    next_model: str = "",
) -> None:
    run = work.run
    data = {
        "error": str(exc)[:2000],
        "status": exc.status,
        "attempt": attempt,
        "retryable": exc.retryable,
        "will_retry": will_retry,
        "model": model,
    }
    if next_model:
        data["fallback_to"] = next_model
    owned.append(
        work,
        Step.Kind.LLM_ERROR,
        data,
        {
            "retry_count": run.retry_count + 1,
            "error_count": run.error_count + 1,
            **renewal(model_call_next=will_retry),
        },
    )


def record_response(work: Work, response: llm.LLMResponse, trimmed: int) -> None:
    stop = response.stop_reason or ""
    if stop not in FINISHED:
        _record_unfinished(work, response, trimmed, stop)
        return
    work.state.pop(ROOM, None)
    tool_uses = response.tool_uses
    # Planned before the write, so that step, counters and checkpoint are one statement;
    # only a gated call (an Approval and a gate step) needs a transaction of several.
    pending, repeated, gated, guarded = tool_calls.plan_calls(
        work, work.run.last_seq + 1, tool_uses, response
    )
    output = ("", None)
    if not tool_uses and "pii" in work.agent_config and not work.state.get("awaiting"):
        output, pending, gated, guarded = pii_guard.judge_output(work, response)
    work.state["pending"] = pending
    data, counters, columns = _model_step(work, response, trimmed)
    try:
        then = _what_follows(
            work, response, pending, counters, runs_now=not (gated or repeated), output=output
        )
        if not gated:
            then = (*guarded, *then)
            # The conversation first, so the checkpoint can carry its length (a Stop below
            # ends this worker's hold on the run, and what it holds with it).
            _add_to_conversation(work, response, then)
            owned.append(
                work,
                Step.Kind.LLM,
                data,
                counters,
                checkpoint=True,
                then=then,
                counted=True,
                **columns,
            )
        else:
            with transaction.atomic():
                owned.append(work, Step.Kind.LLM, data, counters, **columns)
                for kind, guard_data, _ in guarded:
                    work.run.append_step(kind, guard_data)
                policy = gates.current()
                for item, gate in gated:
                    item["approval"] = policy.open_gate(work.run, item, gate)
                owned.write_checkpoint(work)
            _add_to_conversation(work, response, then)
    except Stop:
        # Only the ownership checks raise Stop in there: cancelled or taken over meanwhile.
        owned.charge_discarded(work, response)
        raise
    if not tool_uses:
        if gated:
            lease.park_for_humans(work)  # the held answer; returns when decided meanwhile
        if work.state["pending"]:
            return  # the held answer: the next step settles it
        if work.state.get("awaiting"):
            awaiting.wait(work)  # returns when one finished meanwhile: the next step reports it
            return
        if "checking" in work.state:
            return  # the next step checks the answer (answer_check.py)
        raise Stop
    if repeated:
        terminator.terminate(
            work,
            Run.Termination.NO_PROGRESS,
            f"{repeated} was called {terminator.NO_PROGRESS_REPEATS} times with the same arguments",
        )
    if gated:
        lease.park_for_humans(work)


def _add_to_conversation(work: Work, response: llm.LLMResponse, then: tuple) -> None:
    """The model's answer and the results of the calls that ran with it, in work.messages."""
    work.add_message({"role": "assistant", "content": response.content})
    for kind, tool_data, _ in then:
        if kind == Step.Kind.TOOL:  # not a guard step that came with it
            work.add_tool_result(tool_result_block(tool_data))


def _record_unfinished(work: Work, response: llm.LLMResponse, trimmed: int, stop: str) -> None:
    """An answer that did not finish (see the module's docstring): recorded and charged,
    then asked again, continued, or the run's end."""
    data, counters, columns = _model_step(work, response, trimmed)
    if stop == PAUSED:
        # The API resumes a paused turn from the paused answer, sent back unchanged.
        work.state.pop(ROOM, None)
        owned.append(work, Step.Kind.LLM, data, counters, checkpoint=True, **columns)
        work.add_message({"role": "assistant", "content": response.content})
        return
    # Not an answer to act on: no call it proposed runs, and it never enters the conversation.
    data["discarded"] = True
    then: tuple = ()
    again = False
    if stop in CUT_OFF:
        base = int(work.agent_config.get("max_tokens", 1024))
        used = int(work.state.get(ROOM) or base)
        if stop == "max_tokens" and used < base * MAX_ROOM_FACTOR:
            work.state[ROOM] = min(used * 2, base * MAX_ROOM_FACTOR)
            data["asked_again_with"] = work.state[ROOM]
            again = True
        else:
            reason = Run.Termination.TRUNCATED
            detail = (
                f"the model's answer was cut off ({stop}) at {used} tokens, "
                f"even with {MAX_ROOM_FACTOR}x the agent's max_tokens"
                if stop == "max_tokens"
                else f"the model's answer was cut off ({stop})"
            )
    elif stop == REFUSED:
        reason, detail = Run.Termination.REFUSED, "the model declined to answer (refusal)"
    else:
        reason = Run.Termination.LLM_ERROR
        detail = f"the model's answer ended with an unknown stop_reason {stop!r}"
    if not again:
        work.state.pop(ROOM, None)
        ended, end_update = terminator.termination(work, reason, detail)
        counters.update(end_update)
        then = ((Step.Kind.STATUS, ended, {}),)
    try:
        owned.append(work, Step.Kind.LLM, data, counters, checkpoint=True, then=then, **columns)
    except Stop:
        owned.charge_discarded(work, response)
        raise
    if then:
        raise Stop


def _model_step(work: Work, response: llm.LLMResponse, trimmed: int) -> tuple[dict, dict, dict]:
    """The model step's data, the run's counters after it, and the step's own columns."""
    run = work.run
    data = {
        "model": response.model,
        "content": response.content,
        "stop_reason": response.stop_reason,
        "usage": response.usage.as_dict(),
        "request_id": response.request_id,
        "trimmed_turns": trimmed,
        "provider": work.provider.name,
    }
    if response.extra.get("fallback_from"):
        data["fallback_from"] = response.extra["fallback_from"]
    data.update(cache_saving(response))
    counters = {
        "step_count": run.step_count + 1,
        "tokens_in": run.tokens_in + response.usage.total_input_tokens,
        "tokens_out": run.tokens_out + response.usage.output_tokens,
        "cost_usd": run.cost_usd + response.cost_usd,
        **renewal(model_call_next=False),
    }
    columns = {
        "cost_usd": response.cost_usd,
        "tokens_in": response.usage.total_input_tokens,
        "tokens_out": response.usage.output_tokens,
        "latency_ms": response.latency_ms,
    }
    return data, counters, columns


def cache_saving(response: llm.LLMResponse) -> dict:
    """What prompt caching saved on this call, for its step (the dashboard's cost card adds
    these up: runs/costs.py); nothing for a call that neither read nor wrote the cache."""
    usage = response.usage
    if not (usage.cache_read_input_tokens or usage.cache_creation_input_tokens):
        return {}
    return {"cache_saved_usd": str(pricing.cache_savings(response.model, usage))}


def _what_follows(
    work: Work,
    response: llm.LLMResponse,
    pending: list[dict],
    counters: dict,
    *,
    runs_now: bool,
    output: tuple = ("", None),
) -> tuple:
    """The steps written with the model's: the run's end when it asked for no tool (a crash
    between the final answer and the end would leave a finished conversation that a resume
    sends to the model again), or the results of the calls that run at once. `output` is
    the PII guard's verdict on a final answer (pii_guard.check_output)."""
    if not response.tool_uses:
        if work.state.get("awaiting"):
            return ()  # not an answer: the model waits for what it started
        if checks_final_answer(work.agent_config):
            # Checked before the run may end (answer_check.py), from the next step on, so a
            # resume checks it rather than asking the model again.
            work.state["checking"] = {"llm_seq": work.run.last_seq + 1, "output": response.text}
            return ()
        action, verdict = output
        if action == "gate":
            return ()  # held for a person
        reason, text, detail = Run.Termination.COMPLETED, response.text, ""
        if action == "redact":
            text = verdict[0]
        elif action == "block":
            reason, text, detail = Run.Termination.BLOCKED, "", verdict[0]
        ended, end_update = terminator.termination(work, reason, detail, output=text)
        counters.update(end_update)
        return ((Step.Kind.STATUS, ended, {}),)
    if not runs_now:
        return ()
    try:
        return tool_calls.run_inline(work, pending, counters)
    except Stop:
        raise
    except Exception:
        # Nothing is written yet: the run is retried from its checkpoint and asks the model
        # again, but this answer was paid for.
        owned.charge_discarded(work, response)
        raise
