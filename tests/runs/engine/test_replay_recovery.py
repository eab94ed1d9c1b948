"""Replay follows the recovery a run went through (a takeover, an engine error, the "did it
happen?" question after a worker died mid-call) instead of calling it a divergence; a tool
whose code changed since the run is a verdict of its own; an argument a tool gained since,
with a default, is no divergence."""

import dataclasses
from datetime import timedelta

import pydantic
import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from agentkit.tools import REGISTRY
from approvals.models import Approval
from history.replay import DIVERGED, IDENTICAL, TOOL_CHANGED, replay
from runs.engine import lease, loop
from runs.models import Run

from ..harness import die_after, drive

pytestmark = pytest.mark.django_db


class Died(BaseException):
    """The worker's death between a call's effect and its record (nothing catches it)."""


def take_over(run: Run) -> None:
    """A worker claimed the run and died: its lease runs out and another one takes over."""
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_a_run_taken_over_from_a_dead_worker_replays_identically(launch):
    run = launch(script="email_only")
    assert lease.claim(run.pk, "dead-worker") is not None
    take_over(run)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert run.steps.filter(data__event="resumed", data__to=Run.Status.RUNNING).exists()

    result = replay(run)
    assert result.verdict == IDENTICAL, result.summary
    assert result.recovery_steps == 1
    assert result.recorded_steps == run.last_seq - 1


def test_a_run_that_survived_an_engine_error_replays_identically(launch, monkeypatch):
    real = loop.step
    failures = [RuntimeError("database hiccup")]

    def step_once_failing(work):
        if failures:
            raise failures.pop()
        real(work)

    monkeypatch.setattr(loop, "step", step_once_failing)
    run = launch(script="refund_then_email")
    assert drive(run)[0] == "requeued"
    monkeypatch.setattr(loop, "step", real)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert run.steps.filter(data__event="error").count() == 1

    result = replay(run)
    assert result.verdict == IDENTICAL, result.summary
    assert result.recovery_steps == 1


def test_a_run_that_asked_whether_a_call_happened_replays_identically(launch, plain_user):
    run = launch(script="email_only")
    die_after("send_customer_email", lambda: (_ for _ in ()).throw(Died()))
    with pytest.raises(Died):
        drive(run)
    take_over(run)
    drive(run)
    assert run.status == Run.Status.WAITING  # "did it happen?"
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(pk=question.pk).update(
            status=Approval.Status.ANSWERED,
            answer="happened",
            decided_at=timezone.now(),
            decided_by=plain_user,
        )
        assert locked.resume("all decisions made")
    drive(run)
    assert run.status == Run.Status.SUCCEEDED

    result = replay(run)
    assert result.verdict == IDENTICAL, result.summary
    # The takeover, and the question with its pause, decision and resume.
    assert result.recovery_steps >= 4


def test_a_tool_whose_code_changed_is_its_own_verdict(launch, monkeypatch):
    run = launch(script="email_only")
    drive(run)
    email = REGISTRY["send_customer_email"]

    def rewritten(**kwargs):
        return {"sent": False}  # a different body, the same schema

    monkeypatch.setitem(REGISTRY, "send_customer_email", dataclasses.replace(email, fn=rewritten))
    result = replay(run)
    assert result.identical  # every step replays the same...
    assert result.verdict == TOOL_CHANGED  # ...but the tool is not the one that ran
    assert result.changed_tools == ["send_customer_email"]
    assert result.summary.startswith("tool changed:")
    with pytest.raises(SystemExit) as exit:
        call_command("replay", str(run.pk), stdout=None)
    assert exit.value.code == 2


def test_an_optional_argument_added_since_the_run_is_no_divergence(launch, monkeypatch):
    run = launch(script="email_only")
    drive(run)
    email = REGISTRY["send_customer_email"]
    gained = pydantic.create_model("EmailWithCc", __base__=email.args_model, cc=(str | None, None))
    monkeypatch.setitem(
        REGISTRY, "send_customer_email", dataclasses.replace(email, args_model=gained)
    )
    result = replay(run)
    assert result.identical, result.summary
    assert result.verdict == TOOL_CHANGED  # its schema changed: said, but not a divergence


def test_a_required_argument_added_since_the_run_still_diverges(launch, monkeypatch):
    run = launch(script="email_only")
    drive(run)
    email = REGISTRY["send_customer_email"]
    stricter = pydantic.create_model("EmailStrict", __base__=email.args_model, template=(str, ...))
    monkeypatch.setitem(
        REGISTRY, "send_customer_email", dataclasses.replace(email, args_model=stricter)
    )
    assert replay(run).verdict == DIVERGED
