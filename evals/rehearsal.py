"""A regression run: every case of a dataset replayed against an agent version, and judged.

Each case is rehearsed like a fork (history/fork.py) of its source run at the model turn that
proposed the decided call: a run of the agent under test starts from the case's conversation
and engine state, with today's model, system prompt and tools, and the engine advances it.
While it runs, this module answers for the world through the engine's replay hook
(runs/engine/replaying.py), so nothing real happens:

- the model: the provider the regression run names (the scripted one in tests and CI without a
  key), counted for cost;
- the gates: today's gate policy is asked about each proposed call, opens nothing, and the
  first turn with a call that matters (one the policy gates, one with side effects, or a call of
  the case's tool) ends the rehearsal: those calls are the agent's proposal;
- the tools: a read-only call the agent makes on the way (a lookup) runs, inside the
  transaction; a call with side effects never runs.

Everything the engine writes is rolled back (the run, its steps, the ledger's intents); nothing
waiting for a commit (live events, the queue, notifications) happens. The proposal is then
compared with what the person wanted (`judge`).
"""

import logging
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from agentkit import llm
from agentkit.agents import Agent, get_agent, provider_for_run
from agentkit.llm.base import LLMRequest, LLMResponse, OnText
from agentkit.tools import ToolContext, ToolError, get_tool
from runs import engine
from runs.engine import gates, replaying
from runs.models import Run, Step, canonical_json

from .models import Case, CaseResult, Dataset, RegressionRun
from .versions import fingerprint, version_of

log = logging.getLogger("agentops.evals")
# Engine slices one case may take (read-only calls and model turns before the proposal).
MAX_ADVANCES = 25
PROVIDERS = ("scripted", "anthropic")


class RegressionError(ValueError):
    """Why a regression run cannot start, in words for the operator."""


class _Stop(BaseException):
    """The rehearsal is over. A BaseException: the engine's own handlers (a crashed step is
    retried) must let it through."""


@dataclass
class Proposal:
    tool: str
    args: dict
    gated: bool
    explanation: str = ""


class _CountingProvider:
    """The provider under test, with the cost of its answers and its last words kept (the
    model turn that ends a rehearsal is never written, so its step cannot tell)."""

    def __init__(self, provider):
        self.inner = provider
        self.name = provider.name
        self.cost = Decimal(0)
        self.said = ""

    def complete(self, request: LLMRequest, *, on_text: OnText | None = None) -> LLMResponse:
        response = self.inner.complete(request, on_text=on_text)
        self.cost += Decimal(str(response.cost_usd or 0))
        self.said = "\n".join(
            str(b.get("text", "")) for b in response.content if b.get("type") == "text"
        )
        return response


class _RehearsalGates:
    """The gate interface (runs/engine/gates.py) during a rehearsal: asks today's policy,
    opens nothing, stops at the first call that matters."""

    def __init__(self, rehearsal: "Rehearsal"):
        self.rehearsal = rehearsal

    def gate_for_call(self, run: Run, item: dict, tool, response: Any) -> dict | None:
        policy = gates.registered()
        real = policy.gate_for_call(run, item, tool, response) if policy else None
        if real is None and not tool.has_side_effects and tool.name != self.rehearsal.case.tool:
            return None  # a lookup on the way: it runs
        self.rehearsal.proposals.append(
            Proposal(
                tool=tool.name,
                args=item["args"],
                gated=real is not None,
                explanation=str((real or {}).get("explanation", "")),
            )
        )
        # Every call of the turn is asked before any gate opens (tool_calls.plan_calls), so
        # the whole turn's proposal is in before open_gate ends the rehearsal.
        return real or {"kind": "action", "tool": tool.name, "explanation": "regression"}

    def open_gate(self, run: Run, item: dict, gate: dict) -> str:
        raise _Stop("the agent proposed a call that matters")

    def open_outcome_question(self, run, item, tool, effect) -> str:
        raise _Stop("a call's outcome is unknown")

    def open_verification_question(self, run: Run, failed: dict) -> str:
        raise _Stop(f"the agent's answer failed verification: {failed.get('reason', '')}")

    def pending_count(self, run: Run) -> int:
        return 0

    def decisions(self, ids: list[str]) -> dict[str, gates.Decision]:
        return {}

    def continue_due(self, run: Run) -> bool:
        return False

    def continue_answer(self, run: Run):
        return None

    def open_continue_question(self, run: Run) -> None:
        raise _Stop("a 'continue?' checkpoint")

    def budget_answer(self, run: Run, key: str):
        # A budget is about real spending; a rehearsal is not held back by it.
        return gates.ContinueAnswer(outcome=gates.CONTINUE)

    def open_budget_question(self, run: Run, key: str, question: str, explanation: str) -> None:
        raise _Stop("the agent's budget is spent")

    def budget_crossed(self, run: Run, crossing_id: int) -> None:
        pass


class Rehearsal:
    """One case's rehearsal: the replay hook's `Recording` (runs/engine/replaying.py)."""

    def __init__(self, case: Case, provider):
        self.case = case
        self.provider = _CountingProvider(provider)
        self.gates = _RehearsalGates(self)
        self.proposals: list[Proposal] = []
        self.ended = ""
        # The verifier's checks of the final answers, in order: (passed, reason).
        self.checks: list[tuple[bool, str]] = []

    def tool_result(self, tool: str, args: dict) -> tuple[Any, str | None]:
        found = get_tool(tool)
        if found is None or found.has_side_effects:
            return None, "regression run: a call with side effects is not made"
        ctx = ToolContext(
            run_id="regression",
            idempotency_key="",
            deadline=time.monotonic() + found.timeout_seconds,
        )
        try:
            return found.call(args, ctx), None
        except ToolError as exc:
            return None, str(exc)
        except Exception as exc:  # the tool's failure is the agent's to see, as in a run
            return None, f"{type(exc).__name__}: {exc}"


class _RollBack(Exception):
    pass


def rehearse(case: Case, agent: Agent, provider_name: str, input: dict) -> tuple[Rehearsal, str]:
    """Replay `case` against `agent` (`input`: the case's, validated by it): (the rehearsal,
    with its proposals, and how the run ended). Writes nothing that stays."""
    stand_in = Run(agent=agent.slug, input=input, provider=provider_name)
    rehearsal = Rehearsal(case, provider_for_run(stand_in))
    ended = ""
    try:
        with transaction.atomic():
            copy = engine.launch(
                agent=agent,
                input=input,
                trigger=Run.Trigger.REPLAY,
                provider=provider_name,
                source=f"regression case {case.pk}",
                fork=engine.ForkPoint(
                    origin=str(case.source_run_id or ""),
                    seq=0,
                    messages=case.context,
                    state=case.state,
                ),
            )
            with replaying.replaying(rehearsal):
                for _ in range(MAX_ADVANCES):
                    savepoint = transaction.savepoint()
                    try:
                        engine.advance(copy.pk, time_slice=3600)
                    except _Stop as exc:
                        ended = str(exc)
                        break
                    except DatabaseError as exc:
                        transaction.savepoint_rollback(savepoint)
                        ended = f"the rehearsal's write failed: {exc}"
                        break
                    transaction.savepoint_commit(savepoint)
                    copy.refresh_from_db()
                    if copy.status != Run.Status.QUEUED:
                        ended = f"the run ended {copy.status} ({copy.termination_reason})"
                        break
                else:
                    ended = f"no proposal after {MAX_ADVANCES} engine steps"
            rehearsal.checks = [
                (data.get("passed", False), data.get("reason", ""))
                for data in copy.steps.filter(kind=Step.Kind.VERIFY)
                .exclude(data__has_key="after")
                .order_by("seq")
                .values_list("data", flat=True)
            ]
            raise _RollBack
    except _RollBack:
        pass
    return rehearsal, ended


# --- judging ----------------------------------------------------------------------------------
def _same(a: dict, b: dict) -> bool:
    return canonical_json(a) == canonical_json(b)


def args_diff(expected: dict, proposed: dict) -> list[dict]:
    """The arguments that differ, one row each: field, expected value, proposed value."""
    rows = []
    for name in sorted(set(expected) | set(proposed)):
        want, got = expected.get(name), proposed.get(name)
        if canonical_json(want) != canonical_json(got):
            rows.append({"field": name, "expected": want, "proposed": got})
    return rows


@dataclass
class Judgement:
    outcome: str
    proposal: Proposal | None
    diff: list[dict] = field(default_factory=list)
    detail: str = ""


def judge(
    case: Case, proposals: list[Proposal], ended: str = "", checks: list | None = None
) -> Judgement:
    """Whether the agent now proposes what the person wanted. Approved or edited: a call of
    the case's tool with the expected arguments is among the proposed; rejected: the rejected
    call (tool and arguments) is not; a verifier's case: its first answer passes the verifier
    (`checks`, in order)."""
    if case.verdict == Case.Verdict.VERIFIER_FAILED:
        return _judge_answer(case, proposals, ended, checks or [])
    same_tool = [p for p in proposals if p.tool == case.tool]
    closest = same_tool[0] if same_tool else (proposals[0] if proposals else None)
    if case.verdict == Case.Verdict.REJECTED:
        repeated = next((p for p in same_tool if _same(p.args, case.proposed_args)), None)
        if repeated is not None:
            why = f" ({case.reason})" if case.reason else ""
            return Judgement(
                CaseResult.Outcome.FAIL,
                repeated,
                detail=f"proposes again the call the approver rejected{why}",
            )
        diff = args_diff(case.proposed_args, closest.args) if same_tool else []
        if closest is None:
            detail = f"no longer proposes the rejected call: {ended or 'no call'}"
        else:
            detail = f"no longer proposes the rejected call; proposes {closest.tool}"
        return Judgement(CaseResult.Outcome.PASS, closest, diff, detail)
    match = next((p for p in same_tool if _same(p.args, case.expected_args)), None)
    if match is not None:
        return Judgement(CaseResult.Outcome.PASS, match, detail="proposes the expected call")
    if closest is None:
        return Judgement(
            CaseResult.Outcome.FAIL, None, detail=f"proposes no call: {ended or 'it answered'}"
        )
    if not same_tool:
        return Judgement(
            CaseResult.Outcome.FAIL,
            closest,
            [{"field": "tool", "expected": case.tool, "proposed": closest.tool}],
            f"proposes {closest.tool} instead of {case.tool}",
        )
    diff = args_diff(case.expected_args, closest.args)
    wanted = "the approver's edited arguments" if case.verdict == Case.Verdict.EDITED else "them"
    return Judgement(
        CaseResult.Outcome.FAIL,
        closest,
        diff,
        f"proposes {case.tool} with other arguments than {wanted}",
    )


def _judge_answer(case: Case, proposals: list[Proposal], ended: str, checks: list) -> Judgement:
    proposal = proposals[0] if proposals else None
    if not checks:
        what = f"proposes {proposal.tool}" if proposal else (ended or "no answer")
        return Judgement(
            CaseResult.Outcome.FAIL, proposal, detail=f"gives no answer to check: {what}"
        )
    passed, reason = checks[0]
    if passed:
        return Judgement(
            CaseResult.Outcome.PASS, proposal, detail=f"its answer now passes {case.tool}"
        )
    return Judgement(
        CaseResult.Outcome.FAIL, proposal, detail=f"its answer fails {case.tool} again: {reason}"
    )


# --- the regression run -----------------------------------------------------------------------
def prepare(
    dataset: Dataset, agent_slug: str = "", *, provider: str = "", by=None
) -> RegressionRun:
    """A regression run of `dataset` against the current version of `agent_slug` (the
    dataset's agent when empty), recorded and not yet run; RegressionError when it cannot
    run."""
    slug = agent_slug or dataset.agent
    agent = get_agent(slug)
    if agent is None:
        raise RegressionError(f"no agent {slug!r} in this installation's catalogue")
    provider = provider or llm.default_provider_name()
    if provider not in PROVIDERS:
        raise RegressionError(f"unknown provider {provider!r}: one of {', '.join(PROVIDERS)}")
    if not dataset.cases.exists():
        raise RegressionError(f"dataset {dataset.name} has no cases")
    version = version_of(agent)
    return RegressionRun.objects.create(
        dataset=dataset,
        agent=slug,
        provider=provider,
        version=version,
        fingerprint=fingerprint(version),
        started_by=by,
    )


def execute(regression: RegressionRun) -> RegressionRun:
    """Replay every case and record the results, once: a finished run is left as it is (a
    task delivered twice). A failure of the run itself (not of a case) is recorded on it."""
    if regression.finished_at is not None:
        return regression
    agent = get_agent(regression.agent)
    try:
        if agent is None:
            raise RegressionError(f"agent {regression.agent!r} left the catalogue")
        cases = list(regression.dataset.cases.all())
        results = [_result(regression, case, agent, regression.provider) for case in cases]
    except Exception as exc:
        log.exception("regression run %s failed", regression.pk)
        regression.error = f"{type(exc).__name__}: {exc}"[:2000]
        regression.finished_at = timezone.now()
        regression.save(update_fields=["error", "finished_at"])
        return regression
    with transaction.atomic():
        CaseResult.objects.bulk_create(results)
        regression.cases = len(results)
        regression.passed = sum(1 for r in results if r.passed)
        regression.cost_usd = sum((r.cost_usd for r in results), Decimal(0))
        regression.finished_at = timezone.now()
        regression.save(update_fields=["cases", "passed", "cost_usd", "finished_at"])
    return regression


def start(dataset: Dataset, agent_slug: str = "", *, provider: str = "", by=None) -> RegressionRun:
    """Prepare and execute at once (the command line, CI)."""
    return execute(prepare(dataset, agent_slug, provider=provider, by=by))


def _result(regression: RegressionRun, case: Case, agent: Agent, provider: str) -> CaseResult:
    result = CaseResult(regression_run=regression, case=case)
    cleaned, errors = agent.validate_input(case.input)
    if errors:
        result.outcome = CaseResult.Outcome.ERROR
        result.detail = f"the case's input is not valid for {agent.slug}: {errors}"
        return result
    try:
        rehearsal, ended = rehearse(case, agent, provider, cleaned)
    except Exception as exc:  # one case's failure (the model's, say) is that case's result
        log.exception("regression run %s: case %s failed", regression.pk, case.pk)
        result.outcome = CaseResult.Outcome.ERROR
        result.detail = f"the case could not be replayed: {type(exc).__name__}: {exc}"[:2000]
        return result
    verdict = judge(case, rehearsal.proposals, ended, rehearsal.checks)
    result.outcome = verdict.outcome
    result.diff = verdict.diff
    result.detail = verdict.detail[:2000]
    result.said = rehearsal.provider.said[:4000]
    result.cost_usd = rehearsal.provider.cost
    if verdict.proposal is not None:
        result.proposed_tool = verdict.proposal.tool
        result.proposed_args = verdict.proposal.args
    return result
