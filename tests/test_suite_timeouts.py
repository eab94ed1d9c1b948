"""The suite's timeouts (tests/timeouts.py, pyproject.toml): a test's body has --timeout, its
fixtures a larger budget of their own, so a slow runner gives a slow green run and a hang
still fails. Run on small test files in a pytest subprocess with this project's settings."""

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SLOW_SESSION = """
    import time

    import pytest

    @pytest.fixture(scope="session")
    def database():
        time.sleep({setup})  # like creating the test database on a starved runner
        return "ready"

    def test_first(database):
        assert database == "ready"

    def test_second(database):
        assert database == "ready"
    """

HANGING_BODY = """
    import time

    def test_hangs():
        time.sleep(120)
    """


@pytest.fixture
def run_pytest(pytester, pytestconfig, monkeypatch):
    """Runs pytest on the files given, with this project's timeout settings (from its
    pyproject.toml) and the suite's timeout plugin."""
    pytester.makeini(
        f"""
        [pytest]
        timeout_func_only = {str(pytestconfig.getini("timeout_func_only")).lower()}
        """
    )
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def run(*args: str, **files: str) -> pytest.RunResult:
        pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in files.items()})
        return pytester.runpytest_subprocess(
            "-p", "tests.timeouts",
            *("-p", "no:django", "-p", "no:randomly", "-p", "no:xdist"),
            *("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:cov"),
            *("-p", "no:asyncio"),
            *args,
        )  # fmt: skip

    return run


def test_a_session_fixture_slower_than_the_test_timeout_gives_a_green_run(run_pytest):
    result = run_pytest(
        "--timeout=1",
        "--fixture-timeout=60",
        test_slow=SLOW_SESSION.format(setup=3),
        test_hang=HANGING_BODY,
    )
    result.assert_outcomes(passed=2, failed=1)
    # The hang guard holds for a test's body: the test that sleeps fails at its timeout.
    result.stdout.fnmatch_lines(["FAILED test_hang.py::test_hangs - Failed: Timeout (>1.0s)*"])
    assert result.duration < 60


def test_a_fixture_that_hangs_fails_at_the_fixture_budget(run_pytest):
    result = run_pytest(
        "--timeout=60",
        "--fixture-timeout=2",
        test_slow=SLOW_SESSION.format(setup=120),
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["ERROR test_slow.py::test_first - Failed: Timeout (>2.0s)*"])
    assert result.duration < 60
