"""The preview rules (agentkit/previews.py): what is stored, when two previews differ, and
how a change reads as a diff."""

from decimal import Decimal

from agentkit import previews
from agentkit.previews import Change


def test_a_tool_without_a_preview_stores_none():
    assert previews.compute(None, {"a": 1}) is None


def test_the_stored_preview_is_json_with_a_hash_of_its_changes():
    stored = previews.compute(
        lambda args: Change("order 1", {"refunded": Decimal("0")}, {"refunded": args["x"]}),
        {"x": Decimal("5.50")},
    )
    assert stored["changes"] == [
        {"subject": "order 1", "before": {"refunded": "0"}, "after": {"refunded": "5.50"}}
    ]
    again = previews.compute(
        lambda args: [Change("order 1", {"refunded": "0"}, {"refunded": "5.50"})], {}
    )
    assert again["hash"] == stored["hash"]
    assert not previews.differs(stored, again)


def test_any_change_in_what_would_change_gives_another_hash():
    one = previews.compute(lambda a: Change("order 1", {"left": "10"}, {"left": "5"}), {})
    other = previews.compute(lambda a: Change("order 1", {"left": "9"}, {"left": "4"}), {})
    assert previews.differs(one, other)
    assert previews.differs(one, None) and not previews.differs(None, None)


def test_a_preview_that_fails_is_stored_as_its_error_not_raised():
    def broken(args):
        raise LookupError("no order 9")

    stored = previews.compute(broken, {})
    assert stored["error"] == "the preview could not be computed (LookupError: no order 9)"
    assert stored["hash"]


def test_a_preview_too_large_to_read_says_so():
    stored = previews.compute(lambda a: Change("big", None, {"body": "x" * 30_000}), {})
    assert "too large" in stored["error"] and "changes" not in stored


def test_rows_mark_what_changes_and_diff_text_line_by_line():
    rows = previews.rows(
        {
            "subject": "e-mail",
            "before": {"to": "a@example.com", "body": "Hello\nOld line\nBye"},
            "after": {"to": "a@example.com", "body": "Hello\nNew line\nBye"},
        }
    )
    assert rows[0] == {
        "field": "to",
        "before": "a@example.com",
        "after": "a@example.com",
        "changed": False,
        "lines": [],
    }
    assert rows[1]["changed"]
    assert rows[1]["lines"] == [
        {"op": " ", "text": "Hello"},
        {"op": "-", "text": "Old line"},
        {"op": "+", "text": "New line"},
        {"op": " ", "text": "Bye"},
    ]


def test_a_new_record_has_every_field_changed_and_reads_as_new():
    shown = previews.view(
        previews.compute(lambda a: Change("new refund", None, {"amount": "5.00"}), {})
    )
    (change,) = shown["changes"]
    assert change["kind"] == "new"
    assert change["rows"] == [
        {"field": "amount", "before": "", "after": "5.00", "changed": True, "lines": []}
    ]


def test_the_text_form_lists_only_what_changes():
    stored = previews.compute(
        lambda a: [
            Change(
                "order 42", {"total": "900", "refunded": "0"}, {"total": "900", "refunded": "600"}
            ),
            Change("new refund", None, {"amount": "600"}),
        ],
        {},
    )
    assert previews.as_text(stored) == (
        "order 42: refunded 0 -> 600\nnew refund (new): amount = 600"
    )
    assert previews.as_text(None) == ""
