"""Which model answers: the agent's fallback when its model is overloaded or keeps failing
(runs/engine/model.py), a cheaper model for summaries and verifiers (Agent.step_models), and
each step saying which model it was."""

import dataclasses
import time
from decimal import Decimal

import pytest

from agentkit.agents import register
from agentkit.llm import LLMError, LLMTransientError, Usage, pricing
from agentkit.llm.scripted import text, tool_use
from agentkit.verification import Verifier
from runs import engine
from runs.engine import retry, terminator
from runs.engine.owned import Work
from runs.models import Run, Step
from runs.rendering import step_view

from ..harness import drive

pytestmark = pytest.mark.django_db

PRIMARY, FALLBACK, CHEAP = "claude-sonnet-4-6", "claude-opus-4-5", "claude-haiku-4-5"


@pytest.fixture
def routed(test_agent, no_enqueue):
    """The test agent with a fallback model, launched with any other changes given."""

    def make(**changes) -> Run:
        agent = register(dataclasses.replace(test_agent, fallback_model=FALLBACK, **changes))
        return engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")

    return make


@pytest.fixture
def sleeps(monkeypatch) -> list[int]:
    """The backoffs the engine asked for (attempt numbers)."""
    asked: list[int] = []
    real = retry.backoff

    def backoff(attempt, **kwargs):
        asked.append(attempt)
        return real(attempt, **kwargs)

    monkeypatch.setattr(retry, "backoff", backoff)
    return asked


def overloaded() -> LLMTransientError:
    return LLMTransientError("Anthropic API 529 overloaded_error: Overloaded", status=529)


def models(run: Run, kind: str = Step.Kind.LLM) -> list[str]:
    return [s.data["model"] for s in run.steps.filter(kind=kind).order_by("seq")]


def test_an_overloaded_model_hands_the_call_to_the_fallback_at_once(
    routed, script, sleeps, settings
):
    # No cooldown: each call asks the agent's model again.
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_FALLBACK_COOLDOWN_SECONDS": 0}
    provider = script(
        [[text("Echo."), tool_use("t_echo", text="a")], [text("Done.")]], errors=[overloaded()]
    )
    run = routed()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    # The fallback answered the first turn; the next turn asked the agent's model again.
    assert [r.model for r in provider.requests] == [PRIMARY, FALLBACK, PRIMARY]
    assert sleeps == []  # no backoff before another model
    assert models(run) == [FALLBACK, PRIMARY]
    first, second = run.steps.filter(kind=Step.Kind.LLM).order_by("seq")
    assert first.data["fallback_from"] == PRIMARY and "fallback_from" not in second.data
    [error] = run.steps.filter(kind=Step.Kind.LLM_ERROR)
    assert error.data["model"] == PRIMARY and error.data["fallback_to"] == FALLBACK
    assert error.data["will_retry"] is True
    # Priced as the model that answered.
    assert first.cost_usd == pricing.cost(FALLBACK, Usage(**first.data["usage"]))
    # The timeline says so.
    assert dict(step_view(first).facts)["model"] == f"{FALLBACK} (fallback from {PRIMARY})"
    assert dict(step_view(error).facts)["then"] == f"fallback to {FALLBACK}"


def test_after_a_failover_calls_go_to_the_fallback_first_until_the_cooldown_ends(
    routed, script, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_FALLBACK_COOLDOWN_SECONDS": 0.5}
    provider = script(
        [[text("Echo."), tool_use("t_echo", text="a")], [text("Done.")]], errors=[overloaded()]
    )
    run = routed()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    # The second turn did not ask the overloaded model again: no failed attempt to pay.
    assert [r.model for r in provider.requests] == [PRIMARY, FALLBACK, FALLBACK]
    second = run.steps.filter(kind=Step.Kind.LLM).order_by("seq").last()
    assert second.data["model"] == FALLBACK and second.data["fallback_from"] == PRIMARY
    assert run.steps.filter(kind=Step.Kind.LLM_ERROR).count() == 1
    # Another run of the agent meanwhile: the fallback first too.
    provider = script([[text("Done.")]])
    other = routed()
    drive(other)
    assert [r.model for r in provider.requests] == [FALLBACK]
    # After the cooldown, the agent's model again (and it answers: the rest is over).
    time.sleep(0.6)
    provider = script([[text("Done.")]])
    later = routed()
    drive(later)
    assert [r.model for r in provider.requests] == [PRIMARY]
    assert models(later) == [PRIMARY]


def test_a_failing_model_goes_to_the_fallback_after_its_retries(routed, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_MAX_RETRIES": 2}
    down = LLMTransientError("Anthropic API 500 api_error: Internal server error", status=500)
    provider = script([[text("Answered by the fallback.")]], errors=[down, down, down])
    run = routed()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert [r.model for r in provider.requests] == [PRIMARY] * 3 + [FALLBACK]
    assert models(run) == [FALLBACK]
    assert [
        e["will_retry"] for e in run.steps.filter(kind="llm_error").values_list("data", flat=True)
    ] == [True] * 3


def test_a_refused_request_is_not_sent_to_another_model(routed, script):
    refused = LLMError("Anthropic API 400 invalid_request_error: bad", status=400)
    provider = script([[text("never")]], errors=[refused])
    run = routed()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert [r.model for r in provider.requests] == [PRIMARY]


def test_the_fallback_has_retries_of_its_own_and_then_the_run_fails(routed, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_MAX_RETRIES": 1}
    provider = script([[text("never")]], errors=[overloaded()] * 5)
    run = routed()
    drive(run)
    assert run.status == Run.Status.FAILED
    # Overloaded at once to the fallback, which is retried once, then no model is left.
    assert [r.model for r in provider.requests] == [PRIMARY, FALLBACK, FALLBACK]


def test_without_a_fallback_an_overloaded_model_is_retried(test_agent, script, no_enqueue):
    provider = script([[text("Done.")]], errors=[overloaded()])
    run = engine.launch(agent=test_agent, input={"task": "t", "script": ""}, provider="scripted")
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert [r.model for r in provider.requests] == [PRIMARY, PRIMARY]
    assert "fallback_from" not in run.steps.get(kind=Step.Kind.LLM).data


def test_summaries_use_the_agents_cheaper_model(routed, script):
    turns = [[text(f"word {i}"), tool_use("t_big", n=i, size=900)] for i in range(6)]
    provider = script([*turns, [text("finished")]])
    run = routed(context_budget_tokens=1500, summarise_context=True, step_models={"summary": CHEAP})
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    summary_calls = [r for r in provider.requests if r.metadata.get("purpose") == "summary"]
    assert summary_calls and {r.model for r in summary_calls} == {CHEAP}
    assert set(models(run, Step.Kind.SUMMARY)) == {CHEAP}
    assert set(models(run)) == {PRIMARY}


def test_a_verifier_uses_the_agents_cheaper_model_unless_it_names_its_own(routed, script):
    provider = script([[text("42")]], verifier_turns=[[text("PASS")]])
    run = routed(verifier=Verifier(prompt="Check it."), step_models={"verify": CHEAP})
    assert run.agent_config["verifier"]["model"] == CHEAP
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert [r.model for r in provider.requests] == [PRIMARY, CHEAP]
    assert models(run, Step.Kind.VERIFY) == [CHEAP]
    own = routed(
        verifier=Verifier(prompt="Check it.", model=FALLBACK), step_models={"verify": CHEAP}
    )
    assert own.agent_config["verifier"]["model"] == FALLBACK


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"step_models": {"greeting": CHEAP}}, "step_models for ['greeting']"),
        ({"fallback_model": PRIMARY}, "its fallback_model is its model"),
        ({"max_parallel_tools": 0}, "max_parallel_tools must be at least 1"),
    ],
)
def test_a_wrong_declaration_is_refused_at_registration(test_agent, changes, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        register(dataclasses.replace(test_agent, **changes))


def test_the_cost_limit_allows_for_a_dearer_fallback(routed, script):
    # Opus 4.5, the fallback here, costs 5/3 of Sonnet per token: the next call's bound says so.
    script([[text("Done.")]])
    run = routed()
    run.agent_config.pop("fallback_model")
    alone = terminator.estimate_next_cost(engine_work(run))
    with_fallback = terminator.estimate_next_cost(engine_work(routed()))
    assert alone > 0 and with_fallback > alone * Decimal("1.66")


def engine_work(run: Run) -> Work:
    return Work(
        run=run, agent_config=run.agent_config, state={}, messages=[], worker="w", provider=None
    )


def test_an_agents_prompt_cache_ttl_reaches_its_model_requests(routed, script, test_agent):
    assert "prompt_cache_ttl" not in test_agent.snapshot()  # 5 minutes: nothing to say
    provider = script([[text("Done.")]])
    drive(routed(prompt_cache_ttl="1h"))
    assert [r.metadata["cache_ttl"] for r in provider.requests] == ["1h"]
    with pytest.raises(ValueError, match="prompt_cache_ttl must be 5m or 1h"):
        register(dataclasses.replace(test_agent, prompt_cache_ttl="24h"))
