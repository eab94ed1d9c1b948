"""What an operator may change in an agent's plan before approving it (approvals/plans/models.py).

An edit may remove steps and change envelope values (a lower maximum, another fixed value,
fewer allowed values); it may not add, reorder or retarget steps, nor change fixed arguments or
an envelope's shape: the agent proposed those, and a plan it did not propose is not its plan.
Pure, so the decision service (approvals/decisions.py) and the plan screen share it.
"""


def check_edit(original: dict, edited: dict) -> dict[str, list[str]]:
    """Errors of an edited plan against the proposed one (empty: a valid edit). An edit may
    remove steps and change envelope values; it may not add, reorder or retarget steps, nor
    change fixed arguments or an envelope's shape: the agent proposed those."""
    before, after = original.get("steps") or [], edited.get("steps") or []
    if not after:
        return {"steps": ["keep at least one step, or reject the plan"]}
    if edited.get("goal") != original.get("goal"):
        return {"goal": ["the goal is the agent's: it cannot be edited"]}
    position = 0
    for number, step in enumerate(after, start=1):
        while position < len(before) and not _same_shape(before[position], step):
            position += 1  # a removed step
        if position == len(before):
            return {"steps": [f"step {number} is not one of the proposed steps, in their order"]}
        position += 1
    return {}


def _same_shape(proposed: dict, edited: dict) -> bool:
    if proposed.get("tool") != edited.get("tool") or proposed.get("args") != edited.get("args"):
        return False
    a, b = proposed.get("envelope") or [], edited.get("envelope") or []
    return len(a) == len(b) and all(
        x.get("arg") == y.get("arg") and x.get("op") == y.get("op")
        for x, y in zip(a, b, strict=True)
    )
