"""A bound holds both ways and is never bypassed by omission, in a plan's steps
(approvals/plans/rules.py) as in a standing grant's envelope (approvals/grants/rules.py)."""

import pytest

from approvals.grants import rules as grants
from approvals.plans import rules as plan_matching
from approvals.plans.rules import OUTSIDE_ENVELOPE

LOOKUP = [{"tool": "lookup_order", "args": {"order_id": 13}}]
EMAIL = [
    {
        "tool": "send_customer_email",
        "envelope": [{"arg": "to", "op": "in", "value": ["a@example.com", "b@example.com"]}],
    }
]
REFUND = [
    {
        "tool": "issue_refund",
        "envelope": [
            {"arg": "order_id", "op": "eq", "value": 13},
            {"arg": "amount", "op": "lte", "value": "40.00"},
        ],
    }
]


# --- plans ------------------------------------------------------------------------------------
@pytest.mark.parametrize("order_id", [12, 14, "12", 0, -13])
def test_a_fixed_argument_is_that_value_neither_below_nor_above(order_id):
    verdict = plan_matching.check(LOOKUP, 0, "lookup_order", {"order_id": order_id})
    assert verdict.deviation == OUTSIDE_ENVELOPE
    assert verdict.reason == f"step 1 (lookup_order): order_id is {order_id}, the plan says 13"


def test_a_fixed_argument_left_out_or_added_deviates():
    missing = plan_matching.check(LOOKUP, 0, "lookup_order", {})
    assert missing.deviation == OUTSIDE_ENVELOPE
    assert "order_id is missing, the plan says 13" in missing.reason
    extra = plan_matching.check(LOOKUP, 0, "lookup_order", {"order_id": 13, "cascade": True})
    assert extra.deviation == OUTSIDE_ENVELOPE and "cascade is True" in extra.reason


@pytest.mark.parametrize("order_id", [12, 14])
def test_an_eq_bound_is_that_value_neither_below_nor_above(order_id):
    verdict = plan_matching.check(REFUND, 0, "issue_refund", {"order_id": order_id, "amount": 5})
    assert verdict.deviation == OUTSIDE_ENVELOPE
    assert f"order_id is {order_id}, the plan says 13" in verdict.reason


def test_a_call_that_omits_an_argument_bounded_by_in_deviates():
    verdict = plan_matching.check(EMAIL, 0, "send_customer_email", {"subject": "hello"})
    assert verdict.deviation == OUTSIDE_ENVELOPE
    assert "to is missing, not one of 'a@example.com', 'b@example.com'" in verdict.reason
    # Nor does a null value, or an empty one, stand for an allowed value.
    for value in (None, "", []):
        assert not plan_matching.check(EMAIL, 0, "send_customer_email", {"to": value}).matched
    assert plan_matching.check(EMAIL, 0, "send_customer_email", {"to": "a@example.com"}).matched


def test_a_call_that_omits_an_argument_bounded_by_eq_or_lte_deviates():
    for args in ({"amount": 5}, {"order_id": 13}, {}):
        verdict = plan_matching.check(REFUND, 0, "issue_refund", args)
        assert verdict.deviation == OUTSIDE_ENVELOPE, args
        assert "missing" in verdict.reason


# --- grants -----------------------------------------------------------------------------------
ENVELOPE = [
    {"arg": "amount", "op": "lte", "value": "50"},
    {"arg": "to", "op": "eq", "value": "acme"},
]


def test_a_grant_bound_is_never_bypassed_by_omission():
    assert grants.matches(ENVELOPE, {"amount": "50", "to": "acme"})
    assert not grants.matches(ENVELOPE, {"amount": "10"})  # `to` left out
    assert not grants.matches(ENVELOPE, {"to": "acme"})  # `amount` left out
    assert not grants.matches(ENVELOPE, {})


@pytest.mark.parametrize("bound", ["None", None, ""])
def test_an_eq_bound_that_reads_like_nothing_is_not_met_by_omission(bound):
    # Compared as text, a missing argument (None) read "None": an envelope pinning a field to
    # the word "None" (or to null, or to "") let every call that left it out through.
    envelope = [{"arg": "note", "op": "eq", "value": bound}]
    assert not grants.matches(envelope, {"amount": "1"})
    assert grants.matches(envelope, {"note": bound})


def test_an_eq_grant_bound_is_that_value_neither_below_nor_above():
    envelope = [{"arg": "order_id", "op": "eq", "value": 13}]
    assert grants.matches(envelope, {"order_id": 13}) and grants.matches(
        envelope, {"order_id": "13"}
    )
    assert not grants.matches(envelope, {"order_id": 12})
    assert not grants.matches(envelope, {"order_id": 14})
