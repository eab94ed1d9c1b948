"""The model's conversation: rebuilt from the timeline, and fitted to the context budget.

The timeline is the single record: a run's Messages API conversation is its launched prompt,
its model steps' content and its tool steps' results, in seq order. Nothing here writes.
"""

import copy
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from agentkit.llm import pricing

from ..models import Run, Step, canonical_json

TOOL_RESULT_MAX_CHARS = 20_000  # what the model sees; the timeline keeps the full result
# The steps the model's conversation is rebuilt from.
CONVERSATION_KINDS = [
    Step.Kind.LLM,
    Step.Kind.TOOL,
    Step.Kind.STATUS,
    Step.Kind.PENDING,
    Step.Kind.SUMMARY,
    Step.Kind.VERIFY,
    Step.Kind.GUARD,
    Step.Kind.OPERATOR,
]
# How the summary of the older turns starts, in the first user message (summary.py).
SUMMARY_MARK = "[Summary of the earlier conversation"
MIN_SUMMARY_TURNS = 2


def conversation(run: Run, *, upto_seq: int | None = None) -> list[dict]:
    """The Messages API conversation, rebuilt from the timeline."""
    steps = run.steps.filter(kind__in=CONVERSATION_KINDS)
    if upto_seq is not None:
        steps = steps.filter(seq__lte=upto_seq)
    return messages(steps.order_by("seq").values_list("kind", "data"))


def messages(rows: Iterable[Any]) -> list[dict]:
    """Messages from (kind, data) timeline rows in seq order.

    A forked run's launched step carries its origin's conversation (`history`) and maybe an
    operator's `instruction`: a text block in the next user message, after any tool results
    (the Messages API wants those first).
    """
    out: list[dict] = []
    results: list[dict] = []
    texts: list[dict] = []
    for kind, data in rows:
        if kind == Step.Kind.STATUS:
            if data.get("event") == "reopened" and data.get("supersedes_tool_use"):
                # A failed run reopened to retry, skip or instruct about its failed call: the
                # failure's result is taken back (the choice gives the call its result).
                taken = data["supersedes_tool_use"]
                results = [b for b in results if b.get("tool_use_id") != taken]
            if data.get("event") == "launched":
                if "history" in data:
                    out.extend(copy.deepcopy(data["history"]))
                else:
                    out.append({"role": "user", "content": data["prompt"]})
                if data.get("instruction"):
                    texts = _instruction(out, data["instruction"])
        elif kind == Step.Kind.LLM:
            if data.get("discarded"):
                continue  # an answer cut off or refused (model.py): never part of the talk
            if results or texts:
                out.append({"role": "user", "content": [*results, *texts]})
                results, texts = [], []
            out.append({"role": "assistant", "content": data["content"]})
        elif kind == Step.Kind.PENDING:
            texts.append({"type": "text", "text": pending_report(data)})
        elif kind == Step.Kind.SUMMARY:
            if not data.get("failed"):
                # The turns it covers are all in `out`: it always keeps the last turn.
                covered = data["covers"]["messages"]
                out = apply_summary(out, covered, data["summary"], data["decisions"])
        elif kind == Step.Kind.OPERATOR:
            if data.get("event") == "instruction":
                block = operator_block(data)
                if not results and not texts and out and out[-1]["role"] == "user":
                    _append_text(out[-1], block)  # as Work.add_operator_text does
                else:
                    texts.append(block)
        elif kind in (Step.Kind.VERIFY, Step.Kind.GUARD):
            if data.get("told"):  # a failed check the agent was sent back with
                texts.append({"type": "text", "text": data["told"]})
        elif kind == Step.Kind.TOOL:
            if data.get("held"):
                continue  # a failure held for an operator: the choice says what the model gets
            last = out[-1] if out else None
            if (
                not results
                and last
                and last["role"] == "user"
                and isinstance(last["content"], list)
            ):
                # A fork's history may end with some of a turn's results, the rest pending.
                insert_tool_result(last["content"], tool_result_block(data))
            else:
                results.append(tool_result_block(data))
    if results or texts:
        out.append({"role": "user", "content": [*results, *texts]})
    return out


def insert_tool_result(content: list[dict], block: dict) -> None:
    """Add a tool result to a user message's content, before any text (a fork's instruction):
    results come first in a message."""
    at = next((i for i, b in enumerate(content) if b.get("type") != "tool_result"), len(content))
    content.insert(at, block)


def operator_block(data: dict) -> dict:
    """An operator's instruction (an `operator` step) as the model gets it: a user-role text
    that says who it is from, so the model can tell it from the task and from tool output."""
    return {"type": "text", "text": f"[Instruction from the operator {data['by']}] {data['text']}"}


def _append_text(message: dict, block: dict) -> None:
    """Add a text block to a user message (its content made a list of blocks if a string)."""
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    message["content"] = [*content, block]


def _instruction(out: list[dict], text: str) -> list[dict]:
    """Add an operator's instruction to the conversation: to its last message when that is
    the user's, else as the text of the next user message (returned)."""
    block = {"type": "text", "text": f"Instruction from the operator: {text}"}
    last = out[-1] if out else None
    if last is not None and last["role"] == "user":
        content = last["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        last["content"] = [*content, block]
        return []
    return [block]


def pending_report(data: dict) -> str:
    """How the model is told that an operation it awaited finished (a `pending` step)."""
    head = f"Operation #{data['operation']} ({data['tool']}: awaits {data['awaits']})"
    if data["event"] == "completed":
        result = data.get("result")
        text = result if isinstance(result, str) else canonical_json(result)
        return f"{head} completed: {text[:TOOL_RESULT_MAX_CHARS]}"
    return f"{head} {data['event'].replace('_', ' ')}: {data.get('error', '')}"


def tool_result_block(data: dict) -> dict:
    """What the model sees of a tool step: its result or error, as text, cut to a size."""
    content = data.get("error") if data.get("is_error") else data.get("result")
    text = content if isinstance(content, str) else canonical_json(content)
    if len(text) > TOOL_RESULT_MAX_CHARS:
        text = (
            text[:TOOL_RESULT_MAX_CHARS]
            + f"\n[truncated {len(text) - TOOL_RESULT_MAX_CHARS} chars]"
        )
    block = {"type": "tool_result", "tool_use_id": data["tool_use_id"], "content": text}
    if data.get("is_error"):
        block["is_error"] = True
    return block


def context_budget(agent_config: dict) -> int:
    """The tokens the agent's conversation may take (Agent.context_budget_tokens, else the
    deployment's AGENTOPS["CONTEXT_TOKEN_BUDGET"])."""
    return agent_config.get("context_budget_tokens") or settings.AGENTOPS["CONTEXT_TOKEN_BUDGET"]


def summary_cut(messages: list[dict], budget_tokens: int, *, chars: int) -> int:
    """How many messages after the first (the goal) to summarise: 0 while the conversation
    fits the budget; else the oldest whole turns (an assistant message and the user message
    answering it, so a tool_use keeps its tool_result) until the rest is at most half the
    budget, always keeping the last turn. Half: a summary covers many turns and is rare;
    0 too when it would cover fewer than MIN_SUMMARY_TURNS."""
    if chars // 3 + 1 <= budget_tokens or len(messages) <= 3:
        return 0
    rest = chars - len(canonical_json(messages[0]))
    covered = 0
    while len(messages) - 1 - covered > 2 and rest // 3 > budget_tokens // 2:
        for message in messages[1 + covered : 3 + covered]:
            rest -= len(canonical_json(message)) + 1
        covered += 2
    # Fewer turns are left out (fit_context) rather than summarised: a summary call per turn
    # would read as much as the turns it saves.
    return covered if covered >= 2 * MIN_SUMMARY_TURNS else 0


def apply_summary(
    messages: list[dict], covered: int, summary: str, decisions: list[str]
) -> list[dict]:
    """The conversation with its `covered` messages after the goal replaced by the summary:
    the goal verbatim with the summary (and people's decisions, verbatim) after it, then the
    turns after those. An earlier summary in the goal's message is replaced (the new one
    covers it)."""
    head = messages[0]
    content = head["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    content = [
        b for b in content if not (b.get("type") == "text" and b["text"].startswith(SUMMARY_MARK))
    ]
    text = f"{SUMMARY_MARK}, which the timeline keeps in full]\n{summary}"
    if decisions:
        text += "\n\nDecisions of people, verbatim:\n" + "\n".join(f"- {d}" for d in decisions)
    head = {"role": "user", "content": [*content, {"type": "text", "text": text}]}
    return [head, *copy.deepcopy(messages[1 + covered :])]


def fit_context(
    messages: list[dict], budget_tokens: int, *, chars: int | None = None
) -> tuple[list[dict], int]:
    """Drop the oldest assistant/tool-result turns until the estimate fits the budget.

    The first user message (the task) is kept, and a note says what was left out; turns go
    in pairs so every tool_use keeps its tool_result. The timeline keeps everything.
    `chars`: the conversation's canonical JSON length, when the caller keeps it.
    """
    if chars is None:
        chars = len(canonical_json(messages))
    if chars // 3 + 1 <= budget_tokens or len(messages) <= 3:
        return messages, 0
    head, rest = messages[0], messages[1:]
    dropped = 0
    while len(rest) > 2 and pricing.estimate_tokens(canonical_json([head, *rest])) > budget_tokens:
        rest = rest[2:]
        dropped += 1
    note = f"\n\n[{dropped} earlier turn(s) were left out to fit the context window.]"
    content = head["content"]
    if isinstance(content, str):
        head = {"role": "user", "content": content + note}
    else:
        head = {"role": "user", "content": [*content, {"type": "text", "text": note}]}
    return [head, *rest], dropped
