"""Deterministic model turns per agent: for demos, tests and benchmarks. Tools still run."""

import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from . import pricing
from .base import LLMRequest, LLMResponse, OnText, Usage

# A turn is the assistant's content blocks, or a function of the conversation so far that
# returns them (so a scripted report can quote the query result it just got).
Turn = list[dict[str, Any]] | Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": name, "input": args}


def scripted_summary(metadata: dict[str, Any]) -> str:
    """A deterministic summary of the turns the engine asks to summarise."""
    calls = metadata.get("tool_calls") or []
    counts = {name: calls.count(name) for name in dict.fromkeys(calls)}
    done = ", ".join(f"{name} x{n}" for name, n in counts.items()) or "no tool"
    return f"Earlier ({metadata.get('covers', 0)} messages), the agent called {done}."


class ScriptedProvider:
    name = "scripted"

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        latency: float = 0.0,
        verifier_turns: Sequence[Turn] = (),
        typing: float = 0.0,
    ):
        self.turns = list(turns)
        self.latency = latency
        # A verifier's model calls (metadata purpose "verify") are answered from these, one
        # per attempt, so they never shift the agent's own turns.
        self.verifier_turns = list(verifier_turns)
        # Seconds between words when asked to stream (on_text): a demo is seen typing.
        self.typing = typing

    def complete(self, request: LLMRequest, *, on_text: OnText | None = None) -> LLMResponse:
        started = time.monotonic()
        if self.latency:
            time.sleep(self.latency)
        purpose = request.metadata.get("purpose")
        if purpose == "summary":
            # The engine summarising older turns: answered apart, so the turns do not shift.
            content = [text(scripted_summary(request.metadata))]
        else:
            if purpose == "verify":
                turns, index = self.verifier_turns, request.metadata.get("attempt", 1) - 1
                fallback = "PASS"
            else:
                turns, index = self.turns, request.metadata.get("turn", 0)
                fallback = "Done."
            if index < len(turns):
                turn = turns[index]
                content = turn(request.messages) if callable(turn) else turn
            else:
                content = [text(fallback)]
        # Fresh ids each call, like a real model; the engine persists them with the step.
        content = [
            {**b, "id": f"toolu_{uuid.uuid4().hex[:20]}"} if b.get("type") == "tool_use" else b
            for b in content
        ]
        if on_text is not None:
            self._type(content, on_text)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        # The engine passes the request's size; serialising it again here would make each
        # call cost more the longer the run.
        chars = request.metadata.get("input_chars")
        if chars is None:
            chars = len(request.system + repr(request.messages) + repr(request.tools))
        usage = Usage(
            input_tokens=chars // 3 + 1,
            output_tokens=pricing.estimate_tokens(repr(content)),
        )
        return LLMResponse(
            content=content,
            stop_reason=stop,
            usage=usage,
            model=request.model,
            cost_usd=pricing.cost(request.model, usage),
            latency_ms=int((time.monotonic() - started) * 1000),
            request_id=f"scripted-{uuid.uuid4().hex[:12]}",
            message_id=f"msg_scripted_{uuid.uuid4().hex[:24]}",
        )

    def _type(self, content: list[dict[str, Any]], on_text: OnText) -> None:
        """The turn's text handed over a word at a time, as a streaming model would."""
        for block in content:
            if block.get("type") != "text":
                continue
            for i, word in enumerate(re.findall(r"\s*\S+|\s+", block["text"])):
                if i and self.typing:
                    time.sleep(self.typing)
                on_text(word)
