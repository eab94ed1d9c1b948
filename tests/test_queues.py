"""Queues by purpose (agentops/settings.py, runs/queue.py): what a person waits on goes to
`people`, the sweeps to `sweeps`, runs to their agent's run queue."""

import pytest

from agentops.celery import app as celery_app
from runs import queue


def routed(task: str) -> str:
    return celery_app.amqp.router.route({}, task)["queue"].name


@pytest.mark.parametrize(
    "task",
    [
        "approvals.tasks.notify_approval_requested",
        "approvals.tasks.send_approval_email",
        "approvals.tasks.deliver_approval_webhook",
        "approvals.tasks.post_approval_to_slack",
        "approvals.tasks.send_reminder_email",
        "approvals.tasks.expire_approvals",
        "approvals.tasks.escalate_approvals",
        "approvals.learning.tell_admins.notify_admins",
        "gateway.callbacks.deliver_callback",
    ],
)
def test_what_a_person_waits_on_goes_to_the_people_queue(task):
    assert routed(task) == "people"


@pytest.mark.parametrize(
    "task",
    ["runs.tasks.sweep", "triggers.tasks.launch_due_schedules", "approvals.tasks.export_decisions"],
)
def test_the_sweeps_have_their_own_queue(task):
    assert routed(task) == "sweeps"


def test_run_work_goes_to_the_run_queue_by_default():
    for task in (queue.ADVANCE_TASK, queue.FOLLOW_UPS_TASK, "evals.tasks.run_regression"):
        assert routed(task) == "runs"


def test_every_queue_is_declared_so_a_plain_worker_consumes_them_all():
    declared = set(celery_app.amqp.queues)
    assert {"people", "sweeps", "runs"} <= declared


def test_an_agents_runs_keep_to_one_queue_and_agents_spread_over_the_queues(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "RUN_QUEUES": 4}
    assert queue.run_queues() == ["runs", "runs.1", "runs.2", "runs.3"]
    agents = [f"agent-{n}" for n in range(40)]
    chosen = {agent: queue.run_queue(agent) for agent in agents}
    assert all(queue.run_queue(agent) == chosen[agent] for agent in agents)  # stable
    assert set(chosen.values()) == set(queue.run_queues())  # and spread


def test_one_run_queue_unless_more_are_asked_for(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "RUN_QUEUES": None}
    assert queue.run_queues() == ["runs"] and queue.run_queue("refund-desk") == "runs"


def test_a_run_resumed_by_a_person_goes_to_the_people_queue(monkeypatch):
    sent = []
    monkeypatch.setattr(
        celery_app.tasks[queue.ADVANCE_TASK],
        "apply_async",
        lambda args, countdown=None, queue=None: sent.append((args[0], queue)),
    )
    queue.enqueue("r1", agent="refund-desk")
    queue.enqueue("r2", agent="refund-desk", for_a_person=True)
    assert sent == [("r1", "runs"), ("r2", "people")]
