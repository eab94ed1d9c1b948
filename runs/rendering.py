"""What viewers see of runs and steps, rendered once per event (approvals/stream_messages.py
for approvals).

The page templates define the fragments (`{% partialdef %}`); this module builds their
context and renders them for WebSocket pushes (runs/live.py calls it once per event per web
process, however many browsers watch).

Model and tool output is untrusted: it is only ever passed to templates as plain strings
(auto-escaped) inside `.untrusted[hx-disable]` containers, never marked safe.
"""

import contextlib
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from agentkit.templatetags.untrusted import is_invisible

from .compensation import effects as compensable
from .models import Run, Step
from .steering import models as steering

# Longer text is cut in the timeline; the step's own page shows all of it.
TRUNCATE_CHARS = 2000
# The run page shows the newest steps; older ones load on demand.
TIMELINE_PAGE = 50
RUN_PAGE = "runs/run_detail.html"
RUN_LIST = "runs/run_list.html"
DASHBOARD = "runs/dashboard.html"


def pretty(value: Any) -> str:
    """Readable text for any JSON value (strings stay as they are)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@dataclass
class Block:
    """One piece of untrusted text, possibly cut to TRUNCATE_CHARS."""

    label: str
    text: str
    truncated: int = 0  # characters left out
    error: bool = False

    @property
    def has_invisible(self) -> bool:
        """Whether the text hides characters a reader cannot see (shown marked, and flagged
        on a collapsed block's summary)."""
        return any(map(is_invisible, self.text))

    @classmethod
    def of(cls, label: str, value: Any, *, full: bool = False, error: bool = False) -> "Block":
        text = pretty(value)
        if full or len(text) <= TRUNCATE_CHARS:
            return cls(label, text, 0, error)
        return cls(label, text[:TRUNCATE_CHARS], len(text) - TRUNCATE_CHARS, error)


@dataclass
class ToolUse:
    name: str
    args: Block


# The timeline's filter: which category each step kind is shown under.
CATEGORY = {
    Step.Kind.LLM: "model",
    Step.Kind.LLM_ERROR: "model",
    Step.Kind.TOOL: "tool",
    Step.Kind.GATE: "gate",
    Step.Kind.DECISION: "decision",
    Step.Kind.SUMMARY: "summary",
    Step.Kind.GUARD: "guard",
    Step.Kind.VERIFY: "verify",
    Step.Kind.PENDING: "pending",
    Step.Kind.OPERATOR: "operator",
}
FILTERS = ("model", "tool", "gate", "decision", "operator", "error", "summary", "guard")


@dataclass
class StepView:
    """Template-ready description of one timeline step."""

    step: Step
    title: str
    error: bool = False
    texts: list[Block] = field(default_factory=list)  # model prose and tool output
    tool_uses: list[ToolUse] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)  # trusted, server-made
    approval_id: str = ""
    run_link: str = ""  # a run this step launched (a chained follow-up)
    run_link_label: str = "follow-up run"
    model: str = ""  # the model that answered (or failed), shown on the step's line

    @property
    def seq(self) -> int:
        return self.step.seq

    @property
    def kind(self) -> str:
        return self.step.kind

    @property
    def full_url(self) -> str:
        return reverse("runs:step", args=[self.step.run_id, self.step.seq])

    @property
    def hides_characters(self) -> bool:
        """Some of its text holds invisible or reordering characters: the step comes unfolded,
        so the marks that show them are in view (a spoofed address must not hide in a fold)."""
        blocks = [*self.texts, *(t.args for t in self.tool_uses)]
        return any(b.has_invisible for b in blocks)

    @property
    def category(self) -> str:
        """What the timeline's filter calls it: model, tool, gate, decision, summary, guard,
        verify, pending or status (errors are a filter of their own: `error`)."""
        return CATEGORY.get(self.step.kind, "status")

    @property
    def duration_ms(self) -> int:
        d = self.step.data if isinstance(self.step.data, dict) else {}
        value = d.get("duration_ms") if self.step.kind == Step.Kind.TOOL else None
        try:
            return int(value if value is not None else self.step.latency_ms or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def duration_bucket(self) -> int:
        """0-10 on a log scale (10 ms doubling to 10 s): the waterfall bar's width, so slow
        steps stand out whatever the run's range, without a style attribute (CSP)."""
        ms = self.duration_ms
        return 0 if ms <= 0 else max(1, min(10, math.ceil(math.log2(max(ms, 10) / 10)) + 1))

    @property
    def duration_label(self) -> str:
        ms = self.duration_ms
        if not ms:
            return ""
        return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def step_view(step: Step, *, full: bool = False) -> StepView:
    """How the timeline shows `step`: by its kind's renderer (STEP_RENDERERS); a status step
    by its event's (STATUS_RENDERERS), else as a status change. `full`: payloads untruncated."""
    d = step.data if isinstance(step.data, dict) else {"data": step.data}
    return STEP_RENDERERS.get(step.kind, _status_view)(step, d, full=full)


def _model_view(step: Step, d: dict, *, full: bool) -> StepView:
    view = StepView(step, "model")
    for block in d.get("content") or []:
        if not isinstance(block, dict):
            view.texts.append(Block.of("text", block, full=full))
        elif block.get("type") == "text":
            view.texts.append(Block.of("text", block.get("text", ""), full=full))
        elif block.get("type") == "tool_use":
            view.tool_uses.append(
                ToolUse(str(block.get("name", "")), Block.of("args", block.get("input"), full=full))
            )
    usage = d.get("usage") or {}
    view.model = answered_by(d)
    view.facts = [
        ("model", view.model),
        ("tokens", f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"),
        ("latency", f"{step.latency_ms} ms"),
        ("stop", str(d.get("stop_reason", ""))),
    ]
    if usage.get("cache_read_input_tokens") or usage.get("cache_creation_input_tokens"):
        view.facts.insert(
            2,
            (
                "cache",
                f"{usage.get('cache_read_input_tokens', 0)} read / "
                f"{usage.get('cache_creation_input_tokens', 0)} written, "
                f"saved ${d.get('cache_saved_usd', '0')}",
            ),
        )
    if d.get("trimmed_turns"):
        view.facts.append(("context", f"{d['trimmed_turns']} older turn(s) left out"))
    return view


def _model_error_view(step: Step, d: dict, *, full: bool) -> StepView:
    view = StepView(step, "model call failed", error=True)
    view.texts.append(Block.of("error", d.get("error", ""), full=full, error=True))
    view.facts = [
        ("status", str(d.get("status", ""))),
        ("attempt", str(d.get("attempt", ""))),
        ("retry", "yes" if d.get("will_retry") else "no"),
    ]
    if d.get("model"):
        view.model = str(d["model"])
        view.facts.insert(0, ("model", view.model))
    if d.get("fallback_to"):
        view.facts.append(("then", f"fallback to {d['fallback_to']}"))
    return view


def _tool_view(step: Step, d: dict, *, full: bool) -> StepView:
    is_error = bool(d.get("is_error"))
    title = f"tool {d.get('tool', '')}"
    if d.get("held"):
        title += ": failed, held for an operator's choice"
    view = StepView(step, title, error=is_error)
    view.tool_uses.append(
        ToolUse(str(d.get("tool", "")), Block.of("args", d.get("args"), full=full))
    )
    if is_error:
        view.texts.append(Block.of("error", d.get("error", ""), full=full, error=True))
    else:
        view.texts.append(Block.of("result", d.get("result"), full=full))
    view.facts = [
        ("attempts", str(d.get("attempts", ""))),
        ("duration", f"{d.get('duration_ms', 0)} ms"),
    ]
    if d.get("idempotency_key"):
        view.facts.append(("key", str(d["idempotency_key"])[:16] + "…"))
    view.approval_id = str(d.get("approval") or "")
    return view


def _gate_title(d: dict) -> str:
    """What became of a gated call: a person asked, or let through without one (and by what)."""
    if d.get("approved_by_rule"):
        # An admin-accepted auto-approve rule let it run without a person.
        return f"approved by rule #{d['approved_by_rule']}"
    if d.get("approved_by_grant"):
        # An approver's standing grant let it run without asking again.
        return f"approved by grant #{d['approved_by_grant']} (by {d.get('granted_by')})"
    if d.get("allowed_by_plan"):
        return f"allowed by plan #{d.get('plan')} step {d.get('plan_step')}"
    if d.get("plan_submitted"):
        return "plan submitted: waiting for a human"
    if d.get("deviation"):
        return f"deviates from plan #{d.get('plan')} ({d['deviation']}): waiting for a human"
    if d.get("kind") == "question":
        return "question to the operator"
    return "gated: waiting for a human"


def _gate_view(step: Step, d: dict, *, full: bool) -> StepView:
    view = StepView(step, _gate_title(d))
    view.approval_id = str(d.get("approval") or "")
    view.facts = [("risk", str(d.get("risk", ""))), ("why", str(d.get("explanation", "")))]
    if not (d.get("approved_by_rule") or d.get("approved_by_grant") or d.get("allowed_by_plan")):
        view.facts.append(("expires", _when(d.get("expires_at"))))
    if d.get("approved_by_grant"):
        view.facts.append(("grant", str(d.get("grant", ""))))
    if d.get("tool"):
        view.tool_uses.append(ToolUse(str(d["tool"]), Block.of("args", d.get("args"), full=full)))
    if d.get("kind") == "question" and d.get("question"):
        view.texts.append(Block.of("question", d.get("question"), full=full))
    return view


def _decision_view(step: Step, d: dict, *, full: bool) -> StepView:
    decision = str(d.get("decision") or d.get("status") or "decision")
    view = StepView(step, f"human: {decision}", error=decision == "expire")
    view.approval_id = str(d.get("approval") or "")
    view.facts.append(("by", str(d.get("by") or "the system")))
    for key in ("acting_for", "status", "votes", "on_expiry"):
        if d.get(key):
            view.facts.append((key.replace("_", " "), str(d[key])))
    if d.get("seconds_open") is not None:
        view.facts.append(("had it open", f"{d['seconds_open']:.0f}s"))
    if d.get("detail"):
        view.facts.append(("detail", str(d["detail"])))
    for key in ("reason", "answer"):
        if d.get(key):
            # Typed by a person, but shown to the model and possibly quoting it.
            view.texts.append(Block.of(key, d[key], full=full))
    args_key = "edited_args" if d.get("edited_args") else "args"
    if d.get(args_key):
        label = "edited args" if args_key == "edited_args" else "args"
        view.tool_uses.append(
            ToolUse(str(d.get("tool", "")), Block.of(label, d[args_key], full=full))
        )
    return view


def _status_view(step: Step, d: dict, *, full: bool) -> StepView:
    """A status change (launched, paused, resumed, terminated, …), or a status step of an
    event with a renderer of its own (STATUS_RENDERERS)."""
    event = str(d.get("event") or "status")
    if event in STATUS_RENDERERS:
        return STATUS_RENDERERS[event](step, d, full=full)
    view = StepView(step, f"{event}: {d.get('from') or '—'} → {d.get('to') or '—'}")
    view.error = event == "error" or d.get("to") == Run.Status.FAILED
    if d.get("reason"):
        view.facts.append(("reason", _reason_label(str(d["reason"]))))
    if d.get("by"):
        view.facts.append(("by", str(d["by"])))
    if d.get("trigger"):
        view.facts.append(("trigger", str(d["trigger"])))
    if d.get("detail"):
        # Details can quote a model or engine error: untrusted text.
        view.texts.append(Block.of("detail", d["detail"], full=full, error=view.error))
    if event == "launched":
        view.texts.append(Block.of("input", d.get("input"), full=full))
    if event == "reopened":
        _add_reopened(view, d, full=full)
    return view


def _add_reopened(view: StepView, d: dict, *, full: bool) -> None:
    """ "Resume from here" (runs/steering/models.py): the choice, and what the operator typed."""
    view.facts.append(("choice", str(d.get("choice", ""))))
    view.facts.append(("ended for", _reason_label(str(d.get("ended_for", "")))))
    if d.get("failed_seq"):
        view.facts.append(("failed step", f"#{d['failed_seq']} ({d.get('tool', '')})"))
    for key in ("text", "note"):
        if d.get(key):
            view.texts.append(Block.of(key, d[key], full=full))
    if d.get("edited_args") is not None:
        view.tool_uses.append(
            ToolUse(str(d.get("tool", "")), Block.of("edited args", d["edited_args"], full=full))
        )


# What an operator's step is called in the timeline (runs/steering/models.py).
RECOVERY_TITLES = {
    "retry": "operator: retry the failed call",
    "skip": "operator: skip the failed call",
    "instruct": "operator: instruct the agent instead",
}


COMPENSATION_TITLES = {
    "compensation_requested": "compensation requested",
    "compensation_refused": "compensation not requested",
}


def _compensation_view(step: Step, d: dict, *, full: bool) -> StepView:
    """Compensation of the run's effects (runs/compensation/models.py): asked (by whom, for which
    effects), refused, or what one came to."""
    event = str(d.get("event"))
    if event == "compensation_settled":
        outcome = str(d.get("outcome") or "")
        view = StepView(step, f"compensation {outcome}: {d.get('compensate', '')}")
        view.error = outcome != "compensated"
        view.facts.append(("effect", f"#{d.get('effect')}"))
    else:
        view = StepView(step, COMPENSATION_TITLES.get(event, event))
        view.error = event == "compensation_refused"
        view.facts.append(("by", str(d.get("by") or "an operator")))
        for effect in d.get("effects") or []:
            view.tool_uses.append(
                ToolUse(
                    str(effect.get("compensate", "")),
                    Block.of(
                        f"args (undoes effect #{effect.get('effect')})",
                        effect.get("args"),
                        full=full,
                    ),
                )
            )
    if d.get("compensation_run"):
        view.facts.append(("compensation run", str(d["compensation_run"])))
        with contextlib.suppress(ValueError):
            view.run_link = str(uuid.UUID(str(d["compensation_run"])))
            view.run_link_label = "compensation run"
    if d.get("detail"):
        # May quote a tool's error or an approver's reason: untrusted text.
        view.texts.append(Block.of("detail", d["detail"], full=full, error=view.error))
    return view


def _operator_view(step: Step, d: dict, *, full: bool) -> StepView:
    """An operator steered the run: an instruction delivered, or a choice after a failure."""
    if str(d.get("event", "")).startswith("compensation_"):
        return _compensation_view(step, d, full=full)
    if d.get("event") == "instruction":
        view = StepView(step, "operator: instruction to the agent")
    else:
        view = StepView(step, RECOVERY_TITLES.get(str(d.get("choice")), "operator"))
        if d.get("failed_seq"):
            view.facts.append(("failed step", f"#{d['failed_seq']} ({d.get('tool', '')})"))
    view.facts.insert(0, ("by", str(d.get("by") or "an operator")))
    for key in ("text", "note"):
        if d.get(key):
            # Typed by a person and given to the model: shown as untrusted text.
            view.texts.append(Block.of(key, d[key], full=full))
    if d.get("edited_args") is not None:
        view.tool_uses.append(
            ToolUse(str(d.get("tool", "")), Block.of("edited args", d["edited_args"], full=full))
        )
    return view


def answered_by(d: dict) -> str:
    """The model that answered, and the agent's model it stood in for (a fallback)."""
    model = str(d.get("model", ""))
    if d.get("fallback_from"):
        return f"{model} (fallback from {d['fallback_from']})"
    return model


def _summary_view(step: Step, d: dict, *, full: bool) -> StepView:
    """Older turns summarised to fit the context (runs/engine/summary.py), or why not."""
    covers = d.get("covers") or {}
    if d.get("failed"):
        view = StepView(step, "context summary failed", error=True)
        view.texts.append(Block.of("error", d.get("error", ""), full=full, error=True))
        view.facts = [("then", str(d.get("note", "")))]
        return view
    view = StepView(step, "context summarised")
    view.texts.append(Block.of("summary", d.get("summary", ""), full=full))
    for decision in d.get("decisions") or []:
        view.texts.append(Block.of("decision (verbatim)", decision, full=full))
    usage = d.get("usage") or {}
    view.facts = [("covers", f"{covers.get('messages', 0)} message(s)")]
    if covers.get("to_seq"):
        view.facts.append(("steps", f"#{covers.get('from_seq')} to #{covers['to_seq']}"))
    view.model = str(d.get("model", ""))
    view.facts += [
        ("model", view.model),
        ("tokens", f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"),
        ("latency", f"{step.latency_ms} ms"),
    ]
    return view


# What a person's decision about a failed verification is called in the timeline.
VERIFY_EVENTS = {
    "accepted": "verification: answer accepted by a person",
    "sent_back": "verification: sent back by a person",
    "failed": "verification: failed by a person",
}


def _verify_view(step: Step, d: dict, *, full: bool) -> StepView:
    """A verifier's check of the final answer (runs/engine/answer_check.py), or a person's
    decision after it failed."""
    passed = bool(d.get("passed"))
    if d.get("event"):
        view = StepView(step, VERIFY_EVENTS.get(str(d["event"]), "verification"))
        view.error = d["event"] == "failed"
        view.facts.append(("by", str(d.get("by") or "the system")))
        if d.get("note"):
            view.texts.append(Block.of("note", d["note"], full=full))
        if d.get("reason"):
            view.texts.append(Block.of("reason", d["reason"], full=full, error=True))
        return view
    verdict = "passed" if passed else "failed"
    view = StepView(step, f"verification {verdict}: {d.get('verifier', '')}", error=not passed)
    view.facts = [
        ("check", str(d.get("kind", ""))),
        ("attempt", f"{d.get('attempt', '')} of {d.get('max_attempts', '')}"),
    ]
    if not passed:
        then = (
            "a person decides"
            if d.get("to_person")
            else ("sent back to the agent" if d.get("told") else "the run fails")
        )
        view.facts.append(("then", then))
    if d.get("model"):
        usage = d.get("usage") or {}
        view.model = answered_by(d)
        view.facts.append(("model", view.model))
        view.facts.append(
            ("tokens", f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out")
        )
    if d.get("reason"):
        # May quote the model or a tool: untrusted text.
        view.texts.append(Block.of("reason", d["reason"], full=full, error=True))
    if d.get("tool"):
        view.tool_uses.append(ToolUse(str(d["tool"]), Block.of("args", d.get("args"), full=full)))
        if d.get("is_error"):
            view.texts.append(Block.of("error", d.get("error", ""), full=full, error=True))
        else:
            view.texts.append(Block.of("result", d.get("result"), full=full))
    for block in d.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            view.texts.append(Block.of("verifier", block.get("text", ""), full=full))
    return view


def _schema_guard_view(step: Step, d: dict, *, full: bool) -> StepView:
    """A final answer or a tool's result checked against its schema (output validation)."""
    passed = bool(d.get("passed"))
    subject = str(d.get("subject") or "output")
    view = StepView(step, f"guard: {subject} {'valid' if passed else 'invalid'}", error=not passed)
    view.facts.append(("check", str(d.get("check", ""))))
    if d.get("attempt"):
        view.facts.append(("attempt", f"{d['attempt']} of {d.get('max_attempts', '')}"))
    if d.get("errors"):
        # The schema's messages quote the rejected value: untrusted text.
        view.texts.append(Block.of("errors", "\n".join(d["errors"]), full=full, error=True))
    return view


def _guard_view(step: Step, d: dict, *, full: bool) -> StepView:
    """A guardrail's finding: the PII guard (what, where, masked), a rate limit reached, or
    an output checked against its schema."""
    if "check" in d:
        return _schema_guard_view(step, d, full=full)
    action = str(d.get("action") or "")
    if d.get("guard") == "budget":
        return _budget_view(step, d)
    if d.get("guard") == "rate_limit":
        title = f"rate limit: {d.get('tool', '')} {'waits' if action == 'wait' else 'refused'}"
        view = StepView(step, title, error=action != "wait")
        view.facts = [("limit", str(d.get("limit", ""))), ("scope", str(d.get("scope", "")))]
        if d.get("retry_at"):
            when = parse_datetime(str(d["retry_at"]))
            view.facts.append(("next slot", f"{when:%Y-%m-%d %H:%M:%S} UTC" if when else ""))
        return view
    where = f"the call to {d['tool']}" if d.get("tool") else "the final answer"
    view = StepView(step, f"PII guard: {action} in {where}", error=action == "blocked")
    view.facts = [
        (str(f.get("kind", "")), f"{f.get('field', '')}: {f.get('masked', '')}")
        for f in d.get("findings") or []
        if isinstance(f, dict)
    ]
    return view


BUDGET_TITLES = {
    "warn": "budget warning",
    "approve": "budget spent: runs need approval",
    "stop": "budget overspent: runs stop",
}


def _budget_view(step: Step, d: dict) -> StepView:
    """A budget threshold crossed (runs/engine/budget_check.py), noticed on this run."""
    threshold = str(d.get("threshold") or "")
    whose = f"team {d['team']}" if d.get("team") else d.get("agent", "")
    title = f"{BUDGET_TITLES.get(threshold, 'budget')}: {whose}"
    view = StepView(step, title, error=threshold == "stop")
    view.facts = [
        *([("agents", ", ".join(map(str, d.get("agents") or [])))] if d.get("team") else []),
        ("threshold", f"{d.get('percent', '')}%"),
        ("spent", f"{d.get('spent_usd', '')} of {d.get('amount_usd', '')} USD"),
        (
            "period",
            f"{d.get('period', '')} from {d.get('period_start', '')} ({d.get('time_zone', '')})",
        ),
    ]
    return view


# What a follow-up step's title says of each outcome (runs/chains.py).
FOLLOW_UP_TITLES = {
    "launched": "follow-up launched",
    "skipped": "follow-up skipped",
    "failed": "follow-up not launched",
}


def _follow_up_view(step: Step, d: dict, *, full: bool) -> StepView:
    outcome = str(d.get("outcome") or "")
    title = FOLLOW_UP_TITLES.get(outcome, "follow-up")
    view = StepView(step, f"{title}: {d.get('agent') or d.get('follow_up') or '—'}")
    view.error = outcome == "failed"
    if d.get("follow_up") and d.get("follow_up") != d.get("agent"):
        view.facts.append(("follow-up", str(d["follow_up"])))
    if d.get("child"):
        view.facts.append(("run", str(d["child"])))
        with contextlib.suppress(ValueError):  # linked only if it is a run's id
            view.run_link = str(uuid.UUID(str(d["child"])))
    if d.get("detail"):
        # May quote the model's output (a mapping's error): untrusted text.
        view.texts.append(Block.of("why", d["detail"], full=full, error=view.error))
    if d.get("errors"):
        view.texts.append(Block.of("errors", d["errors"], full=full, error=True))
    if "input" in d:
        view.texts.append(Block.of("input", d["input"], full=full))
    return view


def _external_call_view(step: Step, d: dict, *, full: bool) -> StepView:
    """A call an external agent submitted (gateway/), and what the gate policy said."""
    outcome = "gated" if d.get("gated") else "allowed by policy"
    view = StepView(step, f"external call {d.get('tool', '')}: {outcome}")
    view.facts = [("risk", str(d.get("risk", ""))), ("why", str(d.get("explanation", "")))]
    view.tool_uses.append(
        ToolUse(str(d.get("tool", "")), Block.of("args", d.get("args"), full=full))
    )
    if d.get("summary"):
        # Written by the agent: untrusted text.
        view.texts.append(Block.of("summary", d["summary"], full=full))
    return view


def _reason_label(reason: str) -> str:
    try:
        return str(Run.Termination(reason).label)
    except ValueError:
        return reason


# --- the run header ---------------------------------------------------------------------------
@dataclass
class Gauge:
    label: str
    used: str
    limit: str
    percent: int


def _percent(used: float, limit: float) -> int:
    if limit <= 0:
        return 0
    return max(0, min(100, int(used * 100 / limit)))


def gauges(run: Run) -> list[Gauge]:
    # Working time, as the terminator counts it: waiting for a person does not use it up.
    working = run.working_seconds
    cost = Decimal(run.cost_usd)
    return [
        Gauge(
            "steps",
            str(run.step_count),
            str(run.max_steps),
            _percent(run.step_count, run.max_steps),
        ),
        Gauge(
            "cost",
            f"${cost:.4f}",
            f"${Decimal(run.max_cost_usd):.2f}",
            _percent(float(cost), float(run.max_cost_usd)),
        ),
        Gauge(
            "working time",
            f"{working:.0f}s",
            f"{run.max_seconds}s",
            _percent(working, run.max_seconds),
        ),
    ]


def _pending_view(step: Step, d: dict, *, full: bool) -> StepView:
    """An operation the run awaited: completed, failed, timed out, escalated to a person."""
    event = str(d.get("event", ""))
    view = StepView(
        step,
        f"operation #{d.get('operation')} {event.replace('_', ' ')}",
        error=event in ("failed", "timed_out", "escalated"),
    )
    view.facts = [("tool", str(d.get("tool", ""))), ("awaited", str(d.get("awaits", "")))]
    if d.get("by"):
        view.facts.append(("by", str(d["by"])))
    if "result" in d:
        view.texts.append(Block.of("result", d["result"], full=full))
    for key in ("error", "detail"):
        if d.get(key):
            view.texts.append(Block.of(key, d[key], full=full, error=key == "error"))
    return view


def run_context(run: Run) -> dict:
    return {"run": run, "gauges": gauges(run)}


RECENT_INSTRUCTIONS = 20


def steer_context(run: Run, **extra) -> dict:
    """What the #run-steer fragment shows: the pause, the failed step waiting for a choice,
    the latest instructions, and a fresh key for the next instruction."""
    recovery = steering.open_recovery(run) if run.status == Run.Status.WAITING else None
    pause_by = run.pause_requested_by
    reopening = steering.reopening(run) if run.status == Run.Status.FAILED else None
    return {
        "run": run,
        "pause_by": pause_by.get_username() if pause_by else "an operator",
        "recovery": recovery,
        "recovery_args": json.dumps(recovery.args, indent=2, ensure_ascii=False)
        if recovery
        else "",
        "instructions": list(
            run.instructions.select_related("by").order_by("-created_at", "-id")[
                :RECENT_INSTRUCTIONS
            ]
        ),
        "instruction_key": uuid.uuid4().hex,
        # A failed run: whether it can be resumed here, and how (verifies its chain: only
        # for a failed run's page).
        "reopening": reopening,
        "reopen_args": json.dumps(reopening.failed_call.data.get("args"), indent=2)
        if reopening and reopening.failed_call
        else "",
        **extra,
    }


def compensation_context(run: Run, user, *, actions: bool = True, **extra) -> dict:
    """The section's context: the run's committed effects that declare a compensation (or
    had one asked), why none may be asked now, and whether `user` may ask (`actions`: the
    run page; the audit view shows them read-only). No query for a run whose tools declare
    no compensation, nor on the page of a run that may not be compensated (one still going:
    the section comes with the step that ends it)."""
    why_not = compensable.why_not_offered(run)
    shown = []
    if compensable.declares_any(run) and not (actions and why_not):
        shown = [e for e in compensable.effects(run) if e.compensate_tool or e.compensations]
    may_act = (
        actions
        and not why_not
        and user.can_operate
        and Run.objects.operable_by(user).filter(pk=run.pk).exists()
    )
    return {
        "run": run,
        "comp_effects": shown,
        "comp_why_not": why_not,
        "comp_may_act": may_act,
        "comp_requestable": sum(1 for e in shown if e.requestable),
        **extra,
    }


# --- WebSocket payloads ---------------------------------------------------------------------------
def render_step_event(step: Step, run: Run | None = None, *, with_header: bool = True) -> dict:
    """The run group's message for one step: the step appended to #timeline, plus the
    refreshed header (status, usage) and, once the run is terminal, its controls without
    Cancel. Rendered once; every viewer gets the same bytes."""
    html = render_to_string(RUN_PAGE + "#step-push", {"v": step_view(step)})
    if _changes_operations(step):
        # Each viewer fetches the section itself: what it shows depends on who looks (an
        # operator's buttons), and this message is the same bytes for everyone.
        url = reverse("runs:pending", args=[step.run_id])
        html += (
            f'<div id="pending-ops" hx-swap-oob="true" hx-get="{url}" hx-trigger="load" '
            'hx-swap="outerHTML"></div>'
        )
    if _changes_compensation(step):
        # The same: what it offers depends on who looks (an operator's Compensate buttons).
        url = reverse("runs:compensation", args=[step.run_id])
        html += (
            f'<div id="run-compensation" hx-swap-oob="true" hx-get="{url}" hx-trigger="load" '
            'hx-swap="outerHTML"></div>'
        )
    if _changes_steering(step):
        # The same: each viewer fetches the section (an operator's controls, a pause's line).
        url = reverse("runs:steer", args=[step.run_id])
        html += (
            f'<div id="run-steer" hx-swap-oob="true" hx-get="{url}" hx-trigger="load" '
            'hx-swap="outerHTML"></div>'
        )
    if _changes_plan(step):
        # The same again: the to-do list of the run's plans (approvals/plans/models.py).
        url = reverse("approvals:run_plan", args=[step.run_id])
        html += (
            f'<div id="run-plan" hx-swap-oob="true" hx-get="{url}" hx-trigger="load" '
            'hx-swap="outerHTML"></div>'
        )
    if with_header:
        run = run or Run.objects.select_related("launched_by").get(pk=step.run_id)
        html += render_to_string(RUN_PAGE + "#run-header", {**run_context(run), "oob": True})
        if run.is_terminal:
            html += render_to_string(RUN_PAGE + "#run-actions", {"run": run, "oob": True})
        elif _reopens(step):
            # Cancel again, for those who may: each viewer fetches their own controls.
            url = reverse("runs:actions", args=[step.run_id])
            html += (
                f'<div id="run-actions" class="actions" hx-swap-oob="true" hx-get="{url}" '
                'hx-trigger="load" hx-swap="outerHTML"></div>'
            )
    return {"html": html}


def render_draft_event(seq: int, text: str, omitted: int) -> dict:
    """The run group's message for a draft of the model's text (runs/engine/drafts.py): it
    replaces #draft. Rendered once; every viewer gets the same bytes."""
    context = {"seq": seq, "text": text, "omitted": omitted}
    return {"html": render_to_string(RUN_PAGE + "#draft", context)}


def _changes_steering(step: Step) -> bool:
    """A pause taken or ended, the run's end, an instruction delivered, a choice made, or a
    failed call held for one (runs/steering/models.py)."""
    if step.kind in (Step.Kind.STATUS, Step.Kind.OPERATOR):
        return True
    return step.kind == Step.Kind.TOOL and bool(step.data.get("held"))


def _reopens(step: Step) -> bool:
    """The status step of a failed run reopened in place (Run.reopen)."""
    return step.kind == Step.Kind.STATUS and step.data.get("event") == "reopened"


def _changes_plan(step: Step) -> bool:
    """A plan submitted or decided, a call matched to a step or deviating from it, a planned
    call's result, or the end of a run whose agent plans (its steps not taken are skipped)."""
    d = step.data if isinstance(step.data, dict) else {}
    if step.kind == Step.Kind.GATE:
        return "plan" in d or "plan_submitted" in d
    if step.kind == Step.Kind.DECISION:
        return d.get("kind") == "plan"
    if step.kind == Step.Kind.TOOL:
        return "plan_step" in d or d.get("tool") == "submit_plan"
    ended = step.kind == Step.Kind.STATUS and d.get("event") in ("terminated", "cancelled")
    # Only where the agent plans: other runs' viewers fetch nothing at their end.
    return ended and bool(step.run.agent_config.get("plans"))


def _changes_compensation(step: Step) -> bool:
    """The run's end (failed or cancelled: compensation is offered), or a compensation asked
    or settled (runs/compensation/models.py)."""
    d = step.data
    if step.kind == Step.Kind.OPERATOR:
        return str(d.get("event", "")).startswith("compensation_")
    ended = step.kind == Step.Kind.STATUS and d.get("to") in (
        Run.Status.FAILED,
        Run.Status.CANCELLED,
    )
    # Only where the agent declares a compensation: other runs' viewers fetch nothing.
    return ended and compensable.declares_any(step.run)


def _changes_operations(step: Step) -> bool:
    """An operation opened (a tool's pending result) or finished."""
    if step.kind == Step.Kind.PENDING:
        return True
    result = step.data.get("result") if step.kind == Step.Kind.TOOL else None
    return isinstance(result, dict) and result.get("status") == "pending"


def render_run_event(run: Run, launched: bool) -> dict:
    """The runs group's messages: this run's row in the runs list and on the dashboard.

    Table rows go as separate messages: htmx parses a message as one fragment, and rows
    mixed with other elements would lose their table context.
    """
    ctx = {"run": run, "gauges": gauges(run)}
    parts = [render_to_string(RUN_LIST + "#run-row", {**ctx, "oob": True})]
    if launched:
        parts.append(render_to_string(RUN_LIST + "#run-row-insert", ctx))
    if run.is_terminal:
        parts.append(render_to_string(DASHBOARD + "#inflight-delete", ctx))
    else:
        parts.append(render_to_string(DASHBOARD + "#inflight-row", {**ctx, "oob": True}))
        if launched:
            parts.append(render_to_string(DASHBOARD + "#inflight-insert", ctx))
    return {"html": parts}


def _when(iso: Any) -> str:
    """A timestamp stored in step data (ISO 8601), as the rest of the page shows times."""
    parsed = parse_datetime(str(iso or ""))
    return f"{parsed:%Y-%m-%d %H:%M} UTC" if parsed else str(iso or "")


# The renderer of each step kind; a kind not here is a status change (_status_view).
STEP_RENDERERS: dict[str, Callable[..., StepView]] = {
    Step.Kind.LLM: _model_view,
    Step.Kind.LLM_ERROR: _model_error_view,
    Step.Kind.TOOL: _tool_view,
    Step.Kind.GATE: _gate_view,
    Step.Kind.DECISION: _decision_view,
    Step.Kind.PENDING: _pending_view,
    Step.Kind.OPERATOR: _operator_view,
    Step.Kind.SUMMARY: _summary_view,
    Step.Kind.VERIFY: _verify_view,
    Step.Kind.GUARD: _guard_view,
}
# Status steps that are not status changes: a chained run's follow-up, an external call.
STATUS_RENDERERS: dict[str, Callable[..., StepView]] = {
    "follow_up": _follow_up_view,
    "call": _external_call_view,
}
