"""Batch decisions: approve or reject an explicit set of reviewed approvals in one action.
Why and how: docs/design/modules.md."""

import uuid
from dataclasses import asdict, dataclass

from runs.models import args_hash

from . import decisions
from .models import Approval

MAX_ITEMS = 100
CHOICES = ("approve", "reject")


@dataclass
class ItemResult:
    approval: str
    result: str  # decided | voted | conflict | refused | invalid | not_found
    status: int  # the HTTP status the single decision would have had
    message: str
    tool: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class BatchInvalid(Exception):
    """The batch itself is wrong (no items, unknown decision, no reason): nothing decided."""

    def __init__(self, message: str, errors: dict[str, list[str]]):
        super().__init__(message)
        self.message = message
        self.errors = errors


def validate(decision: str, items: list[tuple[str, str]], reason: str) -> None:
    errors: dict[str, list[str]] = {}
    if decision not in CHOICES:
        errors["decision"] = ["approve or reject"]
    if not items:
        errors["items"] = ["select at least one approval"]
    elif len(items) > MAX_ITEMS:
        errors["items"] = [f"at most {MAX_ITEMS} at once"]
    if decision == "reject" and not reason.strip():
        errors["reason"] = ["a reason is required to reject (each agent is told it)"]
    if errors:
        said = "; ".join(message for messages in errors.values() for message in messages)
        raise BatchInvalid(f"nothing was decided: {said}", errors)


def decide_batch(
    *, user, decision: str, items: list[tuple[str, str]], reason: str = ""
) -> list[ItemResult]:
    """Decide each (approval id, shown args hash) in `items`; a result per item, in order.
    Raises BatchInvalid (nothing decided) when the batch itself is wrong."""
    decision = (decision or "").strip().lower()
    validate(decision, items, reason)
    results = []
    seen: set[str] = set()
    for approval_id, shown in items:
        if approval_id in seen:
            continue  # the same row twice is one decision
        seen.add(approval_id)
        results.append(_one(user, decision, approval_id, shown, reason.strip()))
    return results


def _one(user, decision: str, approval_id: str, shown: str, reason: str) -> ItemResult:
    visible = Approval.objects.visible_to(user)
    approval = visible.filter(pk=approval_id).first() if _is_uuid(approval_id) else None
    if approval is None:
        return ItemResult(approval_id, "not_found", 404, "no such approval")
    refused = _refusal(approval, decision, shown)
    if refused:
        return ItemResult(approval_id, "refused", refused[0], refused[1], approval.tool)
    try:
        outcome = decisions.decide(
            approval.pk,
            user=user,
            decision=decision,
            reason=reason,
            shown_args_hash=shown,
            via="batch",
        )
    except decisions.DecisionConflict as exc:
        return ItemResult(approval_id, "conflict", 409, exc.message, approval.tool)
    except decisions.DecisionForbidden as exc:
        return ItemResult(approval_id, "refused", 403, exc.message, approval.tool)
    except decisions.DecisionInvalid as exc:
        return ItemResult(approval_id, "invalid", 422, exc.message, approval.tool)
    except Approval.DoesNotExist:
        return ItemResult(approval_id, "not_found", 404, "no such approval")
    if outcome.status == Approval.Status.PENDING:
        return ItemResult(approval_id, "voted", 200, "your vote is recorded; more are needed")
    return ItemResult(approval_id, "decided", 200, outcome.status, approval.tool)


def _refusal(approval: Approval, decision: str, shown: str) -> tuple[int, str] | None:
    if approval.kind != Approval.Kind.ACTION:
        return 422, "a question needs its own answer: open it"
    # An approval's proposed call never changes, so comparing it here is as good as under
    # the lock; `decide` checks it again for approvals. A reject is checked here only.
    if shown != args_hash(approval.tool, approval.args or {}):
        return 409, "not the call you were shown; nothing was decided. Reload the queue."
    if decision == "approve" and approval.risk in Approval.CONFIRM_RISKS:
        return 422, (
            f"a {approval.risk}-risk call is approved on its own screen, where its exact "
            "effect is confirmed"
        )
    return None


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
