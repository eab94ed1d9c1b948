"""The tools of external calls, as the gate policy and the decision service see them.

An external agent's tool runs in its own process, never here: its Tool carries only what
policy and edits need (name, risk, the schema arguments are checked against). The risk is the
registered tool's, raised by the call's hints (an agent may say one call is riskier than its
tool usually is, never that it is safer); a tool nobody registered is irreversible with a
medium blast radius, raised by its hints likewise, so the base table gates an unknown call.
"""

from dataclasses import dataclass, field
from typing import Any

import pydantic

from agentkit.tools import Blast, Tool, ToolArgsError, ToolError

from .models import BLAST_LABELS, ExternalTool

EXTERNAL_USE_PREFIX = "ext-"  # Approval.tool_use_id of an external call: "ext-<call id>"


class HintError(ValueError):
    """Risk hints that are not {"reversible": bool, "blast": "<level>"}."""


class _AnyArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


def _runs_elsewhere(**kwargs: Any) -> Any:
    raise ToolError("an external agent's tool runs in the agent's own process")


@dataclass(frozen=True)
class ExternalToolSpec(Tool):
    """A Tool whose arguments are checked against the JSON schema its agent registered."""

    schema: dict = field(default_factory=lambda: {"type": "object"})

    def input_schema(self) -> dict:
        return dict(self.schema)

    def validate(self, args: Any) -> dict:
        if not isinstance(args, dict):
            raise ToolArgsError(f"arguments for {self.name} must be an object")
        errors = schema_errors(self.schema, args)
        if errors:
            raise ToolArgsError(
                f"invalid arguments for {self.name}: "
                + "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in errors
                ),
                errors,
            )
        return args


def metadata_for_call(registered: ExternalTool | None, name: str, hints: Any) -> dict:
    """The tool metadata one call is judged by: the registered tool's (or, for a tool nobody
    registered, irreversible with a medium blast radius), raised by `hints`. Hints come from
    the agent, which must never pick its own gate: they can only add risk."""
    if hints is None:
        hints = {}
    if not isinstance(hints, dict) or set(hints) - {"reversible", "blast"}:
        raise HintError('hints must be an object with "reversible" (true/false) and "blast"')
    if "reversible" in hints and not isinstance(hints["reversible"], bool):
        raise HintError('"reversible" must be true or false')
    if "blast" in hints and hints["blast"] not in BLAST_LABELS:
        raise HintError(f'"blast" must be one of {", ".join(BLAST_LABELS)}')
    if registered is not None:
        meta = registered.metadata()
    else:
        meta = {
            "name": name,
            "description": "",
            "reversible": False,
            "blast": Blast.MEDIUM.label,
            "input_schema": {"type": "object"},
        }
    meta["reversible"] = meta["reversible"] and hints.get("reversible", True)
    meta["blast"] = max(
        Blast[meta["blast"].upper()], Blast[hints.get("blast", "none").upper()]
    ).label
    return meta


@dataclass(frozen=True)
class CheckedCall:
    """One proposed call as the gate judges it."""

    meta: dict  # the tool's metadata, raised by the call's hints
    spec: ExternalToolSpec
    args: dict  # checked against the tool's schema


def checked_call(registered: ExternalTool | None, name: str, hints: Any, args: Any) -> CheckedCall:
    """The call's metadata (metadata_for_call), its Tool, and its arguments checked against
    the tool's schema: HintError (a ValueError) for bad hints, then ToolArgsError for
    arguments the schema refuses."""
    meta = metadata_for_call(registered, name, hints)
    spec = tool_from_metadata(meta)
    return CheckedCall(meta, spec, spec.validate(args))


def tool_from_metadata(meta: dict) -> ExternalToolSpec:
    return ExternalToolSpec(
        name=meta["name"],
        description=meta.get("description") or meta["name"],
        fn=_runs_elsewhere,
        args_model=_AnyArgs,
        reversible=bool(meta.get("reversible")),
        blast=Blast[str(meta.get("blast", "medium")).upper()],
        schema=meta.get("input_schema") or {"type": "object"},
    )


def tool_of_approval(approval) -> Tool | None:
    """approvals' Approval.tool_object finder: the Tool of an external call's approval."""
    if not approval.tool_use_id.startswith(EXTERNAL_USE_PREFIX):
        return None  # an internal run's call: no query
    meta = (
        approval.__class__.objects.filter(pk=approval.pk)
        .values_list("external_call__tool_meta", flat=True)
        .first()
    )
    return tool_from_metadata(meta) if meta else None


# --- a small JSON Schema check ------------------------------------------------------------
# Enough of JSON Schema for tool arguments (types, required, properties, additionalProperties,
# enum, items): what agent SDKs generate for function tools.
_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def schema_errors(schema: dict, value: Any, loc: tuple = ()) -> list[dict]:
    """[{"loc": [...], "msg": ...}] for each way `value` breaks `schema` (empty: none)."""
    if not isinstance(schema, dict):
        return []
    errors: list[dict] = []
    wanted = schema.get("type")
    if wanted:
        kinds = wanted if isinstance(wanted, list) else [wanted]
        if not any(_is(value, k) for k in kinds):
            return [{"loc": list(loc), "msg": f"must be of type {' or '.join(kinds)}"}]
    if "enum" in schema and value not in schema["enum"]:
        errors.append({"loc": list(loc), "msg": f"must be one of {schema['enum']}"})
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append({"loc": [*loc, name], "msg": "field required"})
        for name, item in value.items():
            if name in props:
                errors += schema_errors(props[name], item, (*loc, name))
            elif schema.get("additionalProperties") is False:
                errors.append({"loc": [*loc, name], "msg": "extra field not permitted"})
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, (*loc, i))
    return errors


def _is(value: Any, kind: str) -> bool:
    expected = _TYPES.get(kind)
    if expected is None:
        return True
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, expected)
