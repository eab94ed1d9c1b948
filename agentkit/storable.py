"""Text a database can store: the one check every way into agentops applies to what it parses.

Two things decode from valid JSON but cannot be stored: a NUL character (PostgreSQL refuses
it in text and jsonb) and a lone UTF-16 surrogate such as `"a\\ud800b"` (not a character at
all: it cannot be encoded as UTF-8, so SQLite, psycopg and the steps' hash chain all fail on
it, and PostgreSQL's jsonb refuses the escape). Either one reaching a save was a 500, after
some rows of the request may already have been written. The request middleware refuses them
in every query, form and JSON body (agentops/middleware.py); code that parses JSON held
inside a form field or a signed payload uses `loads` here.
"""

import json
import re
from typing import Any

NUL_MESSAGE = "the request contains a NUL character (\\x00), which is not accepted"
SURROGATE_MESSAGE = (
    "the request contains a lone UTF-16 surrogate (such as \\ud800), which is not text; "
    "send characters outside the Basic Multilingual Plane as a surrogate pair or as UTF-8"
)
# A cheap test on raw JSON before it is parsed: the escapes that may decode to either.
_SUSPECT = re.compile(rb"\\u0000|\x00|\\u[dD][89a-fA-F]")
_LONE = re.compile("[\ud800-\udfff]")


class UnstorableText(ValueError):
    """Parsed JSON holding a NUL or a lone surrogate (the message says which)."""


def problem(value: Any) -> str | None:
    """Why `value` (parsed JSON, keys included) cannot be stored, or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return NUL_MESSAGE
        if _LONE.search(value):
            return SURROGATE_MESSAGE
        return None
    if isinstance(value, dict):
        items = value.items()
        return next((p for k, v in items if (p := problem(k) or problem(v))), None)
    if isinstance(value, list | tuple):
        return next((p for v in value if (p := problem(v))), None)
    return None


def suspect(raw: bytes) -> bool:
    """Whether raw JSON may hold what `problem` refuses (False: it cannot)."""
    return _SUSPECT.search(raw) is not None


def loads(raw: str | bytes, **kwargs: Any) -> Any:
    """json.loads, raising UnstorableText (a ValueError) for a NUL or a lone surrogate."""
    value = json.loads(raw, **kwargs)
    why = problem(value)
    if why:
        raise UnstorableText(why)
    return value
