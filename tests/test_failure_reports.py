"""A failure pytest cannot format fails its own test; the session goes on
(tests/support/failure_reports.py)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Stands in for CPython 3.11's traceback without a line number: formatting the failure raises.
BROKEN_FORMATTER = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.excinfo is not None and "unformattable" in item.name:
        raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'")
    yield
"""

TESTS = """
def test_unformattable_failure():
    assert 1 == 2

def test_after_it():
    assert True
"""


def test_a_failure_that_cannot_be_formatted_fails_only_its_test(tmp_path):
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["tests.support.failure_reports", "broken_formatter"]\n'
    )
    (tmp_path / "broken_formatter.py").write_text(BROKEN_FORMATTER)
    (tmp_path / "test_it.py").write_text(TESTS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-q",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out, out
    assert "1 failed, 1 passed" in out, out
    assert "its traceback could not be formatted" in out, out
