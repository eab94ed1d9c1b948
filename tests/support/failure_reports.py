"""A pytest plugin: a test whose failure cannot be formatted fails alone, never the session."""

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A failure whose traceback pytest cannot format still fails only its own test. On
    CPython 3.11 a frame interrupted by pytest-timeout's signal can have no line number
    (`tb_lineno` None), and pytest's formatter then raised TypeError out of this hook: xdist
    took that for a crashed worker and aborted the whole pass."""
    try:
        return (yield)
    except Exception as formatting_error:
        if call.excinfo is None:
            raise
        return pytest.TestReport(
            item.nodeid,
            item.location,
            {},
            "failed",
            f"{call.excinfo.exconly()}\n(its traceback could not be formatted: "
            f"{formatting_error!r})",
            call.when,
            duration=call.duration,
            start=call.start,
            stop=call.stop,
        )
