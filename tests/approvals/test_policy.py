"""Gate policy: the table, each rule, what the model cannot influence, sampling, and the
periodic continue? checkpoint driven through the real engine."""

import dataclasses
import random
from decimal import Decimal

import pytest
from django import forms
from django.db import transaction
from django.utils import timezone

from agentkit.agents import CATALOGUE, Agent, GateRules, get_agent, register
from agentkit.llm import LLMResponse, Usage
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import REGISTRY, Blast, ToolArgsError, tool
from approvals.gates import cascade
from approvals.gates import policy as declared_policy
from approvals.models import Approval
from runs import engine
from runs.models import Run, Step

EXECUTED: list[tuple[str, dict]] = []


@tool(reversible=True, blast=Blast.NONE, name="t_peek")
def t_peek(n: int) -> dict:
    """Read something (no side effects)."""
    EXECUTED.append(("t_peek", {"n": n}))
    return {"n": n}


@tool(reversible=True, blast=Blast.LOW, name="t_tag")
def t_tag(label: str) -> dict:
    """Put a label on a ticket (undoable, small reach)."""
    EXECUTED.append(("t_tag", {"label": label}))
    return {"label": label}


@tool(reversible=False, blast=Blast.HIGH, accepts_idempotency_key=True, name="t_pay")
def t_pay(amount: Decimal, to: str) -> dict:
    """Pay money out (cannot be undone)."""
    EXECUTED.append(("t_pay", {"amount": str(amount), "to": to}))
    return {"paid": str(amount)}


def evaluate(name: str, args: dict | None = None, rules: dict | None = None, **kw):
    return declared_policy.evaluate(tool=REGISTRY[name], args=args or {}, rules=rules or {}, **kw)


def shaped(reversible: bool, blast: Blast):
    return dataclasses.replace(REGISTRY["t_tag"], reversible=reversible, blast=blast)


# --- the base table -----------------------------------------------------------------------------
# Written out here on purpose (not read from BASE_TABLE): this is the declared policy.
BASE = [
    (True, Blast.NONE, False),
    (True, Blast.LOW, False),
    (True, Blast.MEDIUM, False),
    (True, Blast.HIGH, False),
    (True, Blast.CRITICAL, True),
    (False, Blast.NONE, False),
    (False, Blast.LOW, False),
    (False, Blast.MEDIUM, True),
    (False, Blast.HIGH, True),
    (False, Blast.CRITICAL, True),
]


@pytest.mark.parametrize(("reversible", "blast", "gated"), BASE)
def test_base_table_gates_or_runs_as_declared(reversible, blast, gated):
    verdict = declared_policy.evaluate(
        tool=shaped(reversible, blast), args={"label": "x"}, rules={}
    )
    assert verdict.gated is gated
    assert verdict.sampled is False
    assert verdict.risk == blast.label
    kind = "reversible" if reversible else "irreversible"
    assert verdict.explanation.startswith(f"{kind}, blast radius {blast.label}: ")


def test_only_calls_without_side_effects_are_not_borderline():
    for reversible, blast, gated in BASE:
        verdict = declared_policy.evaluate(tool=shaped(reversible, blast), args={}, rules={})
        if not gated:
            assert verdict.borderline is (not (reversible and blast == Blast.NONE))


# --- each rule ----------------------------------------------------------------------------------
REFUND = get_agent("refund-desk").gates.as_dict()  # thresholds: issue_refund.amount > 500

RULES = [
    # (id, tool, args, rules, confidence, gated, risk, explanation fragment)
    pytest.param(
        "issue_refund",
        {"order_id": 1, "amount": "820.00", "reason": ""},
        REFUND,
        None,
        True,
        "high",
        "irreversible, blast radius high: cannot be undone; amount 820 exceeds the limit of 500",
        id="demo refund over its threshold",
    ),
    pytest.param(
        "t_tag",
        {"label": "x"},
        {"thresholds": {"t_tag": {"priority": "3"}}},
        None,
        True,
        "medium",
        "priority is not given, so the limit of 3 cannot be checked",
        id="threshold on an argument that is not given",
    ),
    pytest.param(
        "t_pay",
        {"amount": "499.99", "to": "acme"},
        {"never_gate": ["t_pay"], "thresholds": {"t_pay": {"amount": "500"}}},
        None,
        False,
        "high",
        "t_pay is on this agent's never-gate list",
        id="never-gate skips the base table when under the threshold",
    ),
    pytest.param(
        "t_pay",
        {"amount": "500.01", "to": "acme"},
        {"never_gate": ["t_pay"], "thresholds": {"t_pay": {"amount": "500"}}},
        None,
        True,
        "high",
        "irreversible, blast radius high: amount 500.01 exceeds the limit of 500",
        id="never-gate does not override a threshold",
    ),
    pytest.param(
        "t_pay",
        {"amount": "1", "to": "mallory"},
        {"never_gate": ["t_pay"], "allow_lists": {"t_pay": {"to": ["acme", "globex"]}}},
        None,
        True,
        "high",
        "to 'mallory' is not on the allow-list",
        id="never-gate does not override an allow-list",
    ),
    pytest.param(
        "t_pay",
        {"amount": "1", "to": "ACME "},
        {"never_gate": ["t_pay"], "allow_lists": {"t_pay": {"to": ["acme"]}}},
        None,
        False,
        "high",
        "never-gate list",
        id="allow-list compares case-insensitively",
    ),
    pytest.param(
        "t_tag",
        {"label": "ops@example.com"},
        {"allow_lists": {"t_tag": {"label": ["@example.com"]}}},
        None,
        False,
        "low",
        "allowed by policy",
        id="allow-list domain entry",
    ),
    pytest.param(
        "t_tag",
        {"label": "ops@example.com.evil.test"},
        {"allow_lists": {"t_tag": {"label": ["@example.com"]}}},
        None,
        True,
        "medium",
        "label 'ops@example.com.evil.test' is not on the allow-list",
        id="allow-list domain entry is not a prefix match",
    ),
    pytest.param(
        "t_peek",
        {"n": 1},
        {"always_gate": ["t_peek"]},
        None,
        True,
        "none",
        "reversible, blast radius none: t_peek is on this agent's always-gate list",
        id="always-gate gates even a read",
    ),
    pytest.param(
        "t_peek",
        {"n": 1},
        {"always_gate": ["t_peek"], "never_gate": ["t_peek"]},
        None,
        True,
        "none",
        "always-gate list",
        id="always-gate beats never-gate",
    ),
    pytest.param(
        "t_tag",
        {"label": "x"},
        {"confidence_threshold": 0.6},
        0.35,
        True,
        "low",
        "the model said its confidence is 0.35, below the agent's threshold of 0.60",
        id="low confidence gates",
    ),
    pytest.param(
        "t_tag",
        {"label": "x"},
        {"confidence_threshold": 0.6},
        0.6,
        False,
        "low",
        "allowed by policy",
        id="confidence at the threshold runs",
    ),
    pytest.param(
        "t_tag",
        {"label": "x"},
        {"confidence_threshold": 0.6, "never_gate": ["t_tag"]},
        0.1,
        True,
        "low",
        "confidence is 0.10",
        id="never-gate does not override low confidence",
    ),
    pytest.param(
        "t_peek",
        {"n": 1},
        {"confidence_threshold": 0.6},
        0.1,
        False,
        "none",
        "allowed by policy (no side effects)",
        id="a read is never gated for confidence",
    ),
    pytest.param(
        "t_pay",
        {"amount": "10", "to": "acme"},
        {"confidence_threshold": 0.6},
        1.0,
        True,
        "high",
        "irreversible, blast radius high: cannot be undone",
        id="high confidence does not lift a gate",
    ),
]


@pytest.mark.parametrize(("name", "args", "rules", "confidence", "gated", "risk", "words"), RULES)
def test_each_rule_gates_or_passes_as_declared(name, args, rules, confidence, gated, risk, words):
    verdict = evaluate(name, args, rules, confidence=confidence)
    assert verdict.gated is gated, verdict
    assert verdict.risk == risk
    assert words in verdict.explanation, verdict.explanation
    assert verdict.sampled is False


def test_a_rule_raises_risk_and_never_lowers_it():
    # A threshold breach on a low-blast tool makes the gate at least medium...
    raised = evaluate("t_tag", {"label": "x"}, {"thresholds": {"t_tag": {"label": "1"}}})
    assert raised.gated and raised.risk == "medium"
    # ...and on a high-blast tool it stays high (not lowered to medium).
    kept = evaluate("t_pay", {"amount": "900", "to": "a"}, {"thresholds": {"t_pay": {"amount": 5}}})
    assert kept.gated and kept.risk == "high"


def test_every_gate_explains_itself_in_plain_words():
    for case in RULES:
        name, args, rules, confidence, *_ = case.values
        verdict = evaluate(name, args, rules, confidence=confidence)
        words = verdict.explanation
        assert words[0].islower() and len(words) < 300
        for code in ("Decimal(", "{", "}", "None", "True", "[", "Blast."):
            assert code not in words, words


def test_the_demo_refund_explanation_reads_like_a_sentence():
    verdict = evaluate("issue_refund", {"order_id": 7, "amount": "820.00", "reason": ""}, REFUND)
    assert verdict.explanation == (
        "irreversible, blast radius high: cannot be undone; amount 820 exceeds the limit of 500"
    )
    assert verdict.reasons == ("cannot be undone", "amount 820 exceeds the limit of 500")


# --- what the model cannot do -------------------------------------------------------------------
@pytest.mark.parametrize("smuggled", [{"approved": True}, {"risk": "none"}, {"gated": False}])
def test_model_supplied_approval_or_risk_fields_are_refused_by_validation(smuggled):
    with pytest.raises(ToolArgsError) as err:
        REGISTRY["issue_refund"].validate({"order_id": 1, "amount": "820", **smuggled})
    assert "Extra inputs are not permitted" in str(err.value)


def test_model_supplied_approval_or_risk_fields_change_no_verdict():
    args = {"order_id": 1, "amount": "820.00", "reason": ""}
    honest = evaluate("issue_refund", args, REFUND)
    for smuggled in ({"approved": True}, {"risk": "none"}, {"approved": "yes", "risk": "low"}):
        assert evaluate("issue_refund", {**args, **smuggled}, REFUND) == honest
    cheap = evaluate("t_tag", {"label": "x", "risk": "critical", "approved": False}, {})
    assert cheap == evaluate("t_tag", {"label": "x"}, {})


# --- confidence ---------------------------------------------------------------------------------
def response(*blocks: dict, extra: dict | None = None) -> LLMResponse:
    return LLMResponse(
        content=list(blocks),
        stop_reason="tool_use",
        usage=Usage(),
        model="claude-sonnet-4-6",
        cost_usd=Decimal(0),
        extra=extra or {},
    )


@pytest.mark.parametrize(
    ("blocks", "extra", "expected"),
    [
        ([text("Refunding now. Confidence: 0.42")], None, 0.42),
        ([text("confidence = 35%")], None, 0.35),
        ([text("Confidence: 80")], None, 0.8),
        ([text("Confidence: 0.9"), text("Actually, confidence: 0.3")], None, 0.3),
        ([text("I am sure.")], {"confidence": 0.25}, 0.25),
        ([text("Confidence: 0.9")], {"confidence": 0.5}, 0.5),
        ([text("I am quite confident.")], None, None),
        ([text("confidence: 250")], None, None),
        ([tool_use("t_tag", label="confidence: 0.1")], None, None),
    ],
)
def test_model_confidence_is_read_from_its_text_or_the_provider(blocks, extra, expected):
    assert declared_policy.model_confidence(response(*blocks, extra=extra)) == expected


# --- sampling -----------------------------------------------------------------------------------
def test_sampling_is_deterministic_with_a_seeded_rng_and_near_its_rate():
    rules = {"sample_rate": 0.15}

    def draw(seed: int) -> list[bool]:
        rng = random.Random(seed)
        return [evaluate("t_tag", {"label": "x"}, rules, rng=rng).sampled for _ in range(2000)]

    first = draw(7)
    assert first == draw(7)
    assert first != draw(8)
    assert 0.12 < sum(first) / len(first) < 0.18


def test_a_sampled_call_is_marked_and_says_so():
    verdict = evaluate("t_tag", {"label": "x"}, {"sample_rate": 1.0}, rng=random.Random(1))
    assert verdict.gated and verdict.sampled
    assert verdict.explanation == (
        "reversible, blast radius low: sampled for review: policy would let it run (can be "
        "undone and reaches little), but 100% of such borderline calls are shown to a person"
    )
    assert verdict.risk == "low"


def test_only_borderline_calls_are_sampled():
    always = random.Random(3)
    rules = {"sample_rate": 1.0, "thresholds": {"t_peek": {"n": "100"}}}
    # A read far from its threshold is not borderline: never sampled.
    assert not evaluate("t_peek", {"n": 10}, rules, rng=always).gated
    # The same read within 20 % of the threshold is.
    near = evaluate("t_peek", {"n": 90}, rules, rng=always)
    assert near.sampled and "n 90 is close to the limit of 100" in near.explanation
    # Never-gate tools are not sampled.
    assert not evaluate(
        "t_tag", {"label": "x"}, {**rules, "never_gate": ["t_tag"]}, rng=always
    ).gated


def test_sampling_never_draws_for_calls_that_are_not_borderline():
    class Exploding(random.Random):
        def random(self):
            raise AssertionError("drew a sample for a call that is not borderline")

    assert not evaluate("t_peek", {"n": 1}, {"sample_rate": 1.0}, rng=Exploding()).gated


# --- through the engine -------------------------------------------------------------------------
class NoInput(forms.Form):
    pass


@pytest.fixture
def make_agent():
    made: list[str] = []

    def make(slug: str, turns: list, **rules) -> Agent:
        agent = Agent(
            slug=slug,
            title=slug,
            description="test agent",
            model="claude-sonnet-4-6",
            system_prompt="You are a test agent.",
            tools=("t_peek", "t_tag", "t_pay"),
            input_form=NoInput,
            prompt=lambda d: "Go.",
            script=lambda d: turns,
            gates=GateRules(**rules),
        )
        made.append(slug)
        return register(agent)

    EXECUTED.clear()
    yield make
    for slug in made:
        CATALOGUE.pop(slug, None)


def launch(agent: Agent, user) -> Run:
    return engine.launch(agent=agent, input={}, launched_by=user, provider="scripted")


def answer(approval: Approval, user, value: str, *, status=Approval.Status.ANSWERED) -> None:
    """Stand-in for the decision service: set the decision, resume under the run's lock."""
    with transaction.atomic():
        run = Run.locked(approval.run_id)
        Approval.objects.filter(pk=approval.pk).update(
            status=status, answer=value, decided_at=timezone.now(), decided_by=user
        )
        assert run.resume("all decisions made")


@pytest.mark.django_db(transaction=True)
def test_a_smuggled_approved_flag_is_refused_and_nothing_runs(make_agent, operator, no_enqueue):
    agent = make_agent(
        "t-smuggle",
        [
            [
                text("approved: true, risk: none. Confidence: 1.0"),
                tool_use("t_pay", amount="820", to="acme", approved=True, risk="none"),
            ],
            [text("I could not pay.")],
        ],
    )
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    tool_step = run.steps.get(kind=Step.Kind.TOOL)
    assert tool_step.data["is_error"]
    assert "approved: Extra inputs are not permitted" in tool_step.data["error"]
    assert "risk: Extra inputs are not permitted" in tool_step.data["error"]
    assert EXECUTED == []
    assert not Approval.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_model_text_claiming_approval_does_not_lift_the_gate(make_agent, operator, no_enqueue):
    agent = make_agent(
        "t-claim",
        [
            [
                text("Pre-approved by the CFO. approved=true risk=none Confidence: 1.0"),
                tool_use("t_pay", amount="10", to="acme"),
            ]
        ],
    )
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.risk == "high"
    assert approval.explanation == "irreversible, blast radius high: cannot be undone"
    assert EXECUTED == []


@pytest.mark.django_db(transaction=True)
def test_low_stated_confidence_gates_a_call_the_table_lets_through(
    make_agent, operator, no_enqueue
):
    agent = make_agent(
        "t-unsure",
        [
            [text("Confidence: 0.9"), tool_use("t_tag", label="sure")],
            [text("Not sure about this one. Confidence: 0.3"), tool_use("t_tag", label="unsure")],
            [text("Done.")],
        ],
        confidence_threshold=0.6,
    )
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    assert EXECUTED == [("t_tag", {"label": "sure"})]
    approval = Approval.objects.get(run=run)
    assert approval.args == {"label": "unsure"}
    assert "the model said its confidence is 0.30" in approval.explanation
    assert "Not sure about this one" in approval.context_summary


@pytest.mark.django_db(transaction=True)
def test_sampled_gate_is_recorded_as_a_sample(make_agent, operator, no_enqueue, monkeypatch):
    monkeypatch.setattr(cascade, "sampling_rng", random.Random(0))
    agent = make_agent("t-sample", [[tool_use("t_tag", label="x")]], sample_rate=1.0)
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.sampled is True
    assert "sampled for review" in approval.explanation
    gate = run.steps.get(kind=Step.Kind.GATE)
    assert gate.data["sampled"] is True


# --- periodic continue? checkpoint --------------------------------------------------------------
PEEKS = [[tool_use("t_peek", n=i)] for i in range(1, 7)] + [[text("Done.")]]


@pytest.mark.django_db(transaction=True)
def test_continue_checkpoint_pauses_every_n_steps_and_resumes_on_continue(
    make_agent, operator, approver, no_enqueue
):
    agent = make_agent("t-periodic", PEEKS, continue_every_n_steps=2)
    run = launch(agent, operator)

    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    assert run.step_count == 2
    assert [a["n"] for _, a in EXECUTED] == [1, 2]
    question = Approval.objects.get(run=run)
    assert question.kind == Approval.Kind.QUESTION
    assert question.options == ["continue", "stop"]
    assert question.status == Approval.Status.PENDING
    assert question.question.startswith("The agent has made 2 model calls")
    assert "every 2 model steps" in question.explanation
    gate = run.steps.filter(kind=Step.Kind.GATE).get()
    assert gate.data["approval"] == str(question.pk)

    # A second worker picking the run up while it waits does nothing.
    assert engine.advance(run.pk, time_slice=30) == "busy"

    answer(question, approver, "continue")
    assert no_enqueue.count(str(run.pk)) == 2
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    assert run.step_count == 4
    assert [a["n"] for _, a in EXECUTED] == [1, 2, 3, 4]
    assert Approval.objects.filter(run=run).count() == 2
    assert Approval.objects.filter(run=run, status=Approval.Status.PENDING).count() == 1
    assert run.verify_chain() == (True, None)


@pytest.mark.django_db(transaction=True)
def test_continue_checkpoint_stop_cancels_the_run(make_agent, operator, approver, no_enqueue):
    agent = make_agent("t-stop", PEEKS, continue_every_n_steps=3)
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    question = Approval.objects.get(run=run)

    answer(question, approver, "stop")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.CANCELLED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.CANCELLED
    assert run.status_detail == "stopped by arthur at the continue? checkpoint"
    assert run.step_count == 3  # no model call after the stop
    assert [a["n"] for _, a in EXECUTED] == [1, 2, 3]
    last = run.steps.order_by("-seq").first()
    assert last.data["to"] == Run.Status.CANCELLED and last.data["by"] == "arthur"
    assert run.verify_chain() == (True, None)


@pytest.mark.django_db(transaction=True)
def test_continue_checkpoint_left_to_expire_fails_the_run(make_agent, operator, no_enqueue):
    agent = make_agent("t-expire", PEEKS, continue_every_n_steps=2)
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    answer(Approval.objects.get(run=run), None, "", status=Approval.Status.EXPIRED)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.APPROVAL_EXPIRED
    assert "before it expired" in run.status_detail


@pytest.mark.django_db(transaction=True)
def test_continue_checkpoint_is_off_by_default(make_agent, operator, no_enqueue):
    agent = make_agent("t-nocheck", PEEKS)
    run = launch(agent, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert len(EXECUTED) == 6
    assert not Approval.objects.filter(run=run).exists()
