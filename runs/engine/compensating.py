"""A compensation run (Run.Trigger.COMPENSATION): the calls that undo committed effects of a
failed or cancelled run, and nothing else (runs/compensation/models.py launches it).
Why and how: docs/design/modules.md."""

import hashlib

from ..models import Run, SideEffect, canonical_json
from .owned import Work
from .terminator import terminate


def compensation_key(effect_key: str, attempt: int) -> str:
    """The ledger key of the compensating call of the effect recorded under `effect_key`: the
    same for every request of one attempt (an attempt follows one that was not made)."""
    body = canonical_json(["compensation", effect_key, attempt])
    return hashlib.sha256(body.encode()).hexdigest()


def finish(work: Work) -> None:
    """End the compensation run by what its calls came to in the ledger. Raises Stop."""
    keys = work.state["compensating"]
    committed = set(
        SideEffect.objects.filter(key__in=keys, status=SideEffect.Status.COMMITTED).values_list(
            "key", flat=True
        )
    )
    made = sum(1 for key in keys if key in committed)
    if made == len(keys):
        terminate(
            work,
            Run.Termination.COMPLETED,
            f"{made} compensation(s) made",
            output=f"Compensated {made} effect(s).",
        )
    terminate(
        work,
        Run.Termination.COMPENSATION_FAILED,
        f"{len(keys) - made} of {len(keys)} compensation(s) not made",
    )
