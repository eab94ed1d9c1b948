"""MCP tool definitions into an external agent's tool registry (the MCP gating proxy's
registration, POST /api/external/tools/mcp).
Why and how: docs/design/modules.md."""

import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentkit.mcp import read_only_hint, risk_of  # one mapping for both ways in
from agentkit.tools import Blast

from .models import ExternalAgent, ExternalTool

NAME_MAX: int = ExternalTool._meta.get_field("name").max_length  # type: ignore[assignment]
# A tool's name is a name (MCP's own rule for tool names, within the column's 64 characters):
# it is shown to approvers and used in rules, never markup or a sentence.
NAME_CHARS = rf"[A-Za-z0-9_][A-Za-z0-9_.\-]{{0,{NAME_MAX - 1}}}"
TOOL_NAME = f"^{NAME_CHARS}$"


class DefinitionError(ValueError):
    """A tool definition that cannot be registered (the message says which and why)."""


@dataclass(frozen=True)
class Registered:
    name: str
    reversible: bool
    blast: str
    created: bool
    kept_higher_risk: bool  # the registry already held more risk than the hints imply
    read_only_hint: bool  # what the server says, for the admin; it lowers nothing

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _checked(definition: Any) -> dict:
    if not isinstance(definition, dict):
        raise DefinitionError("each tool must be an object with a name")
    name = definition.get("name")
    if not isinstance(name, str) or not name:
        raise DefinitionError("each tool needs a name")
    if len(name) > NAME_MAX:
        raise DefinitionError(f"tool name {name[:NAME_MAX]}… is longer than {NAME_MAX} characters")
    if not re.fullmatch(NAME_CHARS, name):
        raise DefinitionError(f"tool name {name!r} is not a name: letters, digits, _ . - only")
    schema = definition.get("inputSchema")
    if schema is not None and not isinstance(schema, dict):
        raise DefinitionError(f"{name}: inputSchema must be an object")
    description = definition.get("description") or ""
    if not isinstance(description, str):
        raise DefinitionError(f"{name}: description must be a string")
    return {
        "name": name,
        "schema": schema or {"type": "object"},
        "description": description,
        "annotations": definition.get("annotations"),
    }


def register(agent: ExternalAgent, definitions: list) -> list[Registered]:
    """Upsert `agent`'s ExternalTool rows from MCP tool definitions; all or nothing."""
    checked = [_checked(d) for d in definitions]
    names = [d["name"] for d in checked]
    if len(set(names)) != len(names):
        raise DefinitionError("tool names must be unique")
    done: list[Registered] = []
    with transaction.atomic():
        existing = {
            t.name: t for t in agent.tools.select_for_update().filter(name__in=names).order_by()
        }
        for d in checked:
            reversible, blast = risk_of(d["annotations"])
            hinted = read_only_hint(d["annotations"])
            row = existing.get(d["name"])
            if row is None:
                row = ExternalTool.objects.create(
                    agent=agent,
                    name=d["name"],
                    description=d["description"],
                    input_schema=d["schema"],
                    reversible=reversible,
                    blast=blast.label,
                )
                done.append(Registered(row.name, reversible, blast.label, True, False, hinted))
                continue
            held = Blast[row.blast.upper()]
            # The row holds what an admin set (or the first registration): it stays, unless
            # the server now says destructive, which raises it.
            if blast is Blast.HIGH:
                row.reversible = False
                row.blast = max(held, blast).label
            kept = held > blast
            row.description, row.input_schema = d["description"], d["schema"]
            row.save(update_fields=["reversible", "blast", "description", "input_schema"])
            done.append(Registered(row.name, row.reversible, row.blast, False, kept, hinted))
    return done
