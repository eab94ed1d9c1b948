"""Effect previews: what a gated call would change, computed before anyone decides.
Why and how: docs/design/modules.md."""

import difflib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A preview larger than this (in characters of JSON) is cut: it is read by a person.
MAX_CHARS = 20_000
# A text value with a line break (an e-mail's body) is diffed line by line.
_TEXT_DIFF_CONTEXT = 3


@dataclass(frozen=True)
class Change:
    """One record (or message) as it is and as the call would leave it. `before` None: it
    does not exist yet (an e-mail to be sent); `after` None: the call would remove it."""

    subject: str  # "order 42", "e-mail to ann@example.com"
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "before": self.before, "after": self.after}


Preview = Callable[[dict[str, Any]], "Change | list[Change]"]


def compute(preview: Preview | None, args: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form of a call's preview: {"changes": [...], "hash": ...} or, when the
    preview function fails, {"error": ..., "hash": ...}; None when the tool has none. The
    hash is what a later computation is compared with."""
    if preview is None:
        return None
    try:
        result = preview(args)
        changes = [result] if isinstance(result, Change) else list(result)
        body: dict[str, Any] = {"changes": [_jsonable(c.as_dict()) for c in changes]}
    except Exception as exc:  # a preview is advice: its failure is shown, never fatal
        body = {"error": f"the preview could not be computed ({type(exc).__name__}: {exc})"[:500]}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False)
    if len(text) > MAX_CHARS:
        body = {"error": f"the preview is too large to show ({len(text)} characters)"}
    return {**body, "hash": fingerprint(body)}


def fingerprint(body: dict[str, Any]) -> str:
    what = {k: v for k, v in body.items() if k != "hash"}
    text = json.dumps(what, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def differs(shown: dict[str, Any] | None, fresh: dict[str, Any] | None) -> bool:
    if shown is None or fresh is None:
        return shown is not fresh
    return shown.get("hash") != fresh.get("hash")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def rows(change: dict[str, Any]) -> list[dict[str, Any]]:
    """One change as diff rows for a person: each field with its value before and after and
    whether it changes; a changed text with line breaks also as its lines (+ added, - removed,
    " " kept). Values are text, for escaping by the template."""
    before, after = change.get("before"), change.get("after")
    names = list(dict.fromkeys([*(before or {}), *(after or {})]))
    out = []
    for name in names:
        old = (before or {}).get(name) if before is not None else None
        new = (after or {}).get(name) if after is not None else None
        row: dict[str, Any] = {
            "field": str(name),
            "before": "" if before is None or name not in before else _text(old),
            "after": "" if after is None or name not in after else _text(new),
            "changed": before is None or after is None or old != new,
            "lines": [],
        }
        if row["changed"] and ("\n" in row["before"] or "\n" in row["after"]):
            row["lines"] = [
                {"op": line[:1], "text": line[2:]}
                for line in difflib.ndiff(row["before"].splitlines(), row["after"].splitlines())
                if not line.startswith("?")
            ]
        out.append(row)
    return out


def view(preview: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored preview as templates show it: its changes with their rows, or its error."""
    if not preview:
        return None
    changes = [
        {
            "subject": str(c.get("subject", "")),
            "kind": "new" if c.get("before") is None else "gone" if c.get("after") is None else "",
            "rows": rows(c),
        }
        for c in preview.get("changes") or []
    ]
    return {"changes": changes, "error": preview.get("error", ""), "hash": preview.get("hash", "")}


def as_text(preview: dict[str, Any] | None, limit: int = 1500) -> str:
    """The preview in plain lines (Slack, e-mail): "order 42: refunded 0.00 -> 600.00"."""
    shown = view(preview)
    if shown is None:
        return ""
    if shown["error"]:
        return str(shown["error"])
    lines = []
    for change in shown["changes"]:
        label = f"{change['subject']}{' (new)' if change['kind'] == 'new' else ''}"
        for row in change["rows"]:
            if row["lines"]:
                lines.append(f"{label}: {row['field']}:")
                lines += [f"  {line['op']} {line['text']}" for line in row["lines"]]
            elif row["changed"] and change["kind"] == "new":
                lines.append(f"{label}: {row['field']} = {row['after']}")
            elif row["changed"]:
                lines.append(f"{label}: {row['field']} {row['before']} -> {row['after']}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value: Any) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
