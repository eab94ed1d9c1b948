"""HTML assertions for untrusted content: parse the page like a browser's tokenizer would."""

from html.parser import HTMLParser

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class _Scan(HTMLParser):
    def __init__(self, marker: str):
        super().__init__(convert_charrefs=True)
        self.marker = marker
        self.stack: list[tuple[str, dict]] = []
        self.hits: list[bool] = []  # for each text containing the marker: inside hx-disable?
        self.elements: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag not in VOID:
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if self.marker in data:
            self.hits.append(any("hx-disable" in a for _, a in self.stack))


def untrusted_placements(html: str, marker: str) -> list[bool]:
    """For each text node that contains `marker`, whether it sits inside an hx-disable element."""
    scan = _Scan(marker)
    scan.feed(html)
    return scan.hits


def elements(html: str) -> list[tuple[str, dict]]:
    scan = _Scan("\0")
    scan.feed(html)
    return scan.elements


def assert_payload_inert(html: str, marker: str = "__pwned") -> None:
    """The XSS payload appears only as text, always inside hx-disable, never as markup."""
    placements = untrusted_placements(html, marker)
    assert placements, "payload not shown at all"
    assert all(placements), "payload text outside an hx-disable container"
    for tag, attrs in elements(html):
        assert tag != "script" or set(attrs) == {"src", "defer"}, (tag, attrs)
        assert "onerror" not in attrs, (tag, attrs)
        assert attrs.get("hx-post") != "/runs/new/", (tag, attrs)
        assert not (tag == "div" and attrs.get("id") == "nav-pending-count"), (tag, attrs)
