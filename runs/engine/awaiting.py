"""Operations a run awaits, as the engine sees them.
Why and how: docs/design/modules.md."""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentkit.tools import Pending, Tool

from ..models import PendingOperation, Step, args_hash
from . import owned
from .conversation import pending_report
from .owned import Stop, Work


def open_operation(work: Work, tool: Tool, args: dict, key: str, pending: Pending) -> dict:
    """Record what the call started (once: a resumed call finds its row) and return the
    call's result as the model sees it."""
    now = timezone.now()
    poll_tool, poll_args = pending.poll or ("", None)
    op, _ = PendingOperation.objects.get_or_create(
        key=key,
        defaults={
            "run": work.run,
            "tool": tool.name,
            "awaits": pending.awaits[:500],
            "started_result": pending.result,
            "completion": pending.completion,
            "poll_tool": poll_tool,
            "poll_args": poll_args,
            "poll_every_seconds": (
                int(pending.poll_every.total_seconds()) if pending.poll_every else None
            ),
            "next_poll_at": now + pending.poll_every if pending.poll_every else None,
            "on_timeout": work.agent_config.get("on_pending_timeout") or pending.on_timeout,
            "deadline": now + pending.deadline,
            "created_at": now,
        },
    )
    awaiting = work.state.setdefault("awaiting", [])
    if not any(entry["id"] == op.pk for entry in awaiting):
        awaiting.append(
            {
                "id": op.pk,
                "tool": op.tool,
                "call": args_hash(tool.name, args),
                "awaits": op.awaits,
                "since": op.created_at.isoformat(),
                "deadline": op.deadline.isoformat(),
            }
        )
    return {
        "status": "pending",
        "operation": op.pk,
        "awaits": op.awaits,
        "deadline": op.deadline.isoformat(),
        "started": pending.result,
    }


def was_pending(result: Any) -> bool:
    """A recorded call's result that opened an operation (what `open_operation` returns)."""
    return isinstance(result, dict) and result.get("status") == "pending" and "operation" in result


def as_pending(recorded: dict) -> Pending:
    """The operation a recorded call opened, opened again by a replay (in its transaction
    that is rolled back): the outcome then comes from the recording too."""
    return Pending(
        awaits=str(recorded.get("awaits", "")),
        deadline=timedelta(hours=1),
        result=recorded.get("started"),
    )


def already_open(state: dict, tool: str, args: dict) -> str | None:
    """Why a call must not run again: the same call's operation is still open."""
    call = args_hash(tool, args)
    for entry in state.get("awaiting", ()):
        if entry["call"] == call:
            return (
                f"not started again: operation #{entry['id']} from this same call is still "
                f"pending (awaits {entry['awaits']}, deadline {_hm(entry['deadline'])} UTC); "
                "you will be told when it finishes"
            )
    return None


def in_context(state: dict) -> str:
    """What the model is told on every turn while operations are open."""
    lines = [
        f"- #{e['id']} {e['tool']}: awaits {e['awaits']} (since {_hm(e['since'])} UTC, "
        f"deadline {_hm(e['deadline'])} UTC)"
        for e in state["awaiting"]
    ]
    return (
        "\n\nOperations you started that have not finished yet (do not start them again; "
        "you will be told when each finishes or times out):\n"
        + "\n".join(lines)
        + "\nIf there is nothing else to do until then, say so briefly and end your turn: "
        "the run waits for them."
    )


def settle(work: Work) -> None:
    """Before a model call while operations are open: report those that finished (their
    step goes into the conversation), or, when the model ended its turn to wait and nothing
    finished since, wait again (Stop)."""
    ids = [entry["id"] for entry in work.state["awaiting"]]
    rows = list(
        PendingOperation.objects.filter(pk__in=ids, status__in=PendingOperation.FINISHED).values(
            "pk", "reported_seq"
        )
    )
    done = {row["pk"] for row in rows}
    unreported = [row["pk"] for row in rows if row["reported_seq"] is None]
    if unreported:
        _report(work, unreported)
    if done:
        # Reported meanwhile by whoever finished them (the run was not running then): the
        # conversation, rebuilt from the timeline when the run was claimed, has them.
        work.state["awaiting"] = [e for e in work.state["awaiting"] if e["id"] not in done]
        work.state.pop("waiting", None)
    elif work.state.get("waiting"):
        wait(work)


def _report(work: Work, ids: list[int]) -> None:
    with transaction.atomic():
        work.run = owned.locked(work)
        ops = PendingOperation.objects.select_for_update().filter(pk__in=ids).order_by("pk")
        for op in ops:
            data = report_data(op)
            step = work.run.append_step(Step.Kind.PENDING, data)
            PendingOperation.objects.filter(pk=op.pk).update(reported_seq=step.seq)
            work.add_user_text(pending_report(data))
        work.state["awaiting"] = [e for e in work.state["awaiting"] if e["id"] not in ids]
        owned.write_checkpoint(work)


def report_data(op: PendingOperation) -> dict:
    """A finished operation's step: what the model and the timeline are told."""
    data = {
        "event": op.status,
        "operation": op.pk,
        "tool": op.tool,
        "awaits": op.awaits,
        "by": op.finished_by,
    }
    if op.status == PendingOperation.Status.COMPLETED:
        data["result"] = op.result
    else:
        data["error"] = (op.result or {}).get("error", op.status.replace("_", " "))
    return data


def wait(work: Work) -> None:
    """The model has nothing to do until an operation finishes: park the run (Stop), unless
    one finished between the last read and the row lock (then the caller goes on)."""
    with transaction.atomic():
        run = owned.locked(work)
        ids = [entry["id"] for entry in work.state["awaiting"]]
        if PendingOperation.objects.filter(
            pk__in=ids, status__in=PendingOperation.FINISHED
        ).exists():
            work.state.pop("waiting", None)
            return
        detail = "; ".join(f"#{e['id']} {e['awaits']}" for e in work.state["awaiting"])
        run.park(
            f"waiting for {len(ids)} operation(s)",
            reason="waiting for a pending operation",
            note=detail[:2000],
        )
        work.run = run
        work.state["waiting"] = True
        owned.write_checkpoint(work)
    raise Stop


def _hm(iso: str) -> str:
    return iso[:16].replace("T", " ")
