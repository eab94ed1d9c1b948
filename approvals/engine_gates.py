"""The gate policy as the engine sees it (runs.engine.gates.Gates): what needs a person,
opening approvals for gated calls and questions, and what people decided.

approvals/apps.py hands this module to the engine at start-up (`use_gates`); the engine never
imports approvals. The writes run inside the engine's transaction (the run row is locked by
the caller). Approvers are notified (approvals/tasks.py) once that transaction commits.
"""

import hashlib
import logging
import random
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentkit import previews
from agentkit.plan_tool import SUBMIT_PLAN
from agentkit.tools import Blast, Tool, ToolError, get_tool, tool
from runs import events
from runs.engine.gates import CONTINUE, EXPIRE, PENDING, STOP, ContinueAnswer, Decision
from runs.engine.pii_guard import FINAL_ANSWER
from runs.models import Run, SideEffect, Step, args_hash, canonical_json

from . import tasks
from .gates import config as gate_config
from .gates import policy as declared_policy
from .grants import models as grants
from .learning import rules as learning
from .models import Approval, RuleHit
from .plans import gates as plan_gates
from .plans import models as plans

ASK_OPERATOR = "ask_operator"
log = logging.getLogger("agentops.gates")

# Sampling draws from the OS: the model cannot predict which borderline calls are reviewed.
# Tests pass a seeded random.Random to gate_for_call (or replace this), or set
# GATE_SAMPLING_SEED: then each call's draw is a function of the seed and the call.
sampling_rng: random.Random = random.SystemRandom()


def _sampler(run: Run, item: dict, tool: Tool, purpose: str) -> random.Random:
    """The draw for one call. With GATE_SAMPLING_SEED set (tests, simulations, never in
    production) it is a function of the seed, the agent, the tool and the arguments, so the
    same call is sampled (or not) on every run of a test; otherwise the OS's."""
    seed = settings.AGENTOPS.get("GATE_SAMPLING_SEED")
    if not seed:
        return sampling_rng
    call = f"{seed}:{purpose}:{run.agent}:{tool.name}:{canonical_json(item['args'])}"
    return random.Random(hashlib.sha256(call.encode()).digest())


@tool(reversible=True, blast=Blast.NONE, name=ASK_OPERATOR)
def ask_operator(question: str, options: list[str] | None = None) -> dict:
    """Ask the human operator a question and wait for the answer. Use it to clarify instead
    of guessing. Optionally offer a short list of answers to choose from."""
    raise ToolError("ask_operator is answered by a person, not executed")


def _deadline(run: Run) -> tuple[timedelta, str]:
    gates = run.agent_config.get("gates", {})
    seconds = gates.get("approval_timeout_seconds")
    return (
        gate_config.APPROVAL_TIMEOUT if seconds is None else timedelta(seconds=seconds),
        gates.get("on_expiry", gate_config.ON_EXPIRY),
    )


def gate_for_call(
    run: Run, item: dict, tool: Tool, response=None, *, rng: random.Random | None = None
) -> dict | None:
    """What to ask a person about this call if policy gates it (`open_gate`'s `gate`), or
    None: it may run. Writes nothing; asks the policy once (sampling draws a number).

    `response` is the model turn that proposed the call: its stated confidence (see
    declared_policy.model_confidence) can add a gate, and its text is the approver's context.

    Fails closed: a policy that raises (rules it cannot read, a learned rule that cannot be
    looked up) gates the call, and the approval says why.
    """
    try:
        if tool.name == SUBMIT_PLAN and plans.declared(run):
            return plan_gates.plan_gate(item, response)
        gate = _gate_for_call(run, item, tool, response, rng)
        # Inside an approved plan, the plan has its say on every call (approvals/plans/models.py).
        return plan_gates.in_plan(run, item, tool, gate) if plans.declared(run) else gate
    except Exception as exc:
        log.exception("run %s: the gate policy failed on %s; a person decides", run.pk, tool.name)
        return {
            "kind": Approval.Kind.ACTION,
            "tool": tool.name,
            "explanation": (
                f"the gate policy could not decide ({type(exc).__name__}: {exc}); "
                "gated, as every call is when its policy fails"
            )[:1000],
            "risk": Blast.HIGH.label,
            "context": (getattr(response, "text", "") or "")[:4000],
        }


def _gate_for_call(
    run: Run, item: dict, tool: Tool, response, rng: random.Random | None
) -> dict | None:
    if tool.name == ASK_OPERATOR:
        return {
            "kind": Approval.Kind.QUESTION,
            "tool": tool.name,
            "question": item["args"]["question"],
            "options": item["args"].get("options") or [],
            "explanation": "the agent asked the operator a question",
            "risk": Approval.Risk.LOW,
        }
    if item.get("pii"):
        return _pii_gate(run, item, tool, response, rng)
    rules = run.agent_config.get("gates", {})
    learns = learning.declared(rules)
    if learns is not None and not rules.get("sample_rate"):
        # An agent that learns samples its borderline calls by default.
        rules = {**rules, "sample_rate": learns.get("sample_rate", 0.15)}
    verdict = declared_policy.evaluate(
        tool=tool,
        args=item["args"],
        rules=rules,
        confidence=declared_policy.model_confidence(response),
        rng=rng or _sampler(run, item, tool, "borderline"),
    )
    gate = {
        "kind": Approval.Kind.ACTION,
        "tool": tool.name,
        "explanation": verdict.explanation,
        "risk": verdict.risk,
        "sampled": verdict.sampled,
        "context": (response.text if response is not None else "")[:4000],
    }
    if learns is not None and tool.has_side_effects:
        # Only for agents that declare learning: the hot path of the others gains no query.
        return _learned(run, item, tool, verdict, gate, learns, rng)
    return gate if verdict.gated else None


def _learned(
    run: Run, item: dict, tool: Tool, verdict, gate: dict, learns: dict, rng
) -> dict | None:
    """The verdict as the learned rules and reviews amend it: an override gates, an accepted
    rule approves (or sends a sampled check of itself to a person)."""
    if not verdict.gated:
        override = learning.overridden(run.agent, tool.name)
        if override is None:
            return None
        gate["explanation"] = (
            f"{declared_policy.describe(tool)}: a reviewer found a {tool.name} call of this agent "
            f"should have been gated; every such call goes to a person until an admin clears it"
        )
        return gate
    if not verdict.by_table_only or verdict.sampled:
        return gate
    if not learning.eligible(tool, run.agent_config.get("gates", {}), verdict.risk):
        return gate
    try:
        rule = learning.covering_rule(run.agent, tool, item["args"], verdict.risk)
    except Exception as exc:
        # A rule that cannot be evaluated approves nothing: the table's gate stands.
        log.exception("run %s: learned rules for %s could not be evaluated", run.pk, tool.name)
        gate["explanation"] += f" (learned rules not applied: {type(exc).__name__})"
        return gate
    if rule is None:
        return gate
    rate = declared_policy._rate(learns.get("check_rate"))
    if rate and (rng or _sampler(run, item, tool, "rule-check")).random() < rate:
        gate["sampled"] = True
        gate["rule_check"] = rule.pk
        gate["explanation"] = (
            f"sampled check of auto-approve rule #{rule.pk} "
            f"({learning.describe(tool.name, rule.pattern)}): {verdict.explanation}"
        )
        return gate
    gate["rule"] = rule.pk
    return gate


def _pii_gate(run: Run, item: dict, tool: Tool, response, rng) -> dict:
    """The agent's PII guard gates this call (or its final answer, held as a call): the
    approval lists what was found, masked (runs/engine/pii_guard.py), with whatever the
    gate policy would have said of the call as well."""
    found = "; ".join(f"{f['kind']} in {f['field']}" for f in item["pii"])
    explanation = f"personal data leaving the system ({found})"
    risk = max(tool.blast, Blast.MEDIUM).label
    if tool.name != FINAL_ANSWER:
        verdict = declared_policy.evaluate(
            tool=tool,
            args=item["args"],
            rules=run.agent_config.get("gates", {}),
            confidence=declared_policy.model_confidence(response),
            rng=rng or _sampler(run, item, tool, "borderline"),
        )
        if verdict.gated:
            explanation += f"; and {verdict.explanation}"
        risk = max(declared_policy.BLAST_BY_LABEL[verdict.risk], Blast.MEDIUM).label
    return {
        "kind": Approval.Kind.ACTION,
        "tool": tool.name,
        "explanation": explanation,
        "risk": risk,
        "context": (response.text if response is not None else "")[:4000],
        "findings": item["pii"],
    }


def open_gate(run: Run, item: dict, gate: dict) -> str:
    """The Approval and gate step for a gated call (`gate_for_call`); the approval's id.

    A call an auto-approve rule covers gets an Approval already approved by the rule (its
    gate step says "approved by rule #N"), so the engine runs it as it runs any approved
    call and nobody is asked; if the rule was revoked meanwhile, a person is asked."""
    gate = dict(gate)
    if gate["kind"] == Approval.Kind.PLAN:
        return plan_gates.open_plan(run, item, gate, open_=_open)
    if gate.get("plan") is not None:
        return plan_gates.open_in_plan(run, item, gate, open_=_open, step=_gate_step)
    rule_id = gate.pop("rule", None)
    check_id = gate.pop("rule_check", None)
    if rule_id is not None:
        tool = get_tool(gate["tool"])
        rule = learning.use_rule(rule_id, item["args"], tool, gate["risk"]) if tool else None
        if rule is not None:
            return str(_approve_by_rule(run, item, rule, **gate).pk)
    if check_id is None:
        # A standing grant an approver gave (approvals/grants/models.py); a rule's sampled check
        # still goes to a person.
        granted = grants.use_for(run, item, gate)
        if granted is not None:
            return str(_approve_by_grant(run, item, granted, **gate).pk)
    approval = _open(run, item, **gate)
    if check_id is not None:
        RuleHit.objects.create(rule_id=check_id, approval=approval, checked=True)
    return str(approval.pk)


def _approve_by_rule(
    run: Run, item: dict, rule, *, kind: str, tool: str, explanation: str, risk: str, **_
) -> Approval:
    """The audit record of a call a rule approved: an Approval decided by the rule (no
    person), its RuleHit, and a gate step in the run's hash-chained timeline."""
    now = timezone.now()
    described = learning.describe(tool, rule.pattern)
    why = f"approved by rule #{rule.pk} ({described}); without it: {explanation}"
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"],
        kind=kind,
        tool=tool,
        args=item["args"],
        args_hash=args_hash(tool, item["args"]),
        approved_args_hash=args_hash(tool, item["args"]),
        explanation=why,
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        status=Approval.Status.APPROVED,
        reason=f"approved by rule #{rule.pk}",
        requested_at=now,
        decided_at=now,
        expires_at=now,
    )
    approval.save(force_insert=True)
    RuleHit.objects.create(rule=rule, approval=approval, checked=False, at=now)
    _gate_step(
        run,
        approval,
        item,
        status=Approval.Status.APPROVED,
        approved_by_rule=rule.pk,
        rule=described,
    )
    return approval


def _approve_by_grant(
    run: Run, item: dict, grant, *, kind: str, tool: str, explanation: str, risk: str, **_
) -> Approval:
    """The audit record of a call a standing grant approved: an Approval decided by the grant
    (`Approval.grant`; no person decided this call), and a gate step saying "approved by grant
    #n (by whom)" in the run's hash-chained timeline."""
    now = timezone.now()
    who = grant.granted_by_name
    hashed = args_hash(tool, item["args"])
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"],
        kind=kind,
        tool=tool,
        args=item["args"],
        args_hash=hashed,
        approved_args_hash=hashed,
        explanation=f"approved by grant #{grant.pk} (by {who}); without it: {explanation}",
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        status=Approval.Status.APPROVED,
        reason=f"approved by grant #{grant.pk} (by {who})",
        grant=grant,
        requested_at=now,
        decided_at=now,
        expires_at=now,
    )
    approval.save(force_insert=True)
    _gate_step(
        run,
        approval,
        item,
        status=Approval.Status.APPROVED,
        approved_by_grant=grant.pk,
        granted_by=who,
        grant=grants.describe(grant),
    )
    return approval


def open_outcome_question(run: Run, item: dict, tool: Tool, effect: SideEffect) -> str:
    """Ask whether a call whose outcome was never recorded took effect; the approval's id."""
    approval = _open(
        run,
        item,
        kind=Approval.Kind.QUESTION,
        tool=tool.name,
        question=(
            f"{_why_unknown(item, tool)}, and {tool.name} cannot de-duplicate retries. "
            f"Did this {tool.name} call take effect?"
        ),
        options=["happened", "did_not_happen"],
        explanation="outcome unknown: the call was started but its result was never recorded",
        risk=tool.blast.label,
        side_effect=effect,
        suffix=f":unknown:{effect.attempts}",
    )
    return str(approval.pk)


def _why_unknown(item: dict, tool: Tool) -> str:
    """What left the outcome unknown: the call's own failure (a timeout, a dropped connection:
    runs/engine/ledger.py notes it), else a worker that stopped during the call."""
    because = item.get("unknown_because")
    if because:
        return f"The {tool.name} call failed without saying whether it took effect ({because})"
    return f"A worker stopped while calling {tool.name}"


def open_verification_question(run: Run, failed: dict) -> str:
    """A final answer failed its verifier as often as allowed and a person decides
    (Verifier(on_fail="person")); the approval's id. Free text, so "send back" can carry a
    note: "accept" and "fail" are the two words the engine reads as such."""
    approval = _open(
        run,
        {"llm_seq": failed["llm_seq"], "id": failed["key"], "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=(
            f"The agent's {failed['subject']} failed verification by {failed['verifier']} "
            f"{failed['attempts']} time(s): {failed['reason']}\n"
            'Answer "accept" to accept the answer as it is, "fail" to fail the run, or write '
            "a note to send the answer back to the agent with it."
        ),
        options=[],
        explanation=f"verification failed: {failed['reason']}"[:1000],
        risk=Approval.Risk.MEDIUM,
        context=str(failed["output"])[:4000],
    )
    return str(approval.pk)


def pending_count(run: Run) -> int:
    return Approval.objects.filter(run=run, status=Approval.Status.PENDING).count()


def decisions(ids: list[str]) -> dict[str, Decision]:
    """The engine's view of these approvals: what was decided, by whom, what to execute."""
    approvals = Approval.objects.filter(pk__in=ids).select_related("decided_by")
    return {str(a.pk): _decision(a) for a in approvals}


def _decision(approval: Approval) -> Decision:
    return Decision(
        id=str(approval.pk),
        status=approval.status,
        args=approval.final_args,
        args_hash=approval.approved_args_hash or approval.args_hash,
        by=approval.decided_by.get_username() if approval.decided_by else None,
        answer=approval.answer,
        reason=approval.reason,
        on_expiry=approval.on_expiry,
        decided_at=approval.decided_at,
        side_effect_id=approval.side_effect_id,
    )


# --- periodic "continue?" checkpoint -----------------------------------------------------------
# Every N model steps (GateRules.continue_every_n_steps, 0 = off) the run asks the operator
# whether to go on, before its next model call. The engine calls these from
# runs.engine.humans.continue_checkpoint. One question per checkpoint: its tool_use_id names the
# step count, so re-entering the check after a resume finds the answered question.


def continue_due(run: Run) -> bool:
    every = int(run.agent_config.get("gates", {}).get("continue_every_n_steps") or 0)
    return every > 0 and run.step_count > 0 and run.step_count % every == 0


def _continue_id(run: Run) -> str:
    return f"continue:{run.step_count}"


def continue_question(run: Run) -> Approval | None:
    return Approval.objects.filter(run=run, tool_use_id=_continue_id(run)).first()


def open_continue_question(run: Run) -> Approval:
    """Ask "continue?" (options continue / stop). Call with the run locked and owned."""
    last_llm = run.steps.filter(kind=Step.Kind.LLM).order_by("-seq").first()
    llm_seq = last_llm.seq if last_llm else run.last_seq
    every = int(run.agent_config["gates"]["continue_every_n_steps"])
    return _open(
        run,
        {"llm_seq": llm_seq, "id": _continue_id(run), "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=(
            f"The agent has made {run.step_count} model calls "
            f"(cost so far {run.cost_usd:.4f} USD). Continue?"
        ),
        options=[CONTINUE, STOP],
        explanation=(
            f"periodic checkpoint: every {every} model steps a person confirms the run should go on"
        ),
        risk=Approval.Risk.LOW,
        context=_text(last_llm.data.get("content") or [])[:4000] if last_llm else "",
    )


def continue_answer(run: Run) -> ContinueAnswer | None:
    """The due checkpoint's state: None when not asked yet, else pending, continue, stop or
    expired, with the detail in plain words. Only an explicit "continue" goes on; "stop",
    any other answer, or a rejection stops."""
    return _go_on_answer(continue_question(run), "the continue? checkpoint")


def _go_on_answer(approval: Approval | None, what: str) -> ContinueAnswer | None:
    if approval is None:
        return None
    if approval.status == Approval.Status.PENDING:
        return ContinueAnswer(PENDING)
    if approval.status == Approval.Status.EXPIRED and approval.on_expiry == "halt":
        # The expiry halted the run; it only moves again when an operator resumes it.
        return ContinueAnswer(CONTINUE)
    if approval.status == Approval.Status.EXPIRED:
        return ContinueAnswer(EXPIRE, f"nobody answered {what} before it expired")
    if (
        approval.status == Approval.Status.ANSWERED
        and approval.answer.strip().casefold() == CONTINUE
    ):
        return ContinueAnswer(CONTINUE)
    who = approval.decided_by.get_username() if approval.decided_by else "the system"
    why = f": {approval.reason}" if approval.reason else ""
    return ContinueAnswer(STOP, f"stopped by {who} at {what}{why}", by=approval.decided_by)


# --- budgets (runs/budgets.py) ----------------------------------------------------------------
def budget_answer(run: Run, key: str) -> ContinueAnswer | None:
    approval = Approval.objects.filter(run=run, tool_use_id=key).first()
    return _go_on_answer(approval, "the budget question")


def open_budget_question(run: Run, key: str, question: str, explanation: str) -> Approval:
    """Ask "budget exceeded: continue?" (options continue / stop), once per run and budget
    period. Call with the run locked and owned."""
    return _open(
        run,
        {"llm_seq": run.last_seq, "id": key, "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=question,
        options=[CONTINUE, STOP],
        explanation=explanation,
        risk=Approval.Risk.MEDIUM,
    )


def budget_crossed(run: Run, crossing_id: int) -> None:
    transaction.on_commit(lambda: tasks.budget_crossed(crossing_id))


def _text(content: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def _open(
    run: Run,
    item: dict,
    *,
    kind: str,
    tool: str,
    explanation: str,
    risk: str,
    question: str = "",
    options: list | None = None,
    sampled: bool = False,
    context: str = "",
    side_effect: SideEffect | None = None,
    suffix: str = "",
    findings: list | None = None,
    step_extra: dict | None = None,
) -> Approval:
    timeout, on_expiry = _deadline(run)
    now = timezone.now()
    found = get_tool(tool) if kind == Approval.Kind.ACTION and tool else None
    # Read-only, inside the engine's transaction: the data as it is when the person is asked.
    preview = previews.compute(found.preview, item["args"]) if found is not None else None
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"] + suffix,
        kind=kind,
        tool=tool,
        args=item["args"],
        args_hash=args_hash(tool, item["args"]) if tool else "",
        # The model's words, as the timeline keeps them (masked under a PII policy).
        question=run.recorded({"q": question})["q"],
        options=options or [],
        explanation=explanation,
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        sampled=sampled,
        context_summary=run.recorded({"c": context})["c"],
        preview=preview,
        side_effect=side_effect,
        on_expiry=on_expiry,
        requested_at=now,
        expires_at=now + timeout,
    )
    approval.save(force_insert=True)
    _gate_step(
        run,
        approval,
        item,
        question=question,
        options=options or [],
        sampled=sampled,
        expires_at=approval.expires_at.isoformat(),
        # The PII guard's findings (masked), for the approval card.
        **({"findings": findings} if findings else {}),
        # Which preview the approver is shown (the preview itself is the approval's).
        **({"preview_hash": preview["hash"]} if preview else {}),
        # What a plan said of the call, or that it is a plan (approvals/plans/gates.py).
        **(step_extra or {}),
    )
    events.publish_approvals_changed(approval.pk)
    transaction.on_commit(lambda: tasks.approval_requested(approval.pk))
    return approval


def _gate_step(run: Run, approval: Approval, item: dict, **extra) -> None:
    """The gate's step in the run's timeline, for an approval a person decides and for one a
    rule approved alike; `extra` says what differs."""
    run.append_step(
        Step.Kind.GATE,
        {
            "approval": str(approval.pk),
            "kind": approval.kind,
            "tool_use_id": item["id"],
            "tool": approval.tool,
            "args": item["args"],
            "explanation": approval.explanation,
            "risk": approval.risk,
            **extra,
        },
    )
