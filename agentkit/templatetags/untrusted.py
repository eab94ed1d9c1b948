"""Untrusted text shown as it really is: invisible and direction-changing characters marked.

Model and tool output can carry characters a reader cannot see but that change what they
read: a right-to-left override turns "\u202eevil\u202c@example.com" into what looks like
"live@example.com", a zero-width space splits a word a filter looks for. `mark_invisible`
escapes the text first, then replaces each such character with a visible, labelled marker.
"""

import unicodedata
from itertools import groupby
from typing import Any

from django import template
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeData, SafeString

register = template.Library()

# Invisible or confusable in every font, though not in a category below: Hangul fillers,
# the combining grapheme joiner, variation selectors, the Braille blank.
EXTRA_INVISIBLE = frozenset(
    [
        *(0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x2800, 0x3164, 0xFFA0),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)
# Line and tab breaks are what they look like in a <pre>.
VISIBLE_CONTROLS = frozenset("\n\r\t")


def is_invisible(char: str) -> bool:
    """Whether a reader could miss or misread this character: format characters (Cf: bidi
    embeddings, overrides and isolates U+202A-202E, U+2066-2069, zero-width U+200B-200D,
    U+2060, U+FEFF, soft hyphen, tags), spaces other than U+0020 (Zs), line and paragraph
    separators, control characters other than line breaks and tabs, private-use and
    unassigned code points, and a few invisible letters and marks."""
    if char == " " or char in VISIBLE_CONTROLS:
        return False
    if ord(char) in EXTRA_INVISIBLE:
        return True
    return unicodedata.category(char) in {"Cf", "Zs", "Zl", "Zp", "Cc", "Co", "Cn", "Cs"}


def _name(char: str) -> str:
    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "")
    return f"{code} {name}" if name else code


def _marker(char: str) -> SafeString:
    code = f"U+{ord(char):04X}"
    return format_html(
        '<span class="invisible-char" title="{}">\u27e8{}\u27e9</span>', _name(char), code
    )


@register.filter
def mark_invisible(value: Any) -> SafeString:
    """The value escaped for HTML, with each invisible or direction-changing character
    replaced by a visible marker such as ⟨U+202E⟩ (its name in the title). Text already
    marked safe (trusted markup) is not escaped again, as autoescaping would not."""
    if value is None:
        return SafeString("")
    text = str(value)
    if not any(map(is_invisible, text)):
        return conditional_escape(value)
    trusted = isinstance(value, SafeData)
    # Runs of ordinary text are escaped by format_html_join (unless already safe); each
    # invisible character becomes a marker built by format_html.
    parts: list[str] = []
    for invisible, chars in groupby(text, key=is_invisible):
        if invisible:
            parts.extend(_marker(c) for c in chars)
        else:
            run = "".join(chars)
            parts.append(SafeString(run) if trusted else run)
    return format_html_join("", "{}", ((part,) for part in parts))
