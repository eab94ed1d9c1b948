"""Keyset paging of the API's lists (runs, a run's steps and checkpoints, approvals, grants):
an opaque `next_cursor` naming the last row returned; counts stop at COUNT_CAP.
Why and how: docs/design/modules.md.
"""

import base64
from typing import Any

from django.db.models import QuerySet
from ninja.errors import ValidationError

COUNT_CAP = 10_000
# Beyond every list's own position token (the longest, an approval's, is about 60 characters).
CURSOR_MAX_LENGTH = 200
CURSOR_HELP = "A page's next_cursor: the page after it (an opaque token; a bad one is a 422)."


def encode(position: str) -> str:
    """The cursor a client gets for a list's position token."""
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def decode(cursor: str) -> str:
    """The position token a cursor carries ("" for one that is not base64 text)."""
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def bad_cursor(message: str = "not a page's cursor") -> ValidationError:
    """The error for a cursor a list cannot read: 422, like any bad query parameter."""
    return ValidationError([{"type": "value_error", "loc": ["query", "cursor"], "msg": message}])


def seq_of(cursor: str) -> int:
    """A timeline's position (steps, checkpoints): a seq."""
    position = decode(cursor)
    if not position.isdigit() or len(position) > 12:
        raise bad_cursor()
    return int(position)


def capped_count(rows: QuerySet) -> dict[str, Any]:
    """`count` and `count_capped`: at most COUNT_CAP + 1 rows are counted."""
    count = rows.order_by()[: COUNT_CAP + 1].count()
    return {"count": min(count, COUNT_CAP), "count_capped": count > COUNT_CAP}
