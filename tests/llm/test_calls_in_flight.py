"""Model calls in flight (runs/engine/in_flight.py): a worker's thread lets go of a run while
its model call is awaited on the process's event loop, through the real SDK's asynchronous
client and a real HTTP round trip to the fake Messages API; the answer is recorded and the
run carried on in another thread, with the engine's retries, cancellation and leases."""

import time

import pytest
from django.conf import settings
from django.utils import timezone
from prometheus_client import REGISTRY

from agentkit import tracing
from agentkit.llm.anthropic import AnthropicProvider
from runs import engine
from runs.engine import in_flight
from runs.engine.loop import IN_FLIGHT
from runs.models import Run, Step
from tests.conftest import on_postgres
from tests.runs.worker_processes import celery_worker, stop
from tests.support.fake_messages_api import (
    FakeMessagesServer,
    bad_request,
    hang,
    rate_limited,
    reply,
    text,
    tool_use,
)

from .conftest import API_KEY
from .test_anthropic import launch_analyst as launch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def open_loop():
    """Each test starts with no call in flight and a loop that takes calls (release_all
    closes it for the process)."""
    in_flight.reopen()
    yield
    finished_by(time.monotonic() + 10, lambda: in_flight.in_flight() == 0)
    in_flight.reopen()


def finished_by(deadline: float, done) -> bool:
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.02)
    return done()


def statuses(runs: list[Run]) -> list[str]:
    return [Run.objects.get(pk=r.pk).status for r in runs]


def test_one_thread_keeps_many_calls_in_flight_and_every_run_finishes(no_enqueue, fake_api):
    fake_api.latency = 0.5

    def turn(body: dict):
        answered = any(m["role"] == "assistant" for m in body["messages"])
        return reply([text("Three tables.")] if answered else [tool_use("list_tables")])

    fake_api.push(*[turn] * 24)
    runs = [launch() for _ in range(12)]

    started = time.monotonic()
    advanced = [engine.advance(r.pk, calls_in_flight=True) for r in runs]
    handed_over = time.monotonic() - started

    # The thread did not wait for the model: every run is in flight, none answered yet.
    assert advanced == [IN_FLIGHT] * 12
    assert handed_over < 12 * 0.5
    assert finished_by(time.monotonic() + 30, lambda: all(s == "succeeded" for s in statuses(runs)))
    # All twelve first calls were waiting at the fake at the same time.
    assert fake_api.max_in_flight >= 10
    for run in runs:
        kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))
        # The tool call the first answer asked for ran inline, the second call went in
        # flight from the thread that recorded the first: the whole run without a worker.
        assert kinds.count(Step.Kind.LLM) == 2 and Step.Kind.TOOL in kinds
        run.refresh_from_db()
        assert run.lease_owner == "" and run.output
    assert len(fake_api.messages_requests()) == 24
    # Each sent to a worker once, at launch: never handed back to the queue on the way.
    assert sorted(no_enqueue) == sorted(str(r.pk) for r in runs)


def test_the_run_keeps_its_lease_while_its_call_is_in_flight(no_enqueue, fake_api, settings):
    fake_api.latency = 0.6
    run = launch()
    before = REGISTRY.get_sample_value("agentops_model_calls_in_flight")

    assert engine.advance(run.pk, calls_in_flight=True, worker="w1") == IN_FLIGHT

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.lease_owner == "w1"
    # As long as a call may take (LLM_TIMEOUT_SECONDS), so the sweep leaves it alone.
    timeout = settings.AGENTOPS["LLM_TIMEOUT_SECONDS"]
    assert (run.lease_expires_at - timezone.now()).total_seconds() >= timeout * 0.9
    assert in_flight.in_flight() == 1
    assert REGISTRY.get_sample_value("agentops_model_calls_in_flight") == before + 1
    # Another worker's claim finds it held.
    assert engine.advance(run.pk, calls_in_flight=True, worker="w2") == "busy"
    assert finished_by(time.monotonic() + 20, lambda: statuses([run]) == ["succeeded"])
    assert finished_by(time.monotonic() + 5, lambda: in_flight.in_flight() == 0)
    assert REGISTRY.get_sample_value("agentops_model_calls_in_flight") == before


def test_a_failed_attempt_is_a_step_and_the_call_is_made_again_in_flight(no_enqueue, fake_api):
    fake_api.push(
        rate_limited(retry_after=0.2), reply([tool_use("list_tables")]), reply([text("Done.")])
    )
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT

    assert finished_by(time.monotonic() + 20, lambda: statuses([run]) == ["succeeded"])
    [error] = run.steps.filter(kind=Step.Kind.LLM_ERROR)
    assert error.data["status"] == 429 and error.data["will_retry"]
    first, second = fake_api.messages_requests()[:2]
    assert second.received_at - first.received_at >= 0.2  # the backoff, awaited
    run.refresh_from_db()
    assert run.retry_count == 1 and run.output == "Done."


def test_a_refused_request_ends_the_run_with_no_call_left_in_flight(no_enqueue, fake_api):
    fake_api.push(bad_request("max_tokens: too large"))
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT

    assert finished_by(time.monotonic() + 20, lambda: statuses([run]) == ["failed"])
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert "max_tokens: too large" in run.status_detail and not run.lease_owner
    assert finished_by(time.monotonic() + 5, lambda: in_flight.in_flight() == 0)


def test_an_answer_arriving_after_a_cancel_is_discarded_but_charged(no_enqueue, fake_api):
    fake_api.latency = 0.8
    fake_api.push(reply([tool_use("list_tables")], usage={"input_tokens": 1000}))
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT
    assert Run.objects.get(pk=run.pk).cancel(reason="operator clicked cancel")

    assert finished_by(time.monotonic() + 20, lambda: in_flight.in_flight() == 0)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert not run.steps.filter(kind__in=[Step.Kind.LLM, Step.Kind.TOOL]).exists()
    assert run.cost_usd > 0 and run.tokens_in == 1000  # paid for all the same


def test_past_the_limit_a_call_waits_in_its_thread(no_enqueue, fake_api, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MODEL_CALLS_IN_FLIGHT": 1}
    fake_api.latency = 0.3
    first, second = launch(), launch()

    assert engine.advance(first.pk, calls_in_flight=True, time_slice=30) == IN_FLIGHT
    # The loop is full: this thread makes the second run's calls itself, to the end.
    assert engine.advance(second.pk, calls_in_flight=True, time_slice=30) == "succeeded"
    assert finished_by(time.monotonic() + 20, lambda: statuses([first]) == ["succeeded"])


def test_a_provider_s_bug_in_flight_is_a_crash_recorded_and_retried(
    no_enqueue, fake_api, monkeypatch
):
    async def broken(self, request):
        raise RuntimeError("the provider's own bug")

    monkeypatch.setattr(AnthropicProvider, "acomplete", broken)
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT

    assert finished_by(time.monotonic() + 10, lambda: in_flight.in_flight() == 0)
    run.refresh_from_db()
    # lease.on_crash, as for a thread's crash: an error step, the run queued again.
    last = run.steps.order_by("-seq").first()
    assert last.data["event"] == "error" and "the provider's own bug" in last.data["detail"]
    assert run.status == Run.Status.QUEUED and not run.lease_owner
    assert no_enqueue == [str(run.pk)] * 2  # at launch, and again after the crash


def test_a_worker_shutting_down_hands_back_the_runs_whose_calls_wait(no_enqueue, fake_api):
    fake_api.push(hang(), hang())
    runs = [launch(), launch()]
    for run in runs:
        assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT
    assert finished_by(time.monotonic() + 5, lambda: fake_api.in_flight == 2)

    assert in_flight.release_all() == 2

    assert statuses(runs) == [Run.Status.QUEUED] * 2
    assert sorted(no_enqueue) == sorted(str(r.pk) for r in runs for _ in "ab")  # launch, back
    for run in runs:
        run.refresh_from_db()
        assert not run.lease_owner and run.lease_expires_at is None
        assert not run.steps.filter(kind=Step.Kind.LLM).exists()
    # Closing, it takes no new call: the next one waits in its thread.
    assert engine.advance(launch().pk, calls_in_flight=True, time_slice=0.01) != IN_FLIGHT


@on_postgres
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a broker other processes see)")
def test_a_celery_worker_of_two_threads_keeps_many_calls_in_flight_and_hands_them_back():
    from agentops.celery import app

    app.control.purge()
    with FakeMessagesServer(latency=1.0, hang_seconds=60) as server:
        env = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": server.base_url}
        worker = celery_worker("in-flight", concurrency=2, **env)
        try:
            runs = [launch() for _ in range(12)]  # sent to the worker on commit
            deadline = time.monotonic() + 60
            assert finished_by(deadline, lambda: all(s == "succeeded" for s in statuses(runs)))
            # Two threads, twelve runs waiting on the model together.
            assert server.max_in_flight >= 10

            # Shutting down with calls waiting: their runs go back to the queue at once.
            server.push(hang(), hang())
            waiting = [launch(), launch()]
            assert finished_by(time.monotonic() + 30, lambda: server.in_flight == 2)
            stop(worker)
            assert worker.returncode == 0, worker.stderr.read()[-3000:]
        finally:
            stop(worker)
    for run in waiting:
        run.refresh_from_db()
        # Handed back to the queue, not left running under a lease of a process gone; the
        # worker may take a run handed back once more before it stops consuming (its call is
        # then made in a thread, which its warm shutdown waits for).
        assert run.status in (Run.Status.QUEUED, Run.Status.SUCCEEDED) and not run.lease_owner
    app.control.purge()  # their messages would only wait for the next test's worker


def test_a_call_in_flight_is_a_chat_span_under_its_step(traces, no_enqueue, fake_api):
    fake_api.push(reply([tool_use("list_tables")]), reply([text("Three tables.")]))
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT
    assert finished_by(time.monotonic() + 20, lambda: statuses([run]) == ["succeeded"])

    spans = traces.get_finished_spans()
    steps = {s.context.span_id for s in spans if s.name == "agentops.step"}
    chats = [s for s in spans if s.name.startswith("chat ")]
    # Both awaited on the loop's thread, each the child of the step that asked (the second
    # asked by the thread that recorded the first answer), in the run's trace.
    assert len(chats) == 2
    assert all(c.parent is not None and c.parent.span_id in steps for c in chats)
    assert {c.context.trace_id for c in chats} == {tracing.parse(run.traceparent).trace_id}
    assert [c.attributes["gen_ai.response.finish_reasons"][0] for c in chats] == [
        "tool_use",
        "end_turn",
    ]


def test_the_tools_an_answer_asks_for_are_spans_of_a_step_of_the_run(traces, no_enqueue, fake_api):
    """The answer is recorded on a pool thread (run_in_executor carries no context): the
    calls it asks for, alone and two at once (parallel.py), are still under a step of the
    run, and the chat span names the answer by its message id, with its cache counts."""
    fake_api.push(
        reply([tool_use("list_tables")], usage={"cache_read_input_tokens": 900}),
        reply(
            [
                tool_use("describe_table", table="orders"),
                tool_use("run_query", sql="SELECT COUNT(*) FROM orders"),
            ]
        ),
        reply([text("Three tables.")]),
    )
    run = launch()

    assert engine.advance(run.pk, calls_in_flight=True) == IN_FLIGHT
    assert finished_by(time.monotonic() + 30, lambda: statuses([run]) == ["succeeded"])

    spans = traces.get_finished_spans()
    run_span_id = tracing.parse(Run.objects.get(pk=run.pk).traceparent).span_id
    steps = {s.context.span_id: s for s in spans if s.name == "agentops.step"}
    assert all(s.parent.span_id == run_span_id for s in steps.values())
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert sorted(s.attributes["gen_ai.tool.name"] for s in tools) == [
        "describe_table",
        "list_tables",
        "run_query",
    ]
    for span in tools:
        assert span.parent is not None and span.parent.span_id in steps, span.name
    # The two asked together ran on threads of their own, under the same step.
    together = [s for s in tools if s.attributes["gen_ai.tool.name"] != "list_tables"]
    assert together[0].parent.span_id == together[1].parent.span_id

    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    ids = [c.attributes["gen_ai.response.id"] for c in chats]
    assert all(i.startswith("msg_") for i in ids) and len(set(ids)) == 3
    assert chats[0].attributes["gen_ai.usage.cache_read.input_tokens"] == 900
    assert chats[0].attributes["gen_ai.usage.cache_creation.input_tokens"] == 0
    assert chats[0].attributes["gen_ai.usage.input_tokens"] >= 900
    assert chats[0].attributes["agentops.llm.request_id"] != ids[0]
