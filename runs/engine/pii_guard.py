"""The PII guard, as the engine applies an agent's PiiPolicy (agentkit/pii.py).
Why and how: docs/design/modules.md."""

from typing import Any

from agentkit import pii
from agentkit.tools import Blast, Tool, ToolArgsError, ToolError, get_tool, tool

from ..models import Run, Step, args_hash
from . import gates
from .owned import Work
from .terminator import terminate

FINAL_ANSWER = "publish_final_answer"


@tool(
    reversible=False,
    blast=Blast.MEDIUM,
    name=FINAL_ANSWER,
    describe="End the run with this final answer",
)
def publish_final_answer(text: str) -> str:
    """The run's final answer, held for a person because it carries personal data."""
    raise ToolError("the final answer is published by the engine, not called")


def policy_of(work: Work) -> dict | None:
    return work.agent_config.get("pii")


def covers(policy: dict, tool: Tool) -> bool:
    """The calls whose arguments leave the system: the tools the policy names, else every
    tool with side effects (an e-mail, a refund's note, a ticket reach other people or
    systems; a lookup's arguments stay in ours)."""
    if policy.get("tools"):
        return tool.name in policy["tools"]
    return tool.has_side_effects


def check_calls(work: Work, pending: list[dict]) -> list[tuple[str, dict, dict]]:
    """Apply the policy to the planned calls (before the gate policy is asked); their guard
    steps, to be written with the model's step."""
    policy = policy_of(work)
    action = policy.get("on_tool_args") if policy else ""
    if not policy or not action:
        return []
    steps: list[Any] = []
    for item in pending:
        found = get_tool(item["name"]) if item["args"] is not None else None
        if found is None or not covers(policy, found):
            continue
        exempt = {
            arg: item["args"][arg]
            for arg in item["args"]
            if f"{found.name}.{arg}" in policy.get("exempt", ())
        }
        scanned = {arg: v for arg, v in item["args"].items() if arg not in exempt}
        cleaned, findings = pii.scan(scanned, policy["detectors"], policy.get("patterns"))
        if not findings:
            continue
        cleaned = {arg: cleaned.get(arg, exempt.get(arg)) for arg in item["args"]}
        done = _apply(item, found, action, cleaned, findings)
        steps.append(
            (
                Step.Kind.GUARD,
                {
                    "guard": "pii",
                    "where": "arguments",
                    "tool": found.name,
                    "tool_use_id": item["id"],
                    "action": done,
                    "findings": [f.as_dict() for f in findings],
                },
                {},
            )
        )
    return steps


def _apply(item: dict, found: Tool, action: str, cleaned: dict, findings: list) -> str:
    """Change the planned call as the action says; what was done, for the guard step."""
    what = describe(findings)
    if action == "redact":
        try:
            item["args"] = found.validate(cleaned)
        except ToolArgsError as exc:
            # A placeholder where the schema wants an e-mail address: nothing safe to send.
            item["args"], item["input"] = None, cleaned
            item["error"] = f"not sent: redacting personal data ({what}) left it invalid: {exc}"
            return "blocked"
        return "redacted"
    if action == "gate":
        item["pii"] = [f.as_dict() for f in findings]
        return "gated"
    item["args"], item["input"] = None, cleaned  # the step records what was refused, redacted
    item["error"] = (
        f"blocked by the PII guard: {what}; personal data may not be sent with {found.name}. "
        "Leave it out and try again."
    )
    return "blocked"


def describe(findings: list) -> str:
    """ "email in to, card in body": kinds and places, never values."""
    return ", ".join(f"{f.kind} in {f.field}" for f in findings)


def check_output(work: Work, text: str) -> tuple[str, Any]:
    """The policy's verdict on a final answer: ("", None) when nothing is to be done, else
    (action, what it needs): redact -> (text, guard step); block -> (detail, guard step);
    gate -> (the FINAL_ANSWER item, guard step)."""
    policy = policy_of(work)
    action = policy.get("on_output") if policy else ""
    if not policy or not action:
        return "", None
    cleaned, findings = pii.scan(text, policy["detectors"], policy.get("patterns"), "output")
    if not findings:
        return "", None
    done = {"redact": "redacted", "gate": "gated", "block": "blocked"}[action]
    step: tuple[str, dict[str, Any], dict[str, Any]] = (
        Step.Kind.GUARD,
        {
            "guard": "pii",
            "where": "output",
            "action": done,
            "findings": [f.as_dict() for f in findings],
        },
        {},
    )
    if action == "redact":
        return action, (cleaned, step)
    if action == "block":
        return action, (f"the final answer carried personal data ({describe(findings)})", step)
    item = {
        "id": f"output-{work.run.last_seq + 1}",
        "name": FINAL_ANSWER,
        "input": {"text": text},
        "llm_seq": work.run.last_seq + 1,
        "index": 0,
        "args": {"text": text},
        "error": None,
        "approval": None,
        "pii": [f.as_dict() for f in findings],
    }
    return action, (item, step)


def judge_output(work: Work, response: Any) -> tuple[tuple, list, list, list]:
    """The policy applied to a final answer, in the shapes the model step is recorded with:
    (check_output's verdict, the pending calls, the gated calls, the guard steps). A gated
    answer is held as the one pending call, with its approval to open."""
    verdict = check_output(work, response.text)
    action, what = verdict
    if not action:
        return verdict, [], [], []
    if action != "gate":
        return verdict, [], [], [what[1]]
    held, step = what
    final_answer = get_tool(FINAL_ANSWER)
    assert final_answer is not None  # registered by agentkit.tools
    gate = gates.current().gate_for_call(work.run, held, final_answer, response)
    # A policy that does not ask (it must): the held answer then ends the run BLOCKED.
    return verdict, [held], [(held, gate)] if gate is not None else [], [step]


def held_output(item: dict) -> bool:
    return item["name"] == FINAL_ANSWER


def settle_output(work: Work, item: dict, decision: gates.Decision | None) -> None:
    """A held final answer, decided: approved (as edited), the run succeeds with it;
    otherwise it ends BLOCKED. Never returns (terminate raises Stop)."""
    who = decision.by if decision and decision.by else "the system"
    if decision is not None and decision.status == gates.APPROVED:
        if args_hash(FINAL_ANSWER, decision.args) == decision.args_hash:
            terminate(work, Run.Termination.COMPLETED, output=str(decision.args.get("text", "")))
        terminate(work, Run.Termination.BLOCKED, "approved answer does not match; not published")
    if decision is None:
        detail = "the held final answer was never put to a person"
    elif decision.status == gates.REJECTED:
        detail = f"final answer rejected by {who}: {decision.reason or 'no reason given'}"
    else:
        detail = "nobody approved the final answer before its approval expired"
    terminate(work, Run.Termination.BLOCKED, detail)
