"""The rules of plans approved once, as pure functions: which call matches the next planned
step, each kind of deviation and the words that say which, and what an edit may change."""

from approvals.plans import edits as plan_edits
from approvals.plans import rules as plan_matching
from approvals.plans.rules import MORE_CALLS, OTHER_TOOL, OUT_OF_ORDER, OUTSIDE_ENVELOPE

STEPS = [
    {"tool": "lookup_order", "args": {"order_id": 13}},
    {
        "tool": "issue_refund",
        "envelope": [
            {"arg": "order_id", "op": "eq", "value": 13},
            {"arg": "amount", "op": "lte", "value": "40.00"},
        ],
    },
    {
        "tool": "send_customer_email",
        "envelope": [{"arg": "to", "op": "in", "value": ["a@example.com", "b@example.com"]}],
    },
]
REFUND = {"order_id": 13, "amount": "40.00", "reason": ""}


def test_the_next_step_within_its_bounds_matches():
    assert plan_matching.check(STEPS, 0, "lookup_order", {"order_id": 13}).step == 0
    verdict = plan_matching.check(STEPS, 1, "issue_refund", {**REFUND, "amount": "12.5"})
    assert verdict.matched and verdict.step == 1
    # Arguments an envelope does not name are free; an allowed value may be any of the list.
    assert plan_matching.check(STEPS, 2, "send_customer_email", {"to": "b@example.com"}).matched


def test_fixed_arguments_must_be_the_call_as_planned():
    assert plan_matching.check(STEPS, 0, "lookup_order", {"order_id": "13"}).matched
    verdict = plan_matching.check(STEPS, 0, "lookup_order", {"order_id": 14})
    assert verdict.deviation == OUTSIDE_ENVELOPE
    assert verdict.reason == "step 1 (lookup_order): order_id is 14, the plan says 13"


def test_arguments_outside_the_envelope_deviate_and_say_which_bound():
    over = plan_matching.check(STEPS, 1, "issue_refund", {**REFUND, "amount": "40.01"})
    assert over.deviation == OUTSIDE_ENVELOPE and over.step == 1
    assert "amount is 40.01, above the planned 40.00" in over.reason
    other = plan_matching.check(STEPS, 1, "issue_refund", {**REFUND, "order_id": 12})
    assert "order_id is 12, the plan says 13" in other.reason
    to = plan_matching.check(STEPS, 2, "send_customer_email", {"to": "c@example.com"})
    assert to.deviation == OUTSIDE_ENVELOPE
    assert "not one of 'a@example.com', 'b@example.com'" in to.reason
    # A bound is never bypassed by leaving the argument out.
    missing = plan_matching.check(STEPS, 1, "issue_refund", {"order_id": 13})
    assert missing.deviation == OUTSIDE_ENVELOPE and "amount is missing" in missing.reason


def test_a_tool_the_plan_does_not_name_is_another_tool():
    verdict = plan_matching.check(STEPS, 1, "delete_order", {"order_id": 13})
    assert verdict.deviation == OTHER_TOOL and verdict.step is None
    assert verdict.reason == (
        "another tool: delete_order is not in the plan; the next step is 2 (issue_refund)"
    )


def test_a_later_step_before_the_next_is_out_of_order():
    verdict = plan_matching.check(STEPS, 0, "issue_refund", REFUND)
    assert verdict.deviation == OUT_OF_ORDER and verdict.step == 1
    assert verdict.reason == (
        "out of order: issue_refund is step 2, but step 1 (lookup_order) comes first"
    )


def test_a_taken_step_called_again_is_more_calls_than_planned():
    verdict = plan_matching.check(STEPS, 2, "issue_refund", REFUND)
    assert verdict.deviation == MORE_CALLS and verdict.step == 1
    assert "issue_refund was planned 1 time(s), and step 2 is already taken" in verdict.reason


def test_any_call_after_the_last_step_is_more_calls_than_planned():
    again = plan_matching.check(STEPS, 3, "send_customer_email", {"to": "a@example.com"})
    assert again.deviation == MORE_CALLS
    other = plan_matching.check(STEPS, 3, "lookup_customer", {})
    assert other.deviation == MORE_CALLS
    assert "all 3 planned steps are taken" in other.reason


def test_bounds_read_as_words():
    assert plan_matching.describe(STEPS[0]) == "order_id = 13"
    assert plan_matching.describe(STEPS[1]) == "order_id = 13, amount <= 40.00"
    assert plan_matching.describe(STEPS[2]) == "to one of 'a@example.com', 'b@example.com'"
    assert plan_matching.describe({"tool": "x"}) == "any arguments"


def _plan(steps):
    return {"goal": "refund", "steps": steps}


def test_an_edit_may_remove_steps_and_change_bound_values():
    lowered = [
        STEPS[0],
        {
            **STEPS[1],
            "envelope": [STEPS[1]["envelope"][0], {"arg": "amount", "op": "lte", "value": "25"}],
        },
    ]
    assert plan_edits.check_edit(_plan(STEPS), _plan(lowered)) == {}
    assert plan_edits.check_edit(_plan(STEPS), _plan([STEPS[2]])) == {}


def test_an_edit_may_not_add_reorder_or_retarget_steps_nor_change_the_goal():
    original = _plan(STEPS)
    assert "steps" in plan_edits.check_edit(original, _plan([*STEPS, STEPS[0]]))
    assert "steps" in plan_edits.check_edit(original, _plan([STEPS[1], STEPS[0]]))
    retarget = {**STEPS[0], "tool": "lookup_customer"}
    assert "steps" in plan_edits.check_edit(original, _plan([retarget]))
    refixed = {**STEPS[0], "args": {"order_id": 99}}
    assert "steps" in plan_edits.check_edit(original, _plan([refixed]))
    loosened = {**STEPS[1], "envelope": STEPS[1]["envelope"][:1]}
    assert "steps" in plan_edits.check_edit(original, _plan([loosened]))
    assert "goal" in plan_edits.check_edit(original, {"goal": "other", "steps": STEPS})
    assert "steps" in plan_edits.check_edit(original, _plan([]))
