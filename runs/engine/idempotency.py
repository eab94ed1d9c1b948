"""The idempotency key of a tool call: the same call of the same step of the same run has the
same key, whichever worker makes it and however often, so the ledger (ledger.py) and a tool
that honours keys can tell a retry from a new call."""

import hashlib
from uuid import UUID

from ..models import canonical_json


def idempotency_key(
    run_id: UUID | str,
    llm_seq: int,
    index: int,
    tool: str,
    args: dict,
    *,
    retry_of: int | None = None,
) -> str:
    """From stable identifiers only: the run, the model step that asked, the call's index in
    that step (-1: a verifier's call, answer_check.py), the tool and its arguments (key order
    does not matter); `retry_of`, the failure an operator chose to retry (runs/engine/
    steering.py): a new attempt, which the ledger must not answer with the failed one."""
    ids = [str(run_id), llm_seq, index, tool, args]
    if retry_of is not None:
        ids.append({"retry_of": retry_of})
    body = canonical_json(ids)
    return hashlib.sha256(body.encode()).hexdigest()
