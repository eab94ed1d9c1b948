"""Replay: the loop re-run with what a recorded run's timeline says instead of the world.

While a recording is in use (`replaying`), the engine asks the recording, not the world, for
three things: the model's turns (its provider), a called tool's result, and the people's
gates and decisions. Everything else is the engine's own code, so a replay shows what the
engine does today with what happened then. The replay itself (history/replay.py) runs
inside a transaction it rolls back: nothing it writes stays, nothing leaves on commit.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from agentkit.llm.base import Provider


class Recording(Protocol):
    provider: Provider
    gates: Any  # a gates.Gates, answering from the recording (gates.current() returns it)

    def tool_result(self, tool: str, args: dict) -> tuple[Any, str | None]:
        """The recorded (result, business error) of this call, instead of calling the tool."""


_current: ContextVar[Recording | None] = ContextVar("agentops_replaying", default=None)


def current() -> Recording | None:
    return _current.get()


@contextmanager
def replaying(recording: Recording) -> Iterator[None]:
    token = _current.set(recording)
    try:
        yield
    finally:
        _current.reset(token)
