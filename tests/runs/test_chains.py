"""Chained runs: a run that succeeds launches its agent's follow-ups, once, with its output
mapped into the next input; a failed run or a mapping that goes wrong launches nothing and
the parent's timeline says why."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django import forms
from django.db import transaction
from django.urls import reverse

from agentkit.agents import CATALOGUE, Agent, FollowUp, Limits, RunResult, register
from agentkit.llm.scripted import text
from runs import chains, engine, events, live, rendering, tasks
from runs.models import Run, Step
from tests.conftest import make_user

from . import harness
from .harness import assert_timeline_sound, drive, worker_thread

pytestmark = pytest.mark.django_db

PARENT, NEXT = "chain-parent", "chain-next"


class ParentInput(forms.Form):
    answer = forms.CharField(max_length=2000)  # the model's final answer, scripted


class NextInput(forms.Form):
    order_id = forms.IntegerField(min_value=1)
    note = forms.CharField(max_length=20)


def _next_agent() -> Agent:
    return Agent(
        slug=NEXT,
        title="Chain: next",
        description="Test-only.",
        model="claude-sonnet-4-6",
        system_prompt="",
        tools=(),
        input_form=NextInput,
        prompt=lambda d: f"order {d['order_id']}: {d['note']}",
        script=lambda d: [[text(f"handled order {d['order_id']}")]],
    )


def _parent_agent(*follow_ups: FollowUp) -> Agent:
    return Agent(
        slug=PARENT,
        title="Chain: parent",
        description="Test-only.",
        model="claude-sonnet-4-6",
        system_prompt="",
        tools=(),
        input_form=ParentInput,
        prompt=lambda d: "answer",
        script=lambda d: [[text(d["answer"])]],
        follow_ups=follow_ups,
    )


def from_json(result: RunResult) -> dict:
    verdict = result.json()
    return {"order_id": verdict["order"], "note": verdict["note"]}


@pytest.fixture
def chain():
    """Register the next agent and a parent following up with `mapping` into it."""

    def make(mapping=from_json, **follow_up) -> Agent:
        register(_next_agent())
        return register(_parent_agent(FollowUp(agent=NEXT, input=mapping, **follow_up)))

    yield make
    CATALOGUE.pop(PARENT, None)
    CATALOGUE.pop(NEXT, None)


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The follow-up tasks sent to the broker (run ids), instead of sending them."""
    calls: list[str] = []
    monkeypatch.setattr("runs.queue.send_follow_ups", lambda run_id: calls.append(str(run_id)))
    return calls


def succeeded(agent: Agent, answer: str, *, launched_by=None) -> Run:
    run = engine.launch(
        agent=agent, input={"answer": answer}, launched_by=launched_by, provider="scripted"
    )
    drive(run)
    assert run.status == Run.Status.SUCCEEDED, run.status_detail
    return run


def follow_up_steps(run: Run) -> list[dict]:
    return [
        s.data
        for s in run.steps.filter(kind=Step.Kind.STATUS).order_by("seq")
        if s.data.get("event") == chains.FOLLOW_UP
    ]


# --- success ------------------------------------------------------------------------------------
def test_success_launches_the_child_with_the_mapped_input_once(chain, operator, no_enqueue):
    parent = succeeded(chain(), '{"order": 42, "note": "bent leg"}', launched_by=operator)

    written = chains.launch_follow_ups(parent.pk)
    assert chains.launch_follow_ups(parent.pk) == []  # a duplicate message, or the sweep

    child = Run.objects.get(parent=parent)
    assert child.agent == NEXT
    assert child.input == {"order_id": 42, "note": "bent leg"}
    assert child.trigger == Run.Trigger.CHAINED
    assert child.source == f"run {parent.pk}"
    assert child.launched_by == operator
    assert child.provider == parent.provider == "scripted"
    assert child.status == Run.Status.QUEUED
    launched = child.steps.get(seq=1).data
    assert (launched["trigger"], launched["source"], launched["input"]) == (
        "chained",
        f"run {parent.pk}",
        {"order_id": 42, "note": "bent leg"},
    )

    # The parent's timeline records the child, once, and its chain still verifies.
    parent.refresh_from_db()
    assert [s.seq for s in written] == [parent.last_seq]
    steps = follow_up_steps(parent)
    assert len(steps) == 1
    assert steps[0]["outcome"] == "launched" and steps[0]["child"] == str(child.pk)
    assert steps[0]["agent"] == NEXT
    assert_timeline_sound(parent)
    # The child then runs like any run.
    drive(child)
    assert (child.status, child.output) == (Run.Status.SUCCEEDED, "handled order 42")


def test_the_success_sends_the_follow_ups_once_committed(
    chain, sent, no_enqueue, django_capture_on_commit_callbacks
):
    agent = chain()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        parent = succeeded(agent, '{"order": 1, "note": "x"}')
        assert sent == []  # not from inside the engine's write
    for callback in callbacks:
        callback()
    assert sent == [str(parent.pk)]


def test_a_success_rolled_back_sends_nothing(
    chain, sent, no_enqueue, django_capture_on_commit_callbacks
):
    """A replay runs the engine in a transaction it rolls back: nothing may launch from it."""
    agent = chain()
    parent = engine.launch(
        agent=agent, input={"answer": '{"order": 1, "note": "x"}'}, provider="scripted"
    )
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        drive(parent)
        assert parent.status == Run.Status.SUCCEEDED
        transaction.set_rollback(True)
    assert sent == []
    parent.refresh_from_db()
    assert parent.status == Run.Status.QUEUED


def test_a_run_of_an_agent_without_follow_ups_sends_nothing(
    chain, sent, no_enqueue, django_capture_on_commit_callbacks
):
    chain()
    with django_capture_on_commit_callbacks(execute=True):
        succeeded(register(_parent_agent()), '{"order": 1, "note": "x"}')
    assert sent == []


# --- nothing launched ---------------------------------------------------------------------------
def test_a_failed_or_cancelled_parent_launches_nothing(
    chain, sent, no_enqueue, django_capture_on_commit_callbacks, client, operator
):
    agent = chain()
    with django_capture_on_commit_callbacks(execute=True):
        failed = engine.launch(
            agent=agent,
            input={"answer": '{"order": 1, "note": "x"}'},
            limits=Limits(max_cost_usd=Decimal("0.000001")),
            provider="scripted",
        )
        drive(failed)
    assert failed.status == Run.Status.FAILED
    cancelled = engine.launch(agent=agent, input={"answer": '{"order": 1, "note": "x"}'})
    cancelled.cancel(reason="not needed")

    assert sent == []
    for run in (failed, cancelled):
        assert chains.launch_follow_ups(run.pk) == []
        assert follow_up_steps(run) == []
    assert not Run.objects.filter(trigger=Run.Trigger.CHAINED).exists()

    # The run page says what was not launched, and why.
    client.force_login(operator)
    for run, why in ((failed, "the run failed"), (cancelled, "the run cancelled")):
        page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
        assert 'id="run-lineage"' in page
        assert f"not launched: {why}" in page


def test_a_replayed_success_launches_nothing(
    chain, sent, no_enqueue, django_capture_on_commit_callbacks
):
    """A replay re-enacts a recorded run without side effects; a launch would be one."""
    agent = chain()
    with django_capture_on_commit_callbacks(execute=True):
        replayed = engine.launch(
            agent=agent,
            input={"answer": '{"order": 1, "note": "x"}'},
            trigger=Run.Trigger.REPLAY,
            provider="scripted",
        )
        drive(replayed)
    assert replayed.status == Run.Status.SUCCEEDED
    assert sent == []
    assert chains.launch_follow_ups(replayed.pk) == []
    assert chains.sweep(now=replayed.finished_at + timedelta(minutes=2)) == 0
    assert not Run.objects.filter(parent=replayed).exists()


@pytest.mark.parametrize(
    ("answer", "mapping", "why"),
    [
        ("no JSON here", from_json, "the mapping raised ValueError: the run's output is not JSON"),
        ('{"note": "x"}', from_json, "the mapping raised KeyError: 'order'"),
        ('{"order": 1}', lambda r: [r.json()], "the mapping gave a list, not an object"),
        ('{"order": "7", "note": "x"}', from_json, "the mapped input is not valid for chain-next"),
        ('{"order": 0, "note": "x"}', from_json, "the mapped input is not valid for chain-next"),
        ('{"order": 1, "note": "x"}', lambda r: {**from_json(r), "extra": 1}, "not valid"),
    ],
    ids=["not-json", "raises", "not-a-dict", "wrong-type", "invalid", "unknown-field"],
)
def test_a_mapping_error_launches_nothing_and_the_parent_says_why(
    chain, no_enqueue, answer, mapping, why
):
    parent = succeeded(chain(mapping), answer)
    chains.launch_follow_ups(parent.pk)
    chains.launch_follow_ups(parent.pk)

    assert not Run.objects.filter(parent=parent).exists()
    [step] = follow_up_steps(parent)
    assert step["outcome"] == "failed"
    assert why in step["detail"]
    assert "child" not in step
    view = rendering.step_view(parent.steps.get(seq=parent.steps.count()))
    assert view.error and view.title == f"follow-up not launched: {NEXT}"
    assert not view.run_link


def test_invalid_mapped_input_is_shown_with_the_field_errors(chain, no_enqueue, client, operator):
    parent = succeeded(chain(), '{"order": 0, "note": "<b>too long for the note</b>"}')
    chains.launch_follow_ups(parent.pk)
    [step] = follow_up_steps(parent)
    assert set(step["errors"]) == {"order_id", "note"}
    assert step["input"] == {"order_id": 0, "note": "<b>too long for the note</b>"}

    client.force_login(operator)
    page = client.get(reverse("runs:detail", args=[parent.pk])).content.decode()
    assert f"follow-up not launched: {NEXT}" in page
    assert "the mapped input is not valid for chain-next" in page
    # The model's text is shown as text, never as markup.
    assert "&lt;b&gt;too long for the note&lt;/b&gt;" in page
    assert "<b>too long" not in page


def test_a_mapping_that_gives_nothing_skips_the_follow_up(chain, no_enqueue):
    parent = succeeded(chain(lambda r: None), "nothing to do")
    chains.launch_follow_ups(parent.pk)
    assert not Run.objects.filter(parent=parent).exists()
    [step] = follow_up_steps(parent)
    assert (step["outcome"], step["detail"]) == ("skipped", "the mapping gave no input")
    view = rendering.step_view(parent.steps.order_by("seq").last())
    assert view.title == f"follow-up skipped: {NEXT}" and not view.error


def test_a_next_agent_gone_from_the_catalogue_fails_visibly(chain, no_enqueue):
    parent = succeeded(chain(), '{"order": 1, "note": "x"}')
    CATALOGUE.pop(NEXT)
    chains.launch_follow_ups(parent.pk)
    assert not Run.objects.filter(parent=parent).exists()
    [step] = follow_up_steps(parent)
    assert (step["outcome"], step["detail"]) == ("failed", f"agent {NEXT} is not in the catalogue")


def test_each_declared_follow_up_is_handled_on_its_own(chain, no_enqueue):
    register(_next_agent())
    agent = register(
        _parent_agent(
            FollowUp(agent=NEXT, input=from_json, name="first"),
            FollowUp(agent=NEXT, input=lambda r: {"order_id": "x"}, name="second"),
        )
    )
    try:
        parent = succeeded(agent, '{"order": 5, "note": "x"}')
        assert len(chains.launch_follow_ups(parent.pk)) == 2
    finally:
        CATALOGUE.pop(PARENT, None)
        CATALOGUE.pop(NEXT, None)
    steps = {s["follow_up"]: s for s in follow_up_steps(parent)}
    assert steps["first"]["outcome"] == "launched"
    assert steps["second"]["outcome"] == "failed"
    assert Run.objects.filter(parent=parent).count() == 1


# --- declaring ----------------------------------------------------------------------------------
def test_register_refuses_follow_ups_that_cannot_end_or_be_told_apart(chain):
    with pytest.raises(LookupError, match="register them first"):
        register(_parent_agent(FollowUp(agent="no-such-agent", input=from_json)))
    agent = chain()
    assert agent.snapshot()["follow_ups"] == [{"name": NEXT, "agent": NEXT}]
    assert "follow_ups" not in CATALOGUE[NEXT].snapshot()
    # NEXT following up with PARENT would close a circle: PARENT -> NEXT -> PARENT.
    circular = Agent(**{**_next_agent().__dict__, "follow_ups": (FollowUp(PARENT, from_json),)})
    with pytest.raises(ValueError, match="lead back"):
        register(circular)
    twice = (FollowUp(NEXT, from_json), FollowUp(NEXT, from_json))
    with pytest.raises(ValueError, match="named alike"):
        register(_parent_agent(*twice))


def test_the_result_reads_json_in_the_model_s_prose():
    def result(output: str) -> RunResult:
        return RunResult(run_id="r", agent="a", input={}, output=output)

    assert result('{"a": 1}').json() == {"a": 1}
    assert result('Done.\n```json\n{"a": 2}\n```\nBye').json() == {"a": 2}
    assert result('The verdict is {"a": 3}.').json() == {"a": 3}
    for bad in ("no json", "{ not json }", "{"):
        with pytest.raises(ValueError, match="not JSON"):
            result(bad).json()


# --- a lost message -----------------------------------------------------------------------------
def test_the_sweep_sends_again_what_a_lost_message_did_not_launch(chain, sent, no_enqueue):
    parent = succeeded(chain(), '{"order": 3, "note": "x"}')
    finished = parent.finished_at
    assert chains.sweep(now=finished + timedelta(seconds=5)) == 0  # its own message is due
    assert chains.sweep(now=finished + timedelta(days=2)) == 0  # too old to launch by surprise
    assert chains.sweep(now=finished + timedelta(minutes=2)) == 1
    assert sent == [str(parent.pk)]

    chains.launch_follow_ups(parent.pk)
    assert chains.sweep(now=finished + timedelta(minutes=3)) == 0  # handled now
    assert Run.objects.filter(parent=parent).count() == 1


def test_the_periodic_sweep_task_includes_lost_follow_ups(chain, sent, no_enqueue):
    parent = succeeded(chain(), '{"order": 3, "note": "x"}')
    harness.CLOCK.skew += timedelta(minutes=2)  # the message had its time
    assert tasks.sweep() == 1
    assert str(parent.pk) in sent


# --- pages and the live view --------------------------------------------------------------------
def test_both_run_pages_link_to_each_other(chain, no_enqueue, client, operator):
    parent = succeeded(chain(), '{"order": 9, "note": "x"}')
    chains.launch_follow_ups(parent.pk)
    child = Run.objects.get(parent=parent)

    client.force_login(operator)
    parent_page = client.get(reverse("runs:detail", args=[parent.pk])).content.decode()
    child_url = reverse("runs:detail", args=[child.pk])
    assert "Followed by" in parent_page and f'href="{child_url}"' in parent_page
    assert f"follow-up launched: {NEXT}" in parent_page
    assert parent_page.count(f'href="{child_url}"') == 2  # the lineage and the timeline step
    assert "not launched" not in parent_page

    child_page = client.get(child_url).content.decode()
    assert "Follows" in child_page
    assert f'href="{reverse("runs:detail", args=[parent.pk])}"' in child_page
    assert f"run {parent.pk}" in child_page  # its source


def test_the_live_view_renders_the_follow_up_step(chain, no_enqueue):
    parent = succeeded(chain(), '{"order": 9, "note": "x"}')
    [step] = chains.launch_follow_ups(parent.pk)
    child = Run.objects.get(parent=parent)
    # The event as the web process gets it (runs/events.py), rendered as for every socket.
    event = {
        "run_id": str(parent.pk),
        "seq": step.seq,
        "kind": step.kind,
        **events._StepData(step).step_and_run(),
    }
    html = live._step_html(event)["html"]
    assert f'id="step-{step.seq}"' in html
    assert f"follow-up launched: {NEXT}" in html
    assert f'href="{reverse("runs:detail", args=[child.pk])}"' in html


def test_other_users_see_the_chain_as_viewers(chain, no_enqueue, client, django_user_model):
    parent = succeeded(chain(), '{"order": 9, "note": "x"}')
    chains.launch_follow_ups(parent.pk)
    client.force_login(make_user(django_user_model, "vera", "viewer"))
    page = client.get(reverse("runs:detail", args=[parent.pk]))
    assert page.status_code == 200 and b"Followed by" in page.content


@pytest.mark.django_db(transaction=True)
def test_two_workers_handling_one_success_launch_one_child(chain, no_enqueue):
    """A duplicate message and the sweep's may run at once: the parent's row lock orders
    them, and the second finds the first one's step."""
    parent = succeeded(chain(), '{"order": 4, "note": "x"}')
    barrier = threading.Barrier(2)
    results: list = []

    def handle():
        barrier.wait()
        return chains.launch_follow_ups(parent.pk)

    threads = [worker_thread(handle, name=f"follow-ups-{i}", into=results) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sorted(len(r) for r in results) == [0, 1]
    assert Run.objects.filter(parent=parent).count() == 1
    assert len(follow_up_steps(parent)) == 1
    parent.refresh_from_db()
    assert_timeline_sound(parent)
