"""`manage.py regression`: a table, and an exit code CI can use."""

import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evals.models import RegressionRun
from tests.evals.conftest import add

pytestmark = pytest.mark.django_db


def regression(*args) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("regression", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_it_exits_1_when_a_failing_case_brings_the_pass_rate_under_the_bar(
    dataset, approved, edited
):
    add(dataset, approved, edited)
    code, out, err = regression(
        "run", "refunds", "--agent", "refund-desk", "--provider", "scripted", "--fail-under", "0.9"
    )
    assert code == 1
    assert "1/2 passed (50.0%)" in out
    assert 'amount: expected "100.00"' in out
    assert "below 90.0%" in err


def test_it_exits_0_when_the_pass_rate_meets_the_bar(dataset, approved, edited):
    add(dataset, approved, edited)
    code, out, _ = regression("run", "refunds", "--provider", "scripted", "--fail-under", "0.5")
    assert code == 0 and "1/2 passed" in out
    assert RegressionRun.objects.get().passed == 1


def test_json_output_and_compare(dataset, approved):
    add(dataset, approved)
    code, out, _ = regression("run", "refunds", "--provider", "scripted", "--json")
    assert code == 0
    first = json.loads(out)
    assert first["pass_rate"] == 1.0 and first["results"][0]["outcome"] == "pass"
    regression("run", "refunds", "--provider", "scripted")
    second = RegressionRun.objects.order_by("-pk").first()
    code, out, _ = regression("compare", str(first["regression_run"]), str(second.pk))
    assert code == 0 and "same" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "nope"), "no dataset 'nope' (datasets: refunds)"),
        (("run", "refunds", "--agent", "ghost"), "no agent 'ghost'"),
        (("run", "refunds", "--fail-under", "high"), "is not a number"),
        (("run", "refunds", "--fail-under", "90"), "between 0 and 1"),
        (("compare", "998", "999"), "no regression run 998, 999"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(dataset, approved, args, message):
    add(dataset, approved)
    extra = ("--provider", "scripted") if args[0] == "run" else ()
    with pytest.raises(CommandError, match=re.escape(message)) as raised:
        call_command("regression", *args, *extra)
    assert raised.value.returncode == 2
    assert not RegressionRun.objects.exists()


def test_an_empty_dataset_is_refused(dataset):
    with pytest.raises(CommandError, match="has no cases"):
        call_command("regression", "run", "refunds", "--provider", "scripted")
