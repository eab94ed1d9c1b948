"""Keyset paging of run lists (the runs list, the audit search): newest first, by (created_at,
id), a page named by the run it starts after (`after`, older runs) or ends before (`before`,
newer runs).

OFFSET paging reads and throws away every row before the page (page 100 of 50 rows read
5 000), and its pages shift when runs arrive: a run launched between two page loads pushes a
row of page 1 onto page 2, shown twice, and the "older" link skips one. A keyset page reads
only its own rows through the created_at index, whatever its depth, and its links name rows,
so new runs change nothing on the pages after the first.
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Q, QuerySet

from .models import Run

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cursor:
    """A run's place in the order: its creation time and id (the tie-breaker)."""

    created_at: datetime
    id: uuid.UUID

    @classmethod
    def of(cls, run: Run) -> "Cursor":
        return cls(run.created_at, run.pk)

    @property
    def token(self) -> str:
        """As a link carries it: microseconds since 1970, a dot, the id in hex."""
        return f"{(self.created_at - _EPOCH) // _MICROSECOND}.{self.id.hex}"

    @classmethod
    def parse(cls, token: str | None) -> "Cursor | None":
        """The cursor a link carried; None for anything else (the first page is shown)."""
        micros, _, hex_id = (token or "").partition(".")
        if not micros.isdigit() or len(micros) > 18:
            return None
        try:
            return cls(_EPOCH + int(micros) * _MICROSECOND, uuid.UUID(hex=hex_id))
        except (ValueError, OverflowError):
            return None

    def older(self) -> Q:
        """Runs after this one, newest first. The first condition alone is an index range."""
        return Q(created_at__lte=self.created_at) & (
            Q(created_at__lt=self.created_at) | Q(id__lt=self.id)
        )

    def newer(self) -> Q:
        return Q(created_at__gte=self.created_at) & (
            Q(created_at__gt=self.created_at) | Q(id__gt=self.id)
        )


@dataclass(frozen=True)
class Page:
    object_list: list[Run]
    is_first: bool  # nothing newer: new runs are pushed into it live
    newer: str | None  # `before` token of the page of newer runs
    older: str | None  # `after` token of the page of older runs


def page(runs: QuerySet, *, after: str | None, before: str | None, size: int) -> Page:
    """One page of `runs`, which must be ordered newest first by (created_at, id): the first
    page, the one after the run `after` names, or the one before the run `before` names. One
    query (two when a page of newer runs comes up short: the first page is read instead)."""
    cursor = Cursor.parse(after)
    if cursor is not None:
        rows = list(runs.filter(cursor.older())[: size + 1])
        return _page(rows[:size], more_older=len(rows) > size, more_newer=True)
    cursor = Cursor.parse(before)
    if cursor is not None:
        rows = list(runs.filter(cursor.newer()).reverse()[: size + 1])
        if len(rows) > size:
            return _page(rows[:size][::-1], more_older=True, more_newer=True)
        if len(rows) == size:
            return _page(rows[::-1], more_older=True, more_newer=False)
        # Fewer newer runs than a page: the first page, filled up with older ones.
    rows = list(runs[: size + 1])
    return _page(rows[:size], more_older=len(rows) > size, more_newer=False)


def _page(rows: list[Run], *, more_older: bool, more_newer: bool) -> Page:
    return Page(
        object_list=rows,
        is_first=not more_newer,
        newer=Cursor.of(rows[0]).token if more_newer and rows else None,
        older=Cursor.of(rows[-1]).token if more_older and rows else None,
    )
