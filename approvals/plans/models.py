"""Plans approved once: the plan a run follows, checking a plan before it is approved, and
the to-do list its run page shows.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass, field

from agentkit.tools import ToolArgsError, get_tool
from runs.models import Run, Step

from ..models import Approval, Plan
from . import rules as plan_matching


def declared(run: Run) -> bool:
    return bool((run.agent_config or {}).get("plans"))


def active(run: Run) -> Plan | None:
    """The run's newest approved plan: the one its calls are matched against."""
    return (
        Plan.objects.filter(run=run, approval__status=Approval.Status.APPROVED)
        .select_related("approval")
        .order_by("-created_at", "-id")
        .first()
    )


# --- a plan before it is approved --------------------------------------------------------------
def problems(run: Run, steps: list[dict]) -> list[str]:
    """What is wrong with the steps for this run's agent (empty: nothing): tools it does not
    have, fixed arguments its tool refuses, bounds on arguments the tool does not take."""
    offered = {t["name"] for t in (run.agent_config or {}).get("tools", [])}
    found = []
    for number, step in enumerate(steps, start=1):
        name = step.get("tool")
        tool = get_tool(name) if isinstance(name, str) and name in offered else None
        if tool is None or name in ("submit_plan", "ask_operator"):
            found.append(f"step {number}: {name!r} is not a tool this agent can plan")
            continue
        if step.get("args") is not None:
            try:
                tool.validate(step["args"])
            except ToolArgsError as exc:
                found.append(f"step {number}: {exc}")
        for arg in dict.fromkeys(c.get("arg") for c in step.get("envelope") or []):
            if arg not in (tool.input_schema().get("properties") or {}):
                found.append(f"step {number}: {name} takes no argument {arg!r}")
    return found


# --- the to-do list -----------------------------------------------------------------------------
PENDING, IN_PROGRESS, DONE, FAILED, SKIPPED = "pending", "in progress", "done", "failed", "skipped"


@dataclass
class Row:
    number: int
    tool: str
    bounds: str
    note: str
    status: str
    detail: str = ""
    seq: int | None = None


@dataclass
class Todo:
    plan: Plan
    state: str  # proposed, approved, rejected, expired, cancelled
    rows: list[Row] = field(default_factory=list)
    deviations: list[dict] = field(default_factory=list)


def todo(run: Run) -> list[Todo]:
    """The run's plans, newest first, each as a to-do list: every step pending, in progress
    (its call is approved or running), done, failed or skipped (the run ended, or a newer plan
    was approved, before it), and the calls that deviated with their outcome."""
    found = list(Plan.objects.filter(run=run).select_related("approval").order_by("-id"))
    ids = {
        p.get("tool_use_id")
        for plan in found
        for p in [*plan.progress, *plan.deviations]
        if p and p.get("tool_use_id")
    }
    results = {
        s.data.get("tool_use_id"): s
        for s in run.steps.filter(kind=Step.Kind.TOOL, data__tool_use_id__in=list(ids)).only(
            "seq", "data"
        )
    }
    own = {
        str(a.pk): a.status
        for a in Approval.objects.filter(
            pk__in=[
                p["approval"]
                for plan in found
                for p in [*plan.progress, *plan.deviations]
                if p.get("approval")
            ]
        ).only("status")
    }
    newest_approved = next(
        (p.pk for p in found if p.approval.status == Approval.Status.APPROVED), None
    )
    lists = []
    for plan in found:
        ended = run.is_terminal or (newest_approved is not None and plan.pk != newest_approved)
        state = (
            "proposed" if plan.approval.status == Approval.Status.PENDING else plan.approval.status
        )
        shown = Todo(plan, state)
        for index, step in enumerate(plan.steps):
            taken = plan.progress[index] if index < len(plan.progress) else {}
            row = Row(
                index + 1,
                step.get("tool", ""),
                plan_matching.describe(step),
                step.get("note", ""),
                PENDING,
            )
            row.status, row.detail, row.seq = _status(taken, results, own, ended)
            if row.status == PENDING and state not in (Approval.Status.APPROVED, "proposed"):
                row.status = SKIPPED
            shown.rows.append(row)
        for d in plan.deviations:
            ran = results.get(d.get("tool_use_id"))
            outcome = "not run (yet)"
            if ran is not None:
                outcome = "failed" if ran.data.get("is_error") else "done"
            shown.deviations.append(
                {
                    **d,
                    "decision": own.get(str(d.get("approval"))),
                    "outcome": outcome,
                    "result_seq": ran and ran.seq,
                }
            )
        lists.append(shown)
    return lists


def _status(taken: dict, results: dict, own: dict, ended: bool) -> tuple[str, str, int | None]:
    if not taken:
        return (SKIPPED, "not taken before the end", None) if ended else (PENDING, "", None)
    step = results.get(taken.get("tool_use_id"))
    if step is not None:
        if step.data.get("is_error"):
            return FAILED, str(step.data.get("error", ""))[:300], step.seq
        return DONE, "", step.seq
    status = own.get(str(taken.get("approval") or ""))
    if status in (Approval.Status.REJECTED, Approval.Status.EXPIRED, Approval.Status.CANCELLED):
        return FAILED, f"its own approval was {status}", None
    if status == Approval.Status.PENDING:
        return IN_PROGRESS, "waits for its own approval", None
    return (SKIPPED, "not run before the end", None) if ended else (IN_PROGRESS, "", None)
