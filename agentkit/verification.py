"""What an agent declares to have its work checked before a run may succeed.

A `Verifier` checks the final answer (a function, a read-only tool call judged by a function,
or a second model call with its own prompt); an output schema says what shape the final
answer (Agent.output_schema) or a tool's result (`@tool(output_schema=...)`) must have.
The engine runs them (runs/engine/answer_check.py); this module only declares and validates.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import pydantic

from agentkit.llm.scripted import Turn

ON_FAIL = ("agent", "person")
# A verifier model answers with this word first when the answer passes.
PASS = "PASS"
# At most this many schema errors are shown to the model and kept in the guard step.
MAX_SCHEMA_ERRORS = 10


@dataclass(frozen=True)
class Verifier:
    """A check that runs after the model's final answer, before the run may succeed.

    Exactly one way to check:
    - `check` alone: check(result: RunResult) -> None (passed) or the reason it failed;
    - `tool=("name", args)` with `check`: the tool (no side effects) is called with
      args(result), then check(result, tool_output) -> None or the reason;
    - `prompt`: a second model call with this system prompt, told the task and the answer; it
      answers "PASS" or "FAIL: <reason>". `script` gives its scripted answers per input (one
      per attempt), like Agent.script, for runs without an API key.

    A failed check goes back to the agent with the reason, until `max_attempts` checks have
    failed; then the run fails (verification_failed), or with on_fail="person" a person
    decides: accept the answer, send it back with a note, or fail the run.
    Code (check, args, script) stays out of the run's snapshot: only its name goes in.
    """

    check: Callable[..., str | None] | None = None
    tool: tuple[str, Callable[[Any], dict[str, Any]]] | None = None
    prompt: str = ""
    model: str = ""  # the verifier model's; the agent's when empty
    script: Callable[[dict[str, Any]], list[Turn]] | None = None
    max_attempts: int = 2
    on_fail: str = "agent"
    name: str = ""  # how the step names it; the check's or tool's name by default
    # Check each successful call of these tools instead of the final answer: `result.output`
    # is then the call as JSON, {"tool", "args", "result"}; passing, the run goes on.
    after_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        ways = (
            (self.check is not None and self.tool is None)
            + (self.tool is not None)
            + bool(self.prompt)
        )
        if ways != 1:
            raise ValueError("a Verifier has one of: check, tool (with check), prompt")
        if self.tool is not None and self.check is None:
            raise ValueError("a tool verifier needs check(result, tool_output) to judge it")
        if self.on_fail not in ON_FAIL:
            raise ValueError(f"on_fail must be one of {ON_FAIL}")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    @property
    def kind(self) -> str:
        return "tool" if self.tool else "model" if self.prompt else "check"

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.tool:
            return self.tool[0]
        if self.check is not None:
            return getattr(self.check, "__qualname__", "check")
        return "model review"

    def as_dict(self, agent_model: str) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "name": self.label,
            "max_attempts": self.max_attempts,
            "on_fail": self.on_fail,
        }
        if self.tool:
            out["tool"] = self.tool[0]
        if self.prompt:
            out["prompt"] = self.prompt
            out["model"] = self.model or agent_model
        if self.after_tools:
            out["after_tools"] = list(self.after_tools)
        return out


def checks_final_answer(config: dict[str, Any]) -> bool:
    """Whether an agent's snapshot has its final answers checked before the run may end."""
    return "output_schema" in config or (
        "verifier" in config and not config["verifier"].get("after_tools")
    )


def checks_call(config: dict[str, Any], tool: str) -> bool:
    """Whether a successful call of `tool` is checked by the agent's verifier."""
    verifier = config.get("verifier")
    return verifier is not None and tool in verifier.get("after_tools", ())


def json_schema(schema: dict[str, Any] | type[pydantic.BaseModel]) -> dict[str, Any]:
    """A JSON schema from a schema or a pydantic model (what goes into the snapshot)."""
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return schema.model_json_schema()
    if not isinstance(schema, dict):
        raise TypeError("an output schema is a JSON schema (dict) or a pydantic model")
    jsonschema.validators.validator_for(schema).check_schema(schema)
    return schema


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Where `value` breaks `schema`, one line each (empty: it is valid)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(the whole value)'}: {e.message}"[:300]
        for e in errors[:MAX_SCHEMA_ERRORS]
    ]
