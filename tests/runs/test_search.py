"""Free-text search of runs (runs list and audit): full-text on Postgres, substrings on SQLite."""

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from runs import models
from runs.models import Run, _prefix_tsquery

from ..conftest import on_postgres
from .factories import make_run

pytestmark = pytest.mark.django_db


def _run(user, *, input: dict, output: str = "", **fields) -> Run:
    run = make_run(user, **fields)
    Run.objects.filter(pk=run.pk).update(input=input, output=output)
    return run


@pytest.fixture
def runs(operator, no_enqueue) -> dict[str, Run]:
    return {
        "refund": _run(
            operator,
            status=Run.Status.SUCCEEDED,
            input={"order_id": 4242, "reason": "damaged parcel", "email": "boss@example.com"},
            output="Refunded order 4242 to the customer (card ending 1881).",
        ),
        "revenue": _run(
            operator,
            status=Run.Status.SUCCEEDED,
            input={"question": "Revenue by quarter?"},
            output="Total revenue for Q3: 12.50 M",
        ),
        "queued": _run(operator, input={"question": "Churn?"}),
    }


@pytest.fixture
def search(client, viewer, runs) -> Callable[..., set[str]]:
    """The names of the runs a search lists."""
    client.force_login(viewer)

    def found(q: str, page: str = "runs:list") -> set[str]:
        response = client.get(reverse(page), {"q": q})
        assert response.status_code == 200
        html = response.content.decode()
        return {name for name, run in runs.items() if f'data-run-id="{run.pk}"' in html}

    return found


# --- both databases -----------------------------------------------------------------------------
def test_it_finds_words_of_the_output_and_the_input_whatever_their_case(search):
    assert search("REFUNDED") == {"refund"}
    assert search("parcel") == {"refund"}
    assert search("Quarter") == {"revenue"}
    assert search("boss@example.com") == {"refund"}
    assert search("(card") == {"refund"}


def test_it_finds_the_start_of_a_word(search):
    assert search("refun") == {"refund"}
    assert search("quart") == {"revenue"}
    assert search("424") == {"refund"}


def test_every_word_must_be_found(search):
    assert search("refunded 4242") == {"refund"}
    assert search("4242 refunded") == {"refund"}
    assert search("refunded quarter") == set()


def test_text_without_a_letter_or_digit_is_looked_for_as_it_is(search):
    assert search("(") == {"refund"}


def test_the_audit_search_finds_the_same_runs(search):
    assert search("refun", "runs:audit") == {"refund"}


def test_a_run_id_finds_its_run(search, runs):
    assert search(str(runs["queued"].pk)) == {"queued"}


def test_the_short_id_the_ui_shows_finds_its_run(search, runs):
    # Pages show a run by the first 8 characters of its id: pasting them finds it.
    short = str(runs["queued"].pk)[:8]
    assert search(short) == {"queued"}
    assert search(short.upper()) == {"queued"}
    assert search(str(runs["queued"].pk)[:13]) == {"queued"}  # with the dash
    assert search(short, "runs:audit") == {"queued"}


@pytest.mark.parametrize(
    "q",
    [
        "a:b & | ! ' (",
        "'",
        "\\",
        "':*",
        "a <-> b",
        "!refund",
        "(refund | revenue)",
        "refund:*B",
        "%",
        "_",
        "😀",
        "\u202e",
        "x" * 200,
    ],
)
def test_query_syntax_in_the_text_is_no_error(search, q):
    search(q)
    search(q, "runs:audit")


def test_the_query_for_postgres_holds_no_syntax_of_the_text():
    assert _prefix_tsquery("boss@exa refund") == "'boss' <-> 'exa':* & 'refund':*"
    assert _prefix_tsquery("a:b & | ! ' ( \\ ") == "'a' <-> 'b':*"
    assert _prefix_tsquery("( ) :* <-> ''") == ""


# --- Postgres: full-text ------------------------------------------------------------------------
@on_postgres
def test_punctuation_separates_words_so_parts_of_an_email_are_found(search):
    assert search("example.com") == {"refund"}
    assert search("boss@exa") == {"refund"}
    assert search("12.50") == {"revenue"}
    assert search("email") == set()  # the input's keys are not its text


@on_postgres
def test_words_joined_by_punctuation_are_found_next_to_each_other(search):
    assert search("order-4242") == {"refund"}
    assert search("4242-order") == set()


@on_postgres
def test_a_run_is_found_by_the_output_it_finished_with(search, runs):
    assert search("postmortem") == set()
    Run.objects.filter(pk=runs["queued"].pk).update(output="See the postmortem")
    assert search("postmortem") == {"queued"}


@on_postgres
def test_the_search_reads_the_index_not_the_text(search):
    with CaptureQueriesContext(connection) as ctx:
        search("refunded")
    sql = " ".join(q["sql"] for q in ctx.captured_queries if "runs_run" in q["sql"])
    assert "search @@ to_tsquery" in sql
    assert "LIKE" not in sql


@on_postgres
@pytest.mark.parametrize("sorts_at_most", [5000, 0])
def test_results_are_newest_first_however_many_they_are(
    client, viewer, operator, no_enqueue, monkeypatch, sorts_at_most
):
    # Up to SEARCH_SORTS_AT_MOST results are sorted after the index found them, more are
    # read newest first: the order is the same.
    monkeypatch.setattr(models, "SEARCH_SORTS_AT_MOST", sorts_at_most)
    now = timezone.now()
    made = []
    for age in (3, 1, 2):
        run = _run(operator, input={"question": "where"}, output="needle")
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(days=age))
        made.append((age, str(run.pk)))
    client.force_login(viewer)
    html = client.get(reverse("runs:list"), {"q": "needle"}).content.decode()
    shown = sorted((html.index(f'data-run-id="{pk}"'), age) for age, pk in made)
    assert [age for _, age in shown] == [1, 2, 3]


def test_past_the_cap_the_pager_says_more_and_counts_no_further(
    client, viewer, operator, no_enqueue, monkeypatch
):
    from runs import views

    monkeypatch.setattr(views, "SEARCH_SORTS_AT_MOST", 3)
    for i in range(5):
        _run(operator, input={"question": f"churn {i}"})
    monkeypatch.setattr(views, "RUNS_PER_PAGE", 2)
    client.force_login(viewer)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("runs:list")).content.decode()
    assert "3+ runs" in html and "after=" in html
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "runs_run" in q["sql"]]
    assert counts and all("LIMIT 4" in sql for sql in counts), counts
    html = client.get(reverse("runs:list"), {"q": "churn"}).content.decode()
    assert "3+ runs" in html
    html = client.get(reverse("runs:list"), {"q": "churn 4"}).content.decode()
    assert "1 run<" in html and "after=" not in html
