"""The mark_invisible filter: escaped first, then every hidden character made visible."""

import pytest
from django.template import Context, Template

from agentkit.templatetags.untrusted import is_invisible, mark_invisible


def render(value) -> str:
    return Template("{% load untrusted %}{{ v|mark_invisible }}").render(Context({"v": value}))


def test_markup_stays_escaped_and_inert():
    html = render("<script>alert(1)</script><img src=x onerror=\"x()\"> & 'q'")
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&amp;" in html and "&quot;x()&quot;" in html and "&#x27;q&#x27;" in html


def test_a_right_to_left_override_cannot_disguise_an_address():
    html = render("\u202eevil\u202c@example.com")
    assert "\u202e" not in html and "\u202c" not in html
    assert (
        '<span class="invisible-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">\u27e8U+202E\u27e9'
        "</span>evil"
    ) in html
    assert "\u27e8U+202C\u27e9</span>@example.com" in html


@pytest.mark.parametrize(
    "char",
    [
        *"\u202a\u202b\u202c\u202d\u202e",  # bidi embeddings and overrides
        *"\u2066\u2067\u2068\u2069",  # bidi isolates
        *"\u200e\u200f\u061c",  # bidi marks
        *"\u200b\u200c\u200d\u2060\ufeff",  # zero-width characters
        "\u00ad",  # soft hyphen
        "\U000e0041",  # tag character
        *"\u00a0\u2002\u2009\u202f\u3000",  # spaces other than U+0020
        *"\u2028\u2029",  # line and paragraph separators
        *"\x00\x07\x1b\x7f\x85",  # control characters
        "\ue000",  # private use
        *"\u3164\u115f\ufe0f\u034f",  # invisible letters, variation selector, joiner
    ],
)
def test_each_invisible_class_is_marked(char):
    html = render(f"a{char}b")
    assert char not in html
    code = f"U+{ord(char):04X}"
    assert f'<span class="invisible-char" title="{code}' in html
    assert f"\u27e8{code}\u27e9</span>b" in html


@pytest.mark.parametrize("text", ["plain text", "line\nbreak\ttab", "Ünïcödé 日本語 عربي 🙂"])
def test_ordinary_text_is_left_as_it_is(text):
    assert render(text) == text
    assert not any(is_invisible(c) for c in text)


def test_markers_cannot_be_forged_or_broken_out_of():
    # A value that spells a marker is escaped like any text; a name cannot end the attribute.
    html = render('<span class="invisible-char" title="x">')
    assert "<span" not in html
    assert mark_invisible(None) == ""
