"""The gate decision: whether a proposed call needs a person, as one ordered cascade.
Why and how: docs/design/modules.md."""

import hashlib
import logging
import random

from django.conf import settings

from agentkit.plan_tool import SUBMIT_PLAN
from agentkit.tools import Blast, Tool, get_tool
from runs.engine.pii_guard import FINAL_ANSWER
from runs.models import Run, canonical_json

from ..grants import models as grants
from ..learning import rules as learning
from ..models import Approval, RuleHit
from ..plans import gates as plan_gates
from ..plans import models as plans
from . import policy, record

ASK_OPERATOR = "ask_operator"
log = logging.getLogger("agentops.gates")

# Sampling draws from the OS: the model cannot predict which borderline calls are reviewed.
# Tests pass a seeded random.Random to gate_for_call (or replace this), or set
# GATE_SAMPLING_SEED: then each call's draw is a function of the seed and the call.
sampling_rng: random.Random = random.SystemRandom()


def sampler(run: Run, item: dict, tool: Tool, purpose: str) -> random.Random:
    """The draw for one call. With GATE_SAMPLING_SEED set (tests, simulations, never in
    production) it is a function of the seed, the agent, the tool and the arguments, so the
    same call is sampled (or not) on every run of a test; otherwise the OS's."""
    seed = settings.AGENTOPS.get("GATE_SAMPLING_SEED")
    if not seed:
        return sampling_rng
    call = f"{seed}:{purpose}:{run.agent}:{tool.name}:{canonical_json(item['args'])}"
    return random.Random(hashlib.sha256(call.encode()).digest())


# --- before the engine's transaction: does the call run freely? -------------------------------
def gate_for_call(
    run: Run, item: dict, tool: Tool, response=None, *, rng: random.Random | None = None
) -> dict | None:
    """What the cascade must settle about this call (`open_gate`'s `gate`), or None: it may
    run. Writes nothing; draws each sample once.

    `response` is the model turn that proposed the call: its stated confidence (see
    policy.model_confidence) can add a gate, and its text is the approver's context.

    Fails closed: a policy that raises (rules it cannot read, a learned rule that cannot be
    looked up) gates the call, and the approval says why.
    """
    try:
        if tool.name == ASK_OPERATOR:  # 1. a question
            return _question(item, tool)
        if tool.name == SUBMIT_PLAN and plans.declared(run):  # 1. a plan submitted
            return plan_gates.plan_gate(item, response)
        gate: dict | None
        if item.get("pii"):  # 2. the PII guard
            gate = _pii_gate(run, item, tool, response, rng)
        else:  # 6. the declared policy, and 4. what was learned
            gate = _policy_gate(run, item, tool, response, rng)
        if plans.declared(run):  # 3. inside an approved plan, the plan has its say
            return plan_gates.in_plan(run, item, tool, gate)
        return gate
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


def _question(item: dict, tool: Tool) -> dict:
    return {
        "kind": Approval.Kind.QUESTION,
        "tool": tool.name,
        "question": item["args"]["question"],
        "options": item["args"].get("options") or [],
        "explanation": "the agent asked the operator a question",
        "risk": Approval.Risk.LOW,
    }


def _pii_gate(run: Run, item: dict, tool: Tool, response, rng) -> dict:
    """The agent's PII guard gates this call (or its final answer, held as a call): the
    approval lists what was found, masked (runs/engine/pii_guard.py), with whatever the
    gate policy would have said of the call as well."""
    found = "; ".join(f"{f['kind']} in {f['field']}" for f in item["pii"])
    explanation = f"personal data leaving the system ({found})"
    risk = max(tool.blast, Blast.MEDIUM).label
    if tool.name != FINAL_ANSWER:
        verdict = policy.evaluate(
            tool=tool,
            args=item["args"],
            rules=run.agent_config.get("gates", {}),
            confidence=policy.model_confidence(response),
            rng=rng or sampler(run, item, tool, "borderline"),
        )
        if verdict.gated:
            explanation += f"; and {verdict.explanation}"
        risk = max(policy.BLAST_BY_LABEL[verdict.risk], Blast.MEDIUM).label
    return {
        "kind": Approval.Kind.ACTION,
        "tool": tool.name,
        "explanation": explanation,
        "risk": risk,
        "context": (response.text if response is not None else "")[:4000],
        "findings": item["pii"],
    }


def _policy_gate(run: Run, item: dict, tool: Tool, response, rng) -> dict | None:
    """The declared policy's verdict as a gate (None: it lets the call run), amended by what
    the agent learned, for an agent that learns."""
    rules = run.agent_config.get("gates", {})
    learns = learning.declared(rules)
    if learns is not None and not rules.get("sample_rate"):
        # An agent that learns samples its borderline calls by default.
        rules = {**rules, "sample_rate": learns.get("sample_rate", 0.15)}
    verdict = policy.evaluate(
        tool=tool,
        args=item["args"],
        rules=rules,
        confidence=policy.model_confidence(response),
        rng=rng or sampler(run, item, tool, "borderline"),
    )
    gate = action_gate(verdict, tool.name, (response.text if response is not None else ""))
    if learns is not None and tool.has_side_effects:
        # Only for agents that declare learning: the hot path of the others gains no query.
        return _learned(run, item, tool, verdict, gate, learns, rng)
    return gate if verdict.gated else None


def action_gate(verdict: policy.Verdict, tool: str, context: str) -> dict:
    """A gated call as the policy judged it: what a person is told."""
    return {
        "kind": Approval.Kind.ACTION,
        "tool": tool,
        "explanation": verdict.explanation,
        "risk": verdict.risk,
        "sampled": verdict.sampled,
        "context": context[:4000],
    }


def _learned(
    run: Run, item: dict, tool: Tool, verdict, gate: dict, learns: dict, rng
) -> dict | None:
    """The verdict as the learned rules and reviews amend it: an override gates, an accepted
    rule marks the gate for approval by it (or for a sampled check of itself by a person)."""
    if not verdict.gated:
        override = learning.overridden(run.agent, tool.name)
        if override is None:
            return None
        gate["explanation"] = (
            f"{policy.describe(tool)}: a reviewer found a {tool.name} call of this agent "
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
    rate = policy._rate(learns.get("check_rate"))
    if rate and (rng or sampler(run, item, tool, "rule-check")).random() < rate:
        gate["sampled"] = True
        gate["rule_check"] = rule.pk
        gate["explanation"] = (
            f"sampled check of auto-approve rule #{rule.pk} "
            f"({learning.describe(tool.name, rule.pattern)}): {verdict.explanation}"
        )
        return gate
    gate["rule"] = rule.pk
    return gate


def external_verdict(run: Run, tool: Tool, args: dict) -> policy.Verdict:
    """The declared policy's verdict on an external agent's call (gateway/sessions.py): no
    model turn states a confidence, and no learned rule or plan applies to such a call."""
    return policy.evaluate(
        tool=tool, args=args, rules=run.agent_config.get("gates", {}), rng=sampling_rng
    )


def open_external(run: Run, item: dict, verdict: policy.Verdict, summary: str) -> str:
    """Settle an external agent's call the policy gated (`open_gate`): a grant, else a person,
    who reads the agent's summary of the call."""
    return open_gate(run, item, action_gate(verdict, item["name"], summary))


# --- inside the engine's transaction: who settles the call ------------------------------------
def open_gate(run: Run, item: dict, gate: dict) -> str:
    """Settle a call `gate_for_call` did not let run freely, in the cascade's order; the id of
    its Approval (pending for a person, or already approved by a plan, rule or grant)."""
    gate = dict(gate)
    rule_id = gate.pop("rule", None)
    check_id = gate.pop("rule_check", None)
    if gate["kind"] == Approval.Kind.QUESTION:  # 1. a question
        return str(record.ask_person(run, item, **gate).pk)
    if gate["kind"] == Approval.Kind.PLAN:  # 1. a plan submitted
        return plan_gates.open_plan(run, item, gate)
    if gate.get("plan") is not None:  # 3. a call inside an approved plan (2. PII ones too)
        return plan_gates.open_in_plan(run, item, gate)
    if gate.get("findings"):  # 2. the PII guard
        return str(record.ask_person(run, item, **gate).pk)
    if rule_id is not None:  # 4. a learned rule (unless revoked since)
        approved = _by_rule(run, item, gate, rule_id)
        if approved is not None:
            return str(approved.pk)
    if check_id is None:  # 5. a standing grant (a rule's sampled check goes to a person)
        granted = grants.use_for(run, item, gate)
        if granted is not None:
            return str(_by_grant(run, item, gate, granted).pk)
    approval = record.ask_person(run, item, **gate)  # 6. the policy gated it: 7. a person
    if check_id is not None:
        RuleHit.objects.create(rule_id=check_id, approval=approval, checked=True)
    return str(approval.pk)


def _by_rule(run: Run, item: dict, gate: dict, rule_id: int) -> Approval | None:
    """Approved by the learned rule, its hit counted; None when it no longer covers the call."""
    tool = get_tool(gate["tool"])
    rule = learning.use_rule(rule_id, item["args"], tool, gate["risk"]) if tool else None
    if rule is None:
        return None
    described = learning.describe(gate["tool"], rule.pattern)
    by = f"approved by rule #{rule.pk}"
    approval = record.approved_without_person(
        run,
        item,
        tool=gate["tool"],
        risk=gate["risk"],
        explanation=f"{by} ({described}); without it: {gate['explanation']}",
        reason=by,
        step={"approved_by_rule": rule.pk, "rule": described},
    )
    assert approval.decided_at is not None  # approved without a person: decided at once
    RuleHit.objects.create(rule=rule, approval=approval, checked=False, at=approval.decided_at)
    return approval


def _by_grant(run: Run, item: dict, gate: dict, grant) -> Approval:
    """Approved by the standing grant whose use was just counted (`Approval.grant`)."""
    who = grant.granted_by_name
    by = f"approved by grant #{grant.pk} (by {who})"
    return record.approved_without_person(
        run,
        item,
        tool=gate["tool"],
        risk=gate["risk"],
        explanation=f"{by}; without it: {gate['explanation']}",
        reason=by,
        grant=grant,
        step={"approved_by_grant": grant.pk, "granted_by": who, "grant": grants.describe(grant)},
    )
