"""The PII detectors: what they find, what they must not (order ids, amounts, dates, digits
that fail a checksum), how findings are masked, and the policy's declaration checks."""

import dataclasses
from datetime import timedelta

import pytest

from agentkit import pii
from agentkit.agents import get_agent, register
from agentkit.pii import PiiPolicy
from agentkit.tools import Blast, RateLimit, tool

ALL = ("email", "phone", "card", "iban", "us_ssn", "uk_nino")


def kinds(text: str, detectors=ALL) -> list[tuple[str, str]]:
    return [(m.kind, m.value) for m in pii.detect(text, detectors)]


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "write to jane.doe+shop@mail.example.co.uk now",
            ("email", "jane.doe+shop@mail.example.co.uk"),
        ),
        ("call +44 20 7946 0958", ("phone", "+44 20 7946 0958")),
        ("call +14155552671", ("phone", "+14155552671")),
        ("call (555) 123-4567", ("phone", "(555) 123-4567")),
        ("call 555-123-4567", ("phone", "555-123-4567")),
        ("ring 020 7946 0958", ("phone", "020 7946 0958")),
        ("card 4242 4242 4242 4242", ("card", "4242 4242 4242 4242")),
        ("card 4111-1111-1111-1111", ("card", "4111-1111-1111-1111")),
        ("amex 378282246310005", ("card", "378282246310005")),
        ("iban GB82 WEST 1234 5698 7654 32", ("iban", "GB82 WEST 1234 5698 7654 32")),
        ("iban DE89370400440532013000", ("iban", "DE89370400440532013000")),
        ("ssn 123-45-6789", ("us_ssn", "123-45-6789")),
        ("NI AB 12 34 56 C", ("uk_nino", "AB 12 34 56 C")),
    ],
)
def test_it_finds_personal_data(text, expected):
    assert kinds(text) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "order 1234567890123 shipped",  # a long order id is not a card (Luhn fails, no prefix)
        "order #100234 and order 42",
        "refund 1234.56 EUR, total 689.00",
        "delivered on 2024-03-15 at 14:30, or 15/03/2024",
        "card 4242 4242 4242 4241",  # fails Luhn
        "iban GB83 WEST 1234 5698 7654 32",  # fails mod-97
        "tracking 1Z999AA10123456784",
        "ssn-like 000-12-3456 and 666-12-3456",  # never issued
        "version 1.2.3, port 8080, year 2024",
        "user@localhost has no domain",
    ],
)
def test_it_leaves_look_alikes_alone(text):
    assert kinds(text) == []


def test_checksums():
    assert pii.luhn_ok("4242424242424242") and not pii.luhn_ok("4242424242424241")
    assert pii.iban_ok("GB82WEST12345698765432") and not pii.iban_ok("GB82WEST12345698765433")


def test_each_value_is_found_once_as_what_it_is():
    assert kinds("card 5555 5555 5555 4444 or +44 20 7946 0958") == [
        ("card", "5555 5555 5555 4444"),
        ("phone", "+44 20 7946 0958"),
    ]


@pytest.mark.parametrize(
    "text, masked",
    [
        ("jane.doe@example.com", "j***@example.com"),
        ("4242 4242 4242 4242", "**** **** **** 4242"),
        ("+44 20 7946 0958", "+44 ** **** **58"),
        ("GB82 WEST 1234 5698 7654 32", "GB** **** **** **** **54 32"),
        ("123-45-6789", "***-**-**89"),
    ],
)
def test_findings_are_masked(text, masked):
    (match,) = pii.detect(text, ALL)
    assert pii.mask(match) == masked


def test_scan_redacts_every_string_and_says_where():
    cleaned, findings = pii.scan(
        {"to": ["a@example.com", "b@example.com"], "note": {"text": "card 4242424242424242"}},
        ("email", "card"),
    )
    assert cleaned == {
        "to": ["[email redacted]", "[email redacted]"],
        "note": {"text": "card [card redacted]"},
    }
    assert [(f.kind, f.field) for f in findings] == [
        ("email", "to[0]"),
        ("email", "to[1]"),
        ("card", "note.text"),
    ]


def test_an_agent_may_add_its_own_national_id_pattern():
    policy = PiiPolicy(detectors=("de_tax_id",), patterns={"de_tax_id": r"\b\d{11}\b"})
    cleaned, findings = pii.scan("id 12345678901", policy.detectors, policy.patterns)
    assert cleaned == "id [de_tax_id redacted]" and findings[0].kind == "de_tax_id"


def test_a_policy_is_checked_when_declared():
    with pytest.raises(ValueError, match="on_output"):
        PiiPolicy(on_output="shout")
    with pytest.raises(ValueError, match="unknown detectors"):
        PiiPolicy(detectors=("dna",))


def test_guards_name_the_agents_own_tools_with_side_effects():
    agent = get_agent("customer-reply")
    with pytest.raises(LookupError, match="not one of its tools"):
        register(
            dataclasses.replace(
                agent, slug="x", rate_limits={"issue_refund": RateLimit(1, per=timedelta(hours=1))}
            )
        )
    with pytest.raises(ValueError, match="side effects"):
        register(
            dataclasses.replace(
                agent, slug="x", rate_limits={"lookup_order": RateLimit(1, per=timedelta(hours=1))}
            )
        )
    with pytest.raises(LookupError, match="PII guard for tools it lacks"):
        register(dataclasses.replace(agent, slug="x", pii=PiiPolicy(tools=("issue_refund",))))
    with pytest.raises(ValueError, match="side effects"):
        tool(reversible=True, blast=Blast.NONE, rate_limit=RateLimit(1, per=timedelta(hours=1)))(
            lambda: None
        )
    assert RateLimit(20, per=timedelta(hours=1)).describe() == "at most 20 per hour"
    assert RateLimit(5, per=timedelta(minutes=15)).describe() == "at most 5 per 15 minutes"


def test_a_card_followed_by_a_short_number_is_found_without_it():
    # The greedy pattern takes the CVV in and the checksum fails: the card itself is found.
    assert kinds("card 4242 4242 4242 4242 123 thanks") == [("card", "4242 4242 4242 4242")]
    masked, findings = pii.scan("card 4242-4242-4242-4242-123", ["card"])
    assert "4242-4242-4242-4242" not in masked and [f.kind for f in findings] == ["card"]
