"""What the agent based a gated call on, for the approval card.

An approver once approved a refund of 600 on an order whose total (99, from the agent's own
lookup) sat in a collapsed step. The card now shows, expanded and newest first, the tool
results and model text of the steps that led to the gated call; long values are cut with a
link to the step's full page.
"""

from dataclasses import dataclass

from django.urls import reverse

from runs.models import Step
from runs.rendering import pretty

from ..models import Approval

# Compact: a lookup result fits; a long document is cut and linked.
EVIDENCE_CHARS = 600
# How many pieces of evidence the card shows (the run page has the rest).
EVIDENCE_ITEMS = 8
# How far back to look for them.
STEPS_LOOKED_AT = 30


@dataclass
class Evidence:
    """One piece of untrusted text the agent had in front of it."""

    seq: int
    source: str  # "model" or "tool"
    label: str
    text: str
    truncated: int  # characters left out
    error: bool
    url: str  # the step's full page


def _cut(seq: int, source: str, label: str, value, url: str, error: bool = False) -> Evidence:
    text = pretty(value)
    cut = max(0, len(text) - EVIDENCE_CHARS)
    return Evidence(seq, source, label, text[:EVIDENCE_CHARS] if cut else text, cut, error, url)


def for_approval(approval: Approval, *, limit: int = EVIDENCE_ITEMS) -> list[Evidence]:
    """The tool results and model text before the gate, newest first (at most `limit`)."""
    steps = (
        approval.run.steps.filter(
            seq__lt=approval.gate_seq, kind__in=[Step.Kind.LLM, Step.Kind.TOOL]
        )
        .order_by("-seq")
        .only("seq", "kind", "data", "run_id")[:STEPS_LOOKED_AT]
    )
    items: list[Evidence] = []
    for step in steps:
        items.extend(_from_step(step))
        if len(items) >= limit:
            break
    return items[:limit]


def _from_step(step: Step) -> list[Evidence]:
    d = step.data if isinstance(step.data, dict) else {}
    url = reverse("runs:step", args=[step.run_id, step.seq])
    if step.kind == Step.Kind.TOOL:
        tool = str(d.get("tool", ""))
        if d.get("is_error"):
            return [_cut(step.seq, "tool", f"{tool} failed", d.get("error", ""), url, True)]
        return [_cut(step.seq, "tool", f"{tool} returned", d.get("result"), url)]
    texts = [
        block.get("text", "")
        for block in d.get("content") or []
        if isinstance(block, dict) and block.get("type") == "text" and block.get("text")
    ]
    return [_cut(step.seq, "model", "the model said", "\n\n".join(texts), url)] if texts else []


def pii_findings(approval: Approval) -> list[dict]:
    """What the PII guard found in the gated call (kind, where, masked value), from its
    gate step; empty for approvals it did not open."""
    data = (
        approval.run.steps.filter(seq=approval.gate_seq, kind=Step.Kind.GATE)
        .values_list("data", flat=True)
        .first()
    )
    findings = (data or {}).get("findings") if isinstance(data, dict) else None
    return [f for f in findings or [] if isinstance(f, dict)]
