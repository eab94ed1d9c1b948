"""Properties of the run search's tsquery builder (runs.models.queries._prefix_tsquery): nothing a
person types is a tsquery syntax error. On Postgres the built query is run by to_tsquery and
by the search itself; everywhere its shape is checked: quoted words free of tsquery's
syntax, joined only by its operators, each word taken from the text."""

import re
import string

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.models import Run, _prefix_tsquery

from ..conftest import on_postgres

# What people type, with tsquery's own syntax and quoting mixed in. No NUL: the request
# middleware refuses it before any view reads the text (Postgres cannot store it).
SYNTAX = "'\\:&|!()<->*\"@.%_ \t\n"
typed = st.text(
    alphabet=st.one_of(
        st.sampled_from(SYNTAX),
        st.sampled_from(string.ascii_letters + string.digits),
        st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    ),
    max_size=40,
)
TERM = r"'[^'\\\s]+'"
QUERY = re.compile(rf"^{TERM}(?::\*)?(?:(?: <-> | & ){TERM}(?::\*)?)*$")


def searchable(word: str) -> bool:
    """A typed word with a letter or digit between its punctuation."""
    parts = re.split(f"[{re.escape(string.punctuation)}]+", word)
    return any(any(ch.isalnum() for ch in part) for part in parts)


@settings(max_examples=300, deadline=None)
@given(typed)
def test_the_query_is_quoted_words_joined_by_operators(text):
    query = _prefix_tsquery(text)
    words = [w for w in text.split() if searchable(w)]
    if not words:
        assert query == ""
        return
    assert QUERY.match(query), query
    for term in re.findall(TERM, query):
        inside = term[1:-1]
        assert not set(inside) & set(string.punctuation)
        assert inside in text
    # Every typed word is required (one group each), the last part of each as a prefix.
    assert query.count(" & ") == len(words) - 1
    assert query.count(":*") == len(words)


@on_postgres
@pytest.mark.django_db
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(typed)
def test_postgres_parses_every_built_query_and_the_search_runs(text):
    query = _prefix_tsquery(text)
    if query:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_tsquery('simple', %s)::text", [query])
            cursor.fetchone()
    list(Run.objects.search(text).values_list("pk", flat=True)[:1])
