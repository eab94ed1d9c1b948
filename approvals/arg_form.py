"""The approver's editable argument form, generated from the tool's JSON schema.

Each argument is one field named `arg_<name>` whose text starts as the server-parsed value.
Only fields whose text changed are parsed back; an untouched field keeps its original value
exactly (no float/str drift), so "edit-and-approve" with no edit approves the same call.
"""

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pydantic

from agentkit import storable
from agentkit.tools import Tool, get_tool

TEXTAREA_FROM = 80  # characters; longer (or multi-line) values get a textarea


@dataclass
class ArgField:
    name: str
    kind: str  # "text", "textarea", "number", "checkbox", "json"
    text: str  # the original value as the field shows it
    type_label: str
    description: str
    required: bool
    current: str = ""  # what the field shows now (the original, or what was submitted)
    errors: list[str] = field(default_factory=list)

    @property
    def html_name(self) -> str:
        return f"arg_{self.name}"

    @property
    def checked(self) -> bool:
        return self.text == "true"


def _types(prop: dict) -> set[str]:
    if "type" in prop:
        t = prop["type"]
        return set(t) if isinstance(t, list) else {t}
    out: set[str] = set()
    for option in prop.get("anyOf", []) + prop.get("oneOf", []):
        out |= _types(option)
    return out


def _type_label(tool: Tool | None, name: str, types: set[str]) -> str:
    declared = tool.args_model.model_fields.get(name) if tool else None
    if declared is not None and declared.annotation is Decimal:
        # Its schema says "number | string" (digits may come as a string so none is lost);
        # the tool receives a number.
        return "decimal number"
    return " | ".join(sorted(types)) or "any"


def call_text(tool: Tool | None, args: dict) -> str:
    """The call's arguments as the tool will receive them: parsed by its schema (defaults
    filled in), each value in its type. A decimal is a number with its own digits (689.00),
    not the string JSON would make of it."""
    value: Any = args
    if tool is not None:
        try:
            value = tool.args_model.model_validate(args).model_dump(mode="python")
        except pydantic.ValidationError:
            value = args  # what the model proposed, as it is: the decision refuses it anyway
    decimals: list[str] = []

    def encode(obj: Any) -> Any:
        if isinstance(obj, Decimal) and obj.is_finite():
            decimals.append(str(obj))
            return f"\x00{len(decimals) - 1}\x00"
        return str(obj)

    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=encode)
    return re.sub(r'"\\u0000(\d+)\\u0000"', lambda m: decimals[int(m[1])], text)


def _kind(types: set[str], value: Any) -> str:
    plain = types - {"null"}
    if plain == {"boolean"}:
        return "checkbox"
    if plain <= {"integer", "number"} and plain:
        return "number"
    if plain == {"string"} or (plain and plain <= {"string", "number", "integer"}):
        text = "" if value is None else str(value)
        return "textarea" if len(text) > TEXTAREA_FROM or "\n" in text else "text"
    return "json"


def as_text(value: Any, kind: str) -> str:
    if kind == "checkbox":
        return "true" if value else "false"
    if kind == "json":
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return "" if value is None else str(value)


def fields_for(tool_name: "str | Tool | None", args: dict) -> list[ArgField]:
    """The form's fields for a call's arguments: by the tool's schema (a Tool, or a name in
    the registry), and every argument the schema does not list."""
    tool = tool_name if isinstance(tool_name, Tool) else get_tool(tool_name or "")
    schema = tool.input_schema() if tool else {"properties": {}}
    props: dict = dict(schema.get("properties", {}))
    for name in args:  # never hide an argument the schema does not list
        props.setdefault(name, {})
    required = set(schema.get("required", []))
    out = []
    for name, prop in props.items():
        value = args.get(name, prop.get("default"))
        types = _types(prop)
        kind = _kind(types, value) if types else "json"
        out.append(
            ArgField(
                name=name,
                kind=kind,
                text=as_text(value, kind),
                type_label=_type_label(tool, name, types),
                description=str(prop.get("description", "")),
                required=name in required,
            )
        )
    return out


FORM_MARKER = "args_form"  # a hidden field: the POST came from the argument form


def _submitted(f: ArgField, post) -> str | None:
    """What the form says for this field, or None when the POST did not carry it. An unchecked
    checkbox is absent from a POST, so it counts as "false" only when the form was posted."""
    if f.kind == "checkbox":
        if FORM_MARKER not in post:
            return None
        return "true" if post.get(f.html_name) else "false"
    value = post.get(f.html_name)
    return None if value is None else value.replace("\r\n", "\n")


def changed(fields: list[ArgField], post) -> list[str]:
    """The names of the arguments whose field text differs from the proposed call's."""
    return [f.name for f in fields if (text := _submitted(f, post)) is not None and text != f.text]


def parse(fields: list[ArgField], original: dict, post) -> tuple[dict, dict[str, list[str]]]:
    """The edited arguments from the POST, and per-field errors. Untouched fields keep the
    original value; changed ones are parsed by the field's kind (the decision service then
    validates the whole call against the tool's schema)."""
    args = dict(original)
    errors: dict[str, list[str]] = {}
    for f in fields:
        submitted = _submitted(f, post)
        if submitted is None or submitted == f.text:
            continue
        if f.kind == "checkbox":
            args[f.name] = submitted == "true"
        elif f.kind == "number":
            try:
                args[f.name] = int(submitted) if f.type_label == "integer" else float(submitted)
            except ValueError:
                errors[f.html_name] = ["must be a number"]
        elif f.kind == "json":
            try:
                args[f.name] = storable.loads(submitted)
            except ValueError as exc:
                errors[f.html_name] = [f"must be JSON: {exc}"]
        else:
            args[f.name] = submitted
    return args, errors


@dataclass
class ArgChange:
    name: str
    before: str
    after: str


def changes(fields: list[ArgField], original: dict, final: dict) -> list[ArgChange]:
    """How `final` (the server-parsed, validated call) differs from the proposed one, as the
    fields would show each value. Values that read the same are not listed."""
    kinds = {f.name: f.kind for f in fields}
    out = []
    for name in [*kinds, *(n for n in final if n not in kinds)]:
        if name not in final and name not in original:
            continue
        kind = kinds.get(name, "json")
        before = as_text(original.get(name), kind) if name in original else "(absent)"
        after = as_text(final.get(name), kind) if name in final else "(absent)"
        if before != after:
            out.append(ArgChange(name=name, before=before, after=after))
    return out
