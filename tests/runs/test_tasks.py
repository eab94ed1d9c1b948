"""A task that meets the database down is sent again, with backoff; it never loses its run."""

from django.db import OperationalError

from runs import engine
from runs.tasks import advance_run


def test_a_database_error_sends_the_run_again(monkeypatch):
    calls = []

    def database_restarting(run_id, *, calls_in_flight):
        # Run inline, the task waits for its model calls: its caller expects the run advanced.
        assert calls_in_flight is False
        calls.append(run_id)
        if len(calls) < 3:
            raise OperationalError("server closed the connection unexpectedly")
        return "succeeded"

    monkeypatch.setattr(engine, "advance", database_restarting)
    result = advance_run.apply(args=["a-run"])  # eager: retries run here, in order
    assert result.state == "SUCCESS" and result.result == "succeeded"
    assert calls == ["a-run"] * 3


def test_the_retries_back_off_with_jitter_and_stop_in_the_end():
    assert OperationalError in advance_run.autoretry_for
    assert advance_run.retry_backoff and advance_run.retry_jitter
    assert advance_run.max_retries is not None  # the sweep takes over after that
    assert advance_run.acks_late and advance_run.reject_on_worker_lost
