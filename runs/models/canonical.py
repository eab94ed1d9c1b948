"""The one JSON spelling of a value: what hashes (the timeline's chain, a call's identity) and
idempotency keys are made from. Pure: imports no model."""

import hashlib
import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces. Hashes and idempotency keys use it."""
    return _as_stored_spelling(_encoded(value), value, _encoded)


def _encoded(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)


def _as_stored_spelling(text: str, value: Any, encode) -> str:
    """`text` (the encoding of `value`), unless a float in it is one a Postgres jsonb column
    gives back otherwise: -0.0 comes back 0.0, 1e+16 the integer 10000000000000000. Such a
    step's hash, made from what was written, would not match what is read, and the chain
    would look tampered with. Rare, so looked for in the text (a string holding "e+" costs
    only a second encoding)."""
    if "e+" not in text and "-0.0" not in text:
        return text
    return encode(_floats_as_stored(value))


def _floats_as_stored(value: Any) -> Any:
    if isinstance(value, float):
        if value == 0:
            return 0.0
        return int(value) if "e+" in repr(value) else value
    if isinstance(value, dict):
        return {key: _floats_as_stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_floats_as_stored(item) for item in value]
    return value


# canonical_json for values that are JSON already (made once: json.dumps with `cls` builds an
# encoder per call). It raises TypeError where canonical_json would turn a date or a Decimal
# into a string: the JSON a database stores is such a value, which Django's JSONField stores.
_plain_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def args_hash(tool: str, args: dict) -> str:
    """The identity of a tool call: an approval binds to it, and the engine executes only a
    call whose hash is the one approved."""
    return hashlib.sha256(canonical_json({"tool": tool, "args": args}).encode()).hexdigest()
