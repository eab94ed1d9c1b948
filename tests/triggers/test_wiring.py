"""Due schedules are swept by celery beat in production and in-process when embedded."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from agentops import embedded
from agentops.celery import app
from runs.models import Run
from triggers import tasks
from triggers.models import Schedule

from .conftest import AGENT, INPUT

# The embedded sweep hands its connection back after each pass, as its thread must.
pytestmark = pytest.mark.django_db(transaction=True)


def due_schedule() -> Schedule:
    schedule = Schedule.objects.create(name="s", agent=AGENT, input=INPUT, interval_seconds=600)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now() - timedelta(1))
    return schedule


def test_the_embedded_sweep_launches_due_schedules(no_enqueue):
    schedule = due_schedule()
    embedded.Sweeps(interval=60).sweep_once()
    run = Run.objects.get()
    assert run.trigger == Run.Trigger.SCHEDULE
    assert no_enqueue == [str(run.pk)]
    embedded.Sweeps(interval=60).sweep_once()
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at > timezone.now()


def test_beat_sends_the_task_every_15_seconds(no_enqueue):
    entries = [
        e
        for e in settings.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == tasks.launch_due_schedules.name
    ]
    assert [e["schedule"] for e in entries] == [15.0]
    app.loader.import_default_modules()
    assert tasks.launch_due_schedules.name in app.tasks
    due_schedule()
    assert tasks.launch_due_schedules.apply().get() == 1
    assert Run.objects.get().trigger == Run.Trigger.SCHEDULE
