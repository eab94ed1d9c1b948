"""Two budgets instead of one: pytest-timeout times a test's body (`timeout_func_only`, in
pyproject.toml; `--timeout`), and this plugin gives each test's fixture setup and teardown a
budget of their own (`--fixture-timeout`, default 900 s).

Why: a session fixture (the test database, a live server, a browser) is set up in the first
test that needs it. Timed with that test's body, it made a starved runner fail: at load 30,
creating the SQLite test database alone took longer than CI's 120 s, and pytest re-raised the
fixture's failure in every later test of the worker, hundreds of errors for one slow setup. A
slow runner must give a slow green run; a hang in a fixture still fails, after the larger
budget. Both use pytest-timeout's own timer (its method, its thread dump).
"""

import pytest
from pytest_timeout import Settings

FIXTURE_TIMEOUT = 900.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fixture-timeout",
        type=float,
        default=None,
        help="seconds a test's fixture setup (and, apart, its teardown) may take; 0 for none "
        f"(default: the fixture_timeout ini value, else {FIXTURE_TIMEOUT:.0f})",
    )
    parser.addini("fixture_timeout", "see --fixture-timeout", default=str(FIXTURE_TIMEOUT))


def _fixture_settings(item: pytest.Item) -> Settings | None:
    config = item.config
    # Without timeout_func_only pytest-timeout already times setup with the test's budget;
    # with --timeout=0 (debugging) no timer at all.
    if not config.getini("timeout_func_only") or not getattr(config, "_env_timeout", None):
        return None
    budget = config.getoption("fixture_timeout")
    if budget is None:
        budget = float(config.getini("fixture_timeout"))
    if budget <= 0:
        return None
    return Settings(
        budget,
        config._env_timeout_method,  # type: ignore[attr-defined]
        False,
        config._env_timeout_disable_debugger_detection,  # type: ignore[attr-defined]
    )


def _guarded(item: pytest.Item):
    settings = _fixture_settings(item)
    hooks = item.config.pluginmanager.hook
    if settings is not None:
        hooks.pytest_timeout_set_timer(item=item, settings=settings)
    try:
        return (yield)
    finally:
        if settings is not None:
            hooks.pytest_timeout_cancel_timer(item=item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    return (yield from _guarded(item))
