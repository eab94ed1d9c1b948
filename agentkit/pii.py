"""Personal data detectors and the PII policy an agent declares.
Why and how: docs/design/modules.md."""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("redact", "gate", "block")


@dataclass(frozen=True)
class Match:
    kind: str  # "email", "phone", "card", "iban", or a national id's name ("us_ssn")
    start: int
    end: int
    value: str


Detector = Callable[[str], list[Match]]

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"
)


def emails(text: str) -> list[Match]:
    return [Match("email", m.start(), m.end(), m.group()) for m in _EMAIL.finditer(text)]


# E.164 (+ and 8-15 digits, separators allowed) or a national number with a trunk 0 and
# separators ("020 7946 0958", "(555) 123-4567"). A bare run of digits is an order id or
# an amount far more often than a phone number, so it is not matched.
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}"
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"
    r"|\d{3}[.-]\d{3}[.-]\d{4}"
    r"|0\d{2,4}[ -]\d{3,4}[ -]?\d{3,4}"
    r")(?![\w])"
)
# A date or a time looks like a separated number ("2024-03-15"): never a phone.
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{2}[./-]\d{2}[./-]\d{2,4}$")


def phones(text: str) -> list[Match]:
    found = []
    for m in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if not 8 <= len(digits) <= 15 or _DATE.match(m.group().strip()):
            continue
        found.append(Match("phone", m.start(), m.end(), m.group()))
    return found


_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def cards(text: str) -> list[Match]:
    found = []
    for m in _CARD.finditer(text):
        # The pattern is greedy: a short number after a card ("4242 4242 4242 4242 123", a
        # CVV) joins the match and spoils its checksum, so the card may be the match less its
        # last group. One group only: each guess is a 1 in 10 chance of a false find.
        value = m.group()
        for _ in range(2):
            if _card_ok(value):
                found.append(Match("card", m.start(), m.start() + len(value), value))
                break
            trimmed = re.sub(r"[ -]\d+$", "", value)
            if trimmed == value:
                break
            value = trimmed
    return found


def _card_ok(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    # Card numbers are 13-19 digits, start 2-6 (Visa, Mastercard, Amex, Discover...) and
    # pass Luhn: one random digit run in ten passes Luhn, the prefix halves that again.
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_ok(digits)


_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")


def iban_ok(value: str) -> bool:
    compact = value.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def ibans(text: str) -> list[Match]:
    found = []
    for m in _IBAN.finditer(text):
        # The pattern is greedy: a word after an IBAN ("AT61 1904 3002 3457 3201 EUR") joins
        # the match and spoils its checksum. It can take in two (a group of four and a short
        # tail), so the IBAN may be the match less its last one or two parts; no more are
        # tried, as each guess is a 1 in 97 chance of a false find.
        value = m.group()
        for _ in range(3):
            if iban_ok(value):
                found.append(Match("iban", m.start(), m.start() + len(value), value))
                break
            if " " not in value:
                break
            value = value.rsplit(" ", 1)[0]
    return found


# National ids by pattern: the agent picks those of its countries. A pattern alone cannot
# tell an id from a reference number, so only distinctive shapes are offered here.
NATIONAL_IDS: dict[str, str] = {
    # US social security number: 3-2-4 with dashes, area not 000, 666 or 9xx.
    "us_ssn": r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b",
    # UK National Insurance number: two letters, six digits, A-D ("QQ 12 34 56 C").
    "uk_nino": r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
    r" ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b",
}


def national_id(name: str, pattern: str | None = None) -> Detector:
    """A detector for one national id: a known name (NATIONAL_IDS) or your own pattern."""
    regex = re.compile(pattern or NATIONAL_IDS[name])

    def detect(text: str) -> list[Match]:
        return [Match(name, m.start(), m.end(), m.group()) for m in regex.finditer(text)]

    detect.__name__ = name
    return detect


DETECTORS: dict[str, Detector] = {
    "email": emails,
    "phone": phones,
    "card": cards,
    "iban": ibans,
    **{name: national_id(name) for name in NATIONAL_IDS},
}


def detect(text: str, kinds: Iterable[str], patterns: dict[str, str] | None = None) -> list[Match]:
    """The matches of these detectors in `text`, in order, overlaps resolved: a card number
    is not also a phone number (the earlier-starting, then longer, match wins)."""
    found: list[Match] = []
    for kind in kinds:
        detector = DETECTORS.get(kind)
        if detector is None and patterns and kind in patterns:
            detector = national_id(kind, patterns[kind])
        if detector is not None:
            found.extend(detector(text))
    found.sort(key=lambda m: (m.start, -(m.end - m.start)))
    kept: list[Match] = []
    for m in found:
        if not kept or m.start >= kept[-1].end:
            kept.append(m)
    return kept


def mask(match: Match) -> str:
    """Enough of a value to recognise it, not enough to use it: "j***@example.com",
    "**** **** **** 4242", "+44 *** *** **89"."""
    value = match.value
    if match.kind == "email":
        local, _, domain = value.partition("@")
        return f"{local[:1]}***@{domain}"
    keep = 4 if match.kind in ("card", "iban") else 2
    # An IBAN's country and a phone's country code say little about the person.
    keep_head = 2 if match.kind == "iban" or value.startswith("+") else 0
    alnum = [i for i, ch in enumerate(value) if ch.isalnum()]
    shown = set(alnum[:keep_head]) | set(alnum[-keep:])
    return "".join(ch if (i in shown or not ch.isalnum()) else "*" for i, ch in enumerate(value))


def placeholder(kind: str) -> str:
    return f"[{kind} redacted]"


@dataclass(frozen=True)
class Finding:
    """One match, as the guard step and the approval card show it (never the whole value)."""

    kind: str
    field: str  # where: an argument's path ("body", "to[0]") or "output"
    masked: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "field": self.field, "masked": self.masked}


def scan(
    value: Any, kinds: Iterable[str], patterns: dict[str, Any] | None = None, path: str = ""
) -> tuple[Any, list[Finding]]:
    """Every string in `value` (arguments: dicts, lists, strings) scanned: (the value with
    each match replaced by its placeholder, the findings)."""
    kinds = tuple(kinds)
    if isinstance(value, str):
        matches = detect(value, kinds, patterns)
        if not matches:
            return value, []
        out, last = [], 0
        for m in matches:
            out.append(value[last : m.start])
            out.append(placeholder(m.kind))
            last = m.end
        out.append(value[last:])
        return "".join(out), [Finding(m.kind, path or "text", mask(m)) for m in matches]
    if isinstance(value, dict):
        cleaned, findings = {}, []
        for key, item in value.items():
            cleaned[key], found = scan(item, kinds, patterns, f"{path}.{key}" if path else key)
            findings += found
        return cleaned, findings
    if isinstance(value, list):
        cleaned_list, findings = [], []
        for i, item in enumerate(value):
            new, found = scan(item, kinds, patterns, f"{path}[{i}]")
            cleaned_list.append(new)
            findings += found
        return cleaned_list, findings
    return value, []


def mask_value(value: Any, kinds: Iterable[str], patterns: dict[str, Any] | None = None) -> Any:
    """A copy of `value` (JSON: dicts, lists, strings) with every match masked in place
    ("**** **** **** 4242"): what the timeline, the API, exports, live views, notifications
    and logs show of a run whose agent has a PII policy. Other values are kept as they are."""
    kinds = tuple(kinds)
    if isinstance(value, str):
        matches = detect(value, kinds, patterns)
        if not matches:
            return value
        out, last = [], 0
        for m in matches:
            out += [value[last : m.start], mask(m)]
            last = m.end
        out.append(value[last:])
        return "".join(out)
    if isinstance(value, dict):
        return {key: mask_value(item, kinds, patterns) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_value(item, kinds, patterns) for item in value]
    return value


def masker(policy: dict[str, Any] | None) -> Callable[[Any], Any]:
    """mask_value for an agent's PII policy (its `as_dict()`, as a run's config keeps it);
    the identity without one."""
    if not policy or not policy.get("detectors"):
        return lambda value: value
    kinds, patterns = tuple(policy["detectors"]), policy.get("patterns") or {}
    return lambda value: mask_value(value, kinds, patterns)


@dataclass(frozen=True)
class PiiPolicy:
    """What an agent does with personal data leaving the system.

    `on_tool_args` applies to the calls of `tools` (empty: every tool with side effects,
    the calls whose arguments reach the outside world: an e-mail, a refund note, a ticket);
    `on_output` to the run's final answer ("" leaves it alone). Each is "redact" (matches
    replaced by "[email redacted]"), "gate" (a person approves, seeing what was found) or
    "block" (a call is refused and the model told why; an output ends the run BLOCKED).
    """

    detectors: tuple[str, ...] = ("email", "phone", "card", "iban")
    on_tool_args: str = "gate"
    on_output: str = ""
    tools: tuple[str, ...] = ()
    # Your own national id patterns, by name: {"de_tax_id": r"\b\d{11}\b"}; name them in
    # `detectors` too.
    patterns: dict[str, str] = field(default_factory=dict)
    # Arguments not scanned, as "tool.argument": where a call goes is not what it leaks (an
    # e-mail's recipient is an address by design).
    exempt: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, action in (("on_tool_args", self.on_tool_args), ("on_output", self.on_output)):
            if action and action not in ACTIONS:
                raise ValueError(f"PiiPolicy.{name} must be one of {ACTIONS}, not {action!r}")
        unknown = [d for d in self.detectors if d not in DETECTORS and d not in self.patterns]
        if unknown:
            raise ValueError(f"PiiPolicy: unknown detectors {unknown}; known: {sorted(DETECTORS)}")
        for pattern in self.patterns.values():
            re.compile(pattern)  # a broken pattern fails at start-up, not in a run

    def as_dict(self) -> dict[str, Any]:
        return {
            "detectors": list(self.detectors),
            "on_tool_args": self.on_tool_args,
            "on_output": self.on_output,
            "tools": list(self.tools),
            "patterns": dict(self.patterns),
            "exempt": list(self.exempt),
        }
