"""Properties of `canonical_json` and `args_hash` (runs/models/canonical.py): one spelling per
value, whatever order a dict's keys were built in, so an approval binds to the call and not to how
its arguments happened to be assembled; a Decimal is spelled as its string (what the JSON
column stores and gives back), never as a float."""

import json
import random
from decimal import Decimal

from django.core.serializers.json import DjangoJSONEncoder
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.models import args_hash, canonical_json

FAST = settings(max_examples=80, deadline=None)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
decimals = st.decimals(
    allow_nan=False, allow_infinity=False, places=2, min_value=-(10**6), max_value=10**6
)


def reordered(value, rng: random.Random):
    """The same value with every dict's keys inserted in another order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: reordered(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [reordered(v, rng) for v in value]
    return value


@FAST
@given(st.text(min_size=1, max_size=20), arguments, st.randoms(use_true_random=False))
def test_the_order_of_keys_never_changes_a_calls_hash(tool, args, rng):
    again = reordered(args, rng)
    assert canonical_json(again) == canonical_json(args)
    assert args_hash(tool, again) == args_hash(tool, args)


@FAST
@given(arguments)
def test_canonical_json_reads_back_as_the_same_value(args):
    spelled = canonical_json(args)
    assert json.loads(spelled) == args
    # Read back and spelled again, it is the same text: one spelling per value.
    assert canonical_json(json.loads(spelled)) == spelled


@FAST
@given(st.text(min_size=1, max_size=20), arguments, st.text(max_size=8), json_values)
def test_any_change_of_tool_or_argument_changes_the_hash(tool, args, key, value):
    changed = {**args, key: value}
    if changed != args or type(args.get(key)) is not type(value):
        assert args_hash(tool, changed) != args_hash(tool, args)
    assert args_hash(tool + "x", args) != args_hash(tool, args)


@FAST
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=8), decimals)
def test_a_decimal_hashes_as_the_string_the_json_column_gives_back(tool, name, amount):
    with_decimal = {name: amount}
    stored = json.loads(json.dumps(with_decimal, cls=DjangoJSONEncoder))
    assert stored == {name: str(amount)}
    assert args_hash(tool, with_decimal) == args_hash(tool, stored)
    # A number is not its string: "500.00" sent as text and 500.0 sent as a number are
    # different calls, as the tool may treat them differently.
    assert args_hash(tool, {name: float(amount)}) != args_hash(tool, with_decimal)


@FAST
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=8), decimals)
def test_a_decimals_spelling_is_part_of_the_call(tool, name, amount):
    # 12.5 and 12.50 are the same amount but not the same text: the approver was shown one.
    longer = amount.quantize(Decimal("0.001"))
    assert str(longer) != str(amount)
    assert args_hash(tool, {name: longer}) != args_hash(tool, {name: amount})
