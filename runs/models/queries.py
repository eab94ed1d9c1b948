"""Which runs: RunQuerySet (`Run.objects`), the questions lists, pages and the API ask of the
runs table (active, visible to a person, a search). Reads only; imports no other model part."""

import contextlib
import re
import string
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, models
from django.db.models import BooleanField, ExpressionWrapper, F, Q, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from accounts import teams

from .choices import ACTIVE_STATUSES

if TYPE_CHECKING:
    from . import Run  # noqa: F401 (named in the string of the base class)


# Search results up to this many are sorted after the search index found them, more are
# found by walking the runs newest first (RunQuerySet.newest_first_for_search).
SEARCH_SORTS_AT_MOST = 5000


# Read as spaces in the indexed text too (migration 0005).
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]+")


def _prefix_tsquery(text: str) -> str:
    """The words of `text` for to_tsquery, every one to be found, the last part of each as
    the start of a word: `boss@exa refund` is `'boss' <-> 'exa':* & 'refund':*`. The parts
    hold no ASCII punctuation, so no quote, backslash or operator of tsquery's syntax; parts
    without a letter or digit are left out. Empty when nothing is left."""
    terms = []
    for word in text.split():
        parts = [p for p in _PUNCTUATION.split(word) if any(ch.isalnum() for ch in p)]
        if parts:
            *whole, last = parts
            terms.append(" <-> ".join([*(f"'{p}'" for p in whole), f"'{last}':*"]))
    return " & ".join(terms)


class RunQuerySet(models.QuerySet["Run"]):
    def active(self):
        return self.filter(status__in=ACTIVE_STATUSES)

    def visible_to(self, user):
        """Runs `user` may read: their role's, on the agents their teams reach
        (accounts/teams.py). The rule lives here so views, API and consumers agree."""
        agents = teams.scope(user, teams.Power.VIEW)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))

    def operable_by(self, user):
        """Runs `user` may cancel or finish operations of (the launch power)."""
        agents = teams.scope(user, teams.Power.LAUNCH)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))

    def for_lists(self):
        """What a row in a list shows: the launcher, and not the payloads (input, output and
        the launch snapshot can be kilobytes each; a row shows the input's summary)."""
        return self.select_related("launched_by").defer("input", "output", "agent_config")

    def search(self, text: str):
        """Runs whose input or output holds every word of `text`, a word matching the start
        of one (`refu` finds "refunded", `example.com` finds boss@example.com), and the run
        whose id `text` is or starts with (the 8-character short id the UI shows).

        On Postgres through the full-text index (migration 0005), with a query built from
        the text less its ASCII punctuation, so nothing a person types is a tsquery syntax
        error. Elsewhere (the embedded SQLite), and for text with no letter or digit, each
        word is looked for as a case-insensitive substring of the input or output.
        """
        runs: models.QuerySet[Any] = self
        text = text.strip()
        tsquery = _prefix_tsquery(text)
        if connections[self.db].vendor == "postgresql" and tsquery:
            # The column is not a model field (see the migration); the query is a parameter.
            matches = Q(
                RawSQL(
                    "runs_run.search @@ to_tsquery('simple', %s)",
                    [tsquery],
                    output_field=BooleanField(),
                )
            )
        else:
            runs = runs.annotate(input_text=Cast("input", TextField()))
            matches = Q()
            for word in text.split():
                matches &= Q(input_text__icontains=word) | Q(output__icontains=word)
        with contextlib.suppress(ValueError):  # not a run id
            matches |= Q(pk=uuid.UUID(text))
        digits = text.replace("-", "").lower()
        if 8 <= len(digits) < 32 and all(c in string.hexdigits for c in digits):
            # The short id the UI shows (its first 8 characters, or more): the ids that start
            # with it, as a range of the primary key's index.
            matches |= Q(
                pk__gte=uuid.UUID(digits.ljust(32, "0")), pk__lte=uuid.UUID(digits.ljust(32, "f"))
            )
        return runs.filter(matches)

    def newest_first_for_search(self, count: int):
        """Search results (`search`) newest first, read the way their number suits.

        Postgres guesses that a prefix matches 2 % of runs, so for a page of them it walks
        the created_at index newest first, and reads every run when there are few matches
        (130 ms for 11 among 100 000). A few are rather sorted after the search index found
        them (0.3 ms); many are soon met on that walk (sorting 83 000 took 90 ms).
        Either way ordered by (created_at, id), as keyset pages (runs/paging.py) need.
        """
        if count > SEARCH_SORTS_AT_MOST or connections[self.db].vendor != "postgresql":
            return self.order_by("-created_at", "-id")
        # An expression the created_at index cannot serve.
        created = ExpressionWrapper(
            F("created_at") + timedelta(0), output_field=models.DateTimeField()
        )
        return self.order_by(created.desc(), "-id")
