"""Summarised context: past an agent's budget, the oldest turns become a summary step (a model
call with its cost), the conversation is rebuilt from the timeline with it, and a replay goes
through it the same way."""

import dataclasses
from decimal import Decimal

import pytest
from django.urls import reverse

from agentkit.agents import register
from agentkit.llm import LLMTransientError
from agentkit.llm.scripted import text, tool_use
from approvals.models import Approval
from history.replay import replay
from runs import engine
from runs.engine import terminator
from runs.engine.conversation import SUMMARY_MARK
from runs.models import Run, Step, canonical_json
from tests.demo.test_demo_flows import launch_default

from ..harness import AGENT, CALLS, drive, tamper, tool_steps
from .test_engine import _assert_tool_pairs_intact
from .test_terminator import decide

pytestmark = pytest.mark.django_db

BUDGET = 1500


@pytest.fixture
def summarising(test_agent, no_enqueue):
    """The test agent with a small context budget that it summarises past."""
    agent = register(
        dataclasses.replace(test_agent, context_budget_tokens=BUDGET, summarise_context=True)
    )

    def make(task: str = "Echo the words, one per turn.") -> Run:
        return engine.launch(agent=agent, input={"task": task, "script": ""}, provider="scripted")

    return make


def echo_turns(n: int) -> list:
    return [[text(f"word {i}"), tool_use("t_big", n=i, size=900)] for i in range(n)] + [
        [text("finished")]
    ]


def agent_requests(provider) -> list:
    return [r for r in provider.requests if r.metadata.get("purpose") != "summary"]


def summaries(run: Run) -> list[Step]:
    return list(run.steps.filter(kind=Step.Kind.SUMMARY).order_by("seq"))


def test_older_turns_become_a_summary_step_whose_cost_counts(summarising, script):
    script(echo_turns(8))
    run = summarising()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    # The agent's turns did not shift: every echo ran, and the run ended with its answer.
    assert [d["args"]["n"] for d in tool_steps(run, "t_big")] == list(range(8))
    assert run.output == "finished"
    assert run.step_count == 9  # model turns only; the summary is not one

    (summary,) = summaries(run)[:1]
    data = summary.data
    assert data["summary"].startswith("Earlier (") and "t_big x" in data["summary"]
    assert data["covers"]["messages"] % 2 == 0 and data["covers"]["messages"] >= 4
    assert data["covers"]["from_seq"] == 2 and data["covers"]["to_seq"] < summary.seq
    assert summary.cost_usd > 0 and summary.tokens_in > 0 and summary.tokens_out > 0
    # The run's counters take the summaries in, next to the model turns.
    steps = run.steps.filter(kind__in=[Step.Kind.LLM, Step.Kind.SUMMARY])
    assert run.cost_usd == sum(s.cost_usd for s in steps)
    assert run.tokens_in == sum(s.tokens_in for s in steps)
    # The timeline keeps every turn in full.
    assert all(len(d["result"]) > 900 for d in tool_steps(run, "t_big"))


def test_the_model_is_sent_the_goal_and_the_summary_then_the_later_turns(summarising, script):
    provider = script(echo_turns(8))
    run = summarising()
    drive(run)
    first = summaries(run)[0]
    after = [r for r in agent_requests(provider) if SUMMARY_MARK in str(r.messages[0])]
    assert after, "no request went out with a summary"
    sent = after[0].messages
    head = sent[0]["content"]
    assert head[0] == {"type": "text", "text": "Echo the words, one per turn."}  # verbatim
    assert head[1]["text"].startswith(SUMMARY_MARK)
    assert first.data["summary"] in head[1]["text"]
    assert sent[1]["role"] == "assistant"
    _assert_tool_pairs_intact(sent)
    # Under the budget now, so nothing was trimmed as well.
    assert "left out" not in str(sent[0])
    # The conversation rebuilt from the timeline is exactly what the model was last sent.
    rebuilt = engine.conversation(run)
    assert rebuilt[:-1] == agent_requests(provider)[-1].messages
    # ... and up to the summary's next model step, what it was sent then.
    next_llm = run.steps.filter(kind=Step.Kind.LLM, seq__gt=first.seq).order_by("seq").first()
    assert engine.conversation(run, upto_seq=next_llm.seq - 1) == sent


def test_a_second_summary_covers_the_first(summarising, script):
    provider = script(echo_turns(14))
    run = summarising()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    first, second, *_ = summaries(run)
    last = agent_requests(provider)[-1].messages
    blocks = [b for b in last[0]["content"] if b["text"].startswith(SUMMARY_MARK)]
    assert len(blocks) == 1  # the newer summary replaced the older one
    summary_requests = [r for r in provider.requests if r.metadata.get("purpose") == "summary"]
    # The second summary read the first (in the goal's message) and the turns after it.
    assert first.data["summary"] in summary_requests[1].messages[0]["content"]
    assert second.data["covers"]["to_seq"] > first.data["covers"]["to_seq"]
    assert engine.conversation(run)[:-1] == last


def test_peoples_decisions_are_kept_verbatim(summarising, script, plain_user):
    turns = [[tool_use("t_gated", n=1)], *echo_turns(8)]
    provider = script(turns)
    run = summarising()
    drive(run)
    assert run.status == Run.Status.WAITING
    decide(run, plain_user, status=Approval.Status.REJECTED, reason="Never on a Friday, Bob.")
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    summary = summaries(run)[0]
    assert summary.data["decisions"] == [
        't_gated {"n":1}: rejected by olivia: Never on a Friday, Bob.'
    ]
    last = agent_requests(provider)[-1].messages
    assert "rejected by olivia: Never on a Friday, Bob." in last[0]["content"][1]["text"]
    assert CALLS["t_gated"] == 0


def test_a_crash_after_the_summary_resumes_from_the_timeline(summarising, script):
    crashed = []

    def crash_once_after_summary(request):
        if (
            request.metadata.get("purpose") != "summary"
            and SUMMARY_MARK in str(request.messages[0])
            and not crashed
        ):
            crashed.append(request)
            raise RuntimeError("worker died")

    provider = script(echo_turns(8), on_call=crash_once_after_summary)
    run = summarising()
    drive(run)
    run.refresh_from_db()
    if run.status == Run.Status.QUEUED:
        drive(run)
    assert crashed and run.termination_reason == Run.Termination.COMPLETED
    # The resumed run rebuilt the summarised conversation and did not summarise again.
    summarised = [r for r in agent_requests(provider) if SUMMARY_MARK in str(r.messages[0])]
    assert summarised[1].messages == summarised[0].messages == crashed[0].messages
    at = [i for i, r in enumerate(provider.requests) if r.metadata.get("purpose") != "summary"]
    at = [i for i in at if SUMMARY_MARK in str(provider.requests[i].messages[0])]
    assert at[1] == at[0] + 1  # no second summary of the same turns in between
    assert agent_requests(provider)[-1].messages == engine.conversation(run)[:-1]


def test_a_failed_summary_falls_back_to_trimming(summarising, script):
    def summary_fails(request):
        if request.metadata.get("purpose") == "summary":
            raise LLMTransientError("overloaded", status=529)

    provider = script(echo_turns(8), on_call=summary_fails)
    run = summarising()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    failed = summaries(run)
    assert failed and all(s.data["failed"] for s in failed)
    assert "overloaded" in failed[0].data["error"]
    trimmed = [s.data["trimmed_turns"] for s in run.steps.filter(kind=Step.Kind.LLM)]
    assert trimmed[-1] > 0  # today's trimming, with its note
    assert "left out" in agent_requests(provider)[-1].messages[0]["content"]
    assert engine.conversation(run)[0]["content"] == "Echo the words, one per turn."


def test_the_cost_estimate_includes_a_summary_when_one_is_due(summarising, script):
    from runs.engine import loop

    script(echo_turns(8))
    run = summarising()
    drive(run)
    run.refresh_from_db()
    run.status, run.lease_owner = Run.Status.RUNNING, "w"
    work = loop._load(run, "w")
    work.messages_chars = BUDGET * 4  # over the budget
    with_summary = terminator.estimate_next_cost(work)
    work.agent_config = {**work.agent_config, "summarise_context": False}
    assert with_summary > terminator.estimate_next_cost(work) > Decimal(0)


def test_an_agent_without_the_declaration_trims_as_before(test_agent, launch, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "CONTEXT_TOKEN_BUDGET": BUDGET}
    provider = script(echo_turns(8))
    run = launch()
    drive(run)
    assert not summaries(run)
    assert all(r.metadata.get("purpose") != "summary" for r in provider.requests)
    assert run.agent == AGENT


def test_the_demo_order_review_summarises_and_replays_identically(operator, no_enqueue):
    run = launch_default("order-review", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    (summary,) = summaries(run)
    assert "lookup_order" in summary.data["summary"] and summary.cost_usd > 0
    result = replay(run)
    assert result.identical, result.summary
    assert any(s.startswith("summary of") for s in result.replayed)


def test_the_run_page_shows_the_summary_step_escaped(client, viewer, operator, no_enqueue):
    run = launch_default("order-review", operator)
    engine.advance(run.pk, time_slice=30)
    summary = summaries(run)[0]
    # As untrusted as any model output: a summary that quotes markup stays text.
    forged = {**summary.data, "summary": "<b>x</b> ok"}
    tamper("UPDATE runs_step SET data = %s WHERE id = %s", [canonical_json(forged), summary.pk])
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f'id="step-{summary.seq}" data-seq="{summary.seq}" data-kind="summary"' in html
    assert "context summarised" in html and "8 message(s)" in html
    assert "&lt;b&gt;x&lt;/b&gt; ok" in html and "<b>x</b>" not in html


def test_too_few_turns_to_summarise_are_left_out_instead():
    from runs.engine.conversation import summary_cut

    goal = {"role": "user", "content": "goal"}
    turn = [
        {"role": "assistant", "content": [text("x" * 3000)]},
        {"role": "user", "content": [{"type": "text", "text": "y" * 3000}]},
    ]
    two_turns = [goal, *turn, *turn]
    chars = len(canonical_json(two_turns))
    # Only the first turn could go: not worth a summary call.
    assert summary_cut(two_turns, 1500, chars=chars) == 0
    three_turns = [*two_turns, *turn]
    assert summary_cut(three_turns, 1500, chars=len(canonical_json(three_turns))) == 4
