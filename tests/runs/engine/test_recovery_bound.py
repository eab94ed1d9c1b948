"""Recovery has a bound: a queued run whose message was lost is sent again within half a
lease (a setting beside the lease), and the sweep that does it fails fast and tries again
while the database is unreachable instead of waiting 30 s for a pooled connection."""

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone
from psycopg_pool import PoolTimeout

from agentkit.database import checkout_timeout, fail_fast
from agentops.db.postgresql.base import Pool
from runs import engine, tasks
from runs.models import Run, queued_resend_seconds

pytestmark = pytest.mark.django_db


def queued_for(launch, seconds: float) -> Run:
    run = launch()
    Run.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds))
    return run


def resent(no_enqueue, now=None) -> set[str]:
    no_enqueue.clear()
    engine.sweep(now=now)
    return set(no_enqueue)


def test_the_resend_age_is_half_the_lease_by_default(launch, settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 10, "QUEUED_RESEND_SECONDS": None}
    assert queued_resend_seconds() == 5
    fresh, lost = queued_for(launch, 4), queued_for(launch, 6)
    assert resent(no_enqueue) == {str(lost.pk)}
    assert str(fresh.pk) not in resent(no_enqueue)


def test_the_resend_age_is_a_setting(launch, settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 60, "QUEUED_RESEND_SECONDS": 3}
    run = queued_for(launch, 4)
    assert resent(no_enqueue) == {str(run.pk)}


def test_a_lost_enqueue_is_sent_again_within_the_bound(launch, settings, no_enqueue):
    """The 3.5 s Redis outage of the issue: the launch's message is lost, the run sits queued;
    the sweep sends it again once it is older than the resend age (30 s at the default 60 s
    lease, not 60 s)."""
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 60, "QUEUED_RESEND_SECONDS": None}
    run = launch()
    no_enqueue.clear()  # the message the broker never got
    assert engine.sweep(now=timezone.now() + timedelta(seconds=20)) == 0
    assert engine.sweep(now=timezone.now() + timedelta(seconds=31)) == 1
    assert no_enqueue == [str(run.pk)]
    # Sent once per window, not on every sweep of a backlog.
    assert engine.sweep(now=timezone.now() + timedelta(seconds=32)) == 0


def test_the_sweep_tries_again_after_a_database_error(monkeypatch):
    monkeypatch.setattr(tasks, "SWEEP_RETRY_SECONDS", 0)
    seen = []

    def work() -> int:
        seen.append(checkout_timeout.get())
        if len(seen) < 3:
            raise OperationalError("connection refused")
        return 7

    assert tasks.sweep_all(work) == 7
    # Every attempt's checkouts were the fast ones.
    assert seen == [tasks.SWEEP_CHECKOUT_SECONDS] * 3
    assert checkout_timeout.get() is None  # and only inside the sweep


def test_the_sweep_gives_up_after_its_attempts(monkeypatch):
    monkeypatch.setattr(tasks, "SWEEP_RETRY_SECONDS", 0)
    calls = []

    def down() -> int:
        calls.append(1)
        raise OperationalError("connection refused")

    with pytest.raises(OperationalError):
        tasks.sweep_all(down, attempts=3)
    assert len(calls) == 3


def test_a_checkout_inside_fail_fast_gives_up_at_its_own_timeout():
    # Nothing listens on port 1: the pool can never connect.
    pool = Pool("host=127.0.0.1 port=1 connect_timeout=1", min_size=1, timeout=30, open=False)
    pool.open(wait=False)
    try:
        with fail_fast(0.2), pytest.raises(PoolTimeout, match=r"0\.20 sec"):
            pool.getconn()
    finally:
        pool.close(timeout=1)
