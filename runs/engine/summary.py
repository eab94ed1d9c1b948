"""Summarised context: when the conversation outgrows the agent's budget, its oldest turns
are summarised by a model call instead of dropped (an agent declares it: summarise_context).
Why and how: docs/design/modules.md."""

import logging
import time

from django.conf import settings
from django.db import connection

from agentkit import llm

from ..models import Step, canonical_json
from . import owned
from .conversation import apply_summary, summary_cut, tool_result_block
from .owned import Stop, Work, renewal
from .terminator import SUMMARY_MAX_TOKENS

log = logging.getLogger("agentops.engine")

PROMPT = (
    "You summarise the earlier part of an AI agent's work so that it can go on without it. "
    "Say what the agent found out (facts, figures, ids), what it did (each tool call that "
    "changed something, with its result), and what it was about to do. Be brief and exact: "
    "never invent, never drop an id or an amount. Plain text, no preamble."
)
TRANSCRIPT_MAX_CHARS = 4000  # of one tool result or text in the transcript the summary reads


def fit(work: Work, budget_tokens: int) -> None:
    """Summarise the oldest turns when the conversation is over `budget_tokens`."""
    covered = summary_cut(work.messages, budget_tokens, chars=work.messages_chars)
    if not covered:
        return
    request = _request(work, covered)
    if settings.IS_POSTGRES and not connection.in_atomic_block:
        connection.close()  # the pooled connection serves other runs while the model writes
    started = time.monotonic()
    try:
        response = work.provider.complete(request)
        summary = response.text.strip()
        if not summary:
            raise llm.LLMError("the model returned an empty summary")
    except llm.LLMError as exc:
        _record_failure(work, covered, exc, int((time.monotonic() - started) * 1000))
        return
    kept = work.messages[1 + covered :]
    data = {
        "model": response.model,
        "summary": summary,
        "covers": {"messages": covered, **_seqs(work, kept)},
        "decisions": _decisions(work, kept),
        "usage": response.usage.as_dict(),
        "request_id": response.request_id,
        "provider": work.provider.name,
        "chars_before": work.messages_chars,
    }
    run = work.run
    counters = {
        "tokens_in": run.tokens_in + response.usage.total_input_tokens,
        "tokens_out": run.tokens_out + response.usage.output_tokens,
        "cost_usd": run.cost_usd + response.cost_usd,
        **renewal(model_call_next=True),
    }
    try:
        owned.append(
            work,
            Step.Kind.SUMMARY,
            data,
            counters,
            cost_usd=response.cost_usd,
            tokens_in=response.usage.total_input_tokens,
            tokens_out=response.usage.output_tokens,
            latency_ms=response.latency_ms,
        )
    except Stop:
        owned.charge_discarded(work, response)
        raise
    work.messages = apply_summary(work.messages, covered, summary, data["decisions"])
    work.messages_chars = len(canonical_json(work.messages))


def _request(work: Work, covered: int) -> llm.LLMRequest:
    """The summarisation call: the goal (with any earlier summary) and the covered turns as a
    transcript. Its metadata says its purpose, so a scripted model or a replay answers it
    apart from the agent's turns."""
    part = work.messages[: 1 + covered]
    transcript = "\n\n".join(_line(m) for m in part)
    text = (
        "Summarise this beginning of the agent's conversation. The first message is its task, "
        f"which it keeps anyway.\n\n{transcript}"
    )
    called = [
        b["name"]
        for m in part
        if m["role"] == "assistant"
        for b in _blocks(m)
        if b.get("type") == "tool_use"
    ]
    return llm.LLMRequest(
        # A cheaper model when the agent declares one for summaries.
        model=work.agent_config.get("step_models", {}).get("summary") or work.agent_config["model"],
        system=PROMPT,
        messages=[{"role": "user", "content": text}],
        tools=[],
        max_tokens=SUMMARY_MAX_TOKENS,
        metadata={
            "purpose": "summary",
            "run_id": str(work.run.pk),
            "turn": work.run.step_count,
            "covers": covered,
            "tool_calls": called,
            "input_chars": len(PROMPT) + len(text),
        },
    )


def _blocks(message: dict) -> list[dict]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _line(message: dict) -> str:
    parts = []
    for block in _blocks(message):
        kind = block.get("type")
        if kind == "text":
            parts.append(block["text"][:TRANSCRIPT_MAX_CHARS])
        elif kind == "tool_use":
            parts.append(f"[calls {block['name']} with {canonical_json(block.get('input'))}]")
        elif kind == "tool_result":
            content = block.get("content")
            content = content if isinstance(content, str) else canonical_json(content)
            error = " (error)" if block.get("is_error") else ""
            parts.append(f"[result{error}: {content[:TRANSCRIPT_MAX_CHARS]}]")
    return f"{message['role']}: " + "\n".join(parts)


def _tool_use_ids(messages: list[dict]) -> set[str]:
    return {
        b["tool_use_id"] for m in messages for b in _blocks(m) if b.get("type") == "tool_result"
    }


def _decisions(work: Work, kept: list[dict]) -> list[str]:
    """What people decided about the calls summarised (now or before), verbatim: an approved
    call's result, a rejection with its reason, an answer. A read only when summarising."""
    kept_ids = _tool_use_ids(kept)
    rows = (
        work.run.steps.filter(kind=Step.Kind.TOOL, data__has_key="approval")
        .order_by("seq")
        .values_list("data", flat=True)
    )
    return [
        f"{d['tool']} {canonical_json(d.get('args'))}: {tool_result_block(d)['content']}"
        for d in rows
        if d.get("tool_use_id") not in kept_ids
    ]


def _seqs(work: Work, kept: list[dict]) -> dict:
    """The timeline's steps the summary stands for: from the first after the launch up to the
    one before the first turn it keeps. Counted back from the newest model step, so a fork's
    inherited turns (not steps of this run) do not shift it."""
    kept_turns = sum(1 for m in kept if m["role"] == "assistant")
    seqs = list(
        work.run.steps.filter(kind=Step.Kind.LLM)
        .order_by("-seq")[:kept_turns]
        .values_list("seq", flat=True)
    )
    if len(seqs) < kept_turns or not seqs:
        return {}
    return {"from_seq": 2, "to_seq": seqs[-1] - 1}


def _record_failure(work: Work, covered: int, exc: llm.LLMError, latency_ms: int) -> None:
    log.warning("run %s: summarising the context failed: %s", work.run.pk, exc)
    owned.append(
        work,
        Step.Kind.SUMMARY,
        {
            "failed": True,
            "error": str(exc)[:2000],
            "status": exc.status,
            "covers": {"messages": covered},
            "note": "older turns are left out of the context instead",
            "provider": work.provider.name,
        },
        {"error_count": work.run.error_count + 1, **renewal(model_call_next=True)},
        latency_ms=latency_ms,
    )
