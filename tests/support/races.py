"""Racing threads for the concurrency tests: each has its own database connection, all start
at once, and what each returned (or raised) comes back for the test to judge."""

import threading
import time

from django.db import connections

from runs import engine


def race(target, racers: int, within: float = 120) -> list:
    """`target()` in `racers` threads released together; a thread's exception fails the race."""
    start = threading.Barrier(racers)
    results: list = []
    lock = threading.Lock()

    def go() -> None:
        try:
            start.wait(10)
            result = target()
        except BaseException as exc:  # reported below, not lost in the thread
            result = exc
        finally:
            connections.close_all()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=go) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(within)
    assert not any(t.is_alive() for t in threads)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def slow_down_launches(monkeypatch, seconds: float) -> None:
    """engine.launch holds its caller's transaction open `seconds` longer, so the other racers
    arrive while the first is still inside it."""
    launch = engine.launch

    def slow(**kwargs):
        run = launch(**kwargs)
        time.sleep(seconds)
        return run

    monkeypatch.setattr(engine, "launch", slow)
