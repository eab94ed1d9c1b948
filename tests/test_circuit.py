"""The tools' circuit breaker: per process when embedded, shared by all workers through Redis
otherwise, and never the reason a call fails when Redis is away."""

import os

import pytest

from agentkit import circuit
from agentkit.circuit import CircuitBreaker


def open_after(breaker: CircuitBreaker, failures: int, name: str = "t_upstream") -> None:
    for _ in range(failures):
        breaker.record(name, ok=False)


def test_a_process_breaker_opens_after_the_threshold_and_a_success_closes_it(settings):
    settings.REDIS_URL = ""
    breaker = CircuitBreaker(threshold=3, cooldown=60)
    open_after(breaker, 2)
    assert breaker.allow("t_upstream")
    open_after(breaker, 1)
    assert not breaker.allow("t_upstream")
    assert breaker.allow("t_other")  # per tool
    breaker.record("t_upstream", ok=True)
    assert breaker.allow("t_upstream")


def test_after_the_cooldown_one_more_failure_opens_it_again(settings, monkeypatch):
    settings.REDIS_URL = ""
    clock = [1000.0]
    monkeypatch.setattr(circuit.time, "monotonic", lambda: clock[0])
    breaker = CircuitBreaker(threshold=3, cooldown=30)
    open_after(breaker, 3)
    clock[0] += 31
    assert breaker.allow("t_upstream")  # a trial call goes through
    open_after(breaker, 1)
    assert not breaker.allow("t_upstream")


@pytest.fixture
def shared(settings, monkeypatch):
    """Two breakers as two worker processes would have them, on the test Redis."""
    if not os.environ.get("REDIS_URL"):
        pytest.skip("needs REDIS_URL (the shared breaker lives in Redis)")
    monkeypatch.setattr(circuit, "CACHE_SECONDS", 0.0)
    one, two = CircuitBreaker(threshold=5, cooldown=60), CircuitBreaker(threshold=5, cooldown=60)
    one.reset()
    yield one, two
    one.reset()


@pytest.mark.redis
def test_failures_in_two_workers_add_up_and_open_the_circuit_for_both(shared):
    one, two = shared
    open_after(one, 3)
    open_after(two, 2)
    assert not one.allow("t_upstream") and not two.allow("t_upstream")
    # A success in either worker closes it for both.
    two.record("t_upstream", ok=True)
    assert one.allow("t_upstream") and two.allow("t_upstream")
    open_after(one, 4)
    assert two.allow("t_upstream")  # counting starts again after a success


@pytest.mark.redis
def test_a_workers_view_is_at_most_the_cache_time_old(shared, monkeypatch):
    one, two = shared
    monkeypatch.setattr(circuit, "CACHE_SECONDS", 3600.0)
    assert two.allow("t_upstream")  # read once, closed
    open_after(one, 5)
    assert two.allow("t_upstream")  # still the cached view: no round trip per call
    monkeypatch.setattr(circuit, "CACHE_SECONDS", 0.0)
    assert not two.allow("t_upstream")


def test_with_redis_away_the_breaker_falls_back_to_the_process(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    breaker = CircuitBreaker(threshold=2, cooldown=60, shared=True)
    assert breaker.allow("t_upstream")
    open_after(breaker, 2)
    assert not breaker.allow("t_upstream")
    breaker.record("t_upstream", ok=True)
    assert breaker.allow("t_upstream")
    breaker.reset()
