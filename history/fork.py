"""Fork: a new run that goes on from a checkpoint of a past run.

The new run gets the origin's conversation up to the checkpoint (in its launched step) and
the engine state saved there, and an operator's instruction if given; it links to its
origin (parent, forked_from). The origin is only read: its timeline and chain are untouched.
Calls the origin had pending at the checkpoint are asked of the gate policy again: an
approval given in the origin approves nothing in the fork.
"""

import copy

from agentkit.agents import Limits, get_agent
from runs import engine
from runs.models import Run

MAX_INSTRUCTION_CHARS = 4000


class ForkError(ValueError):
    """Why this checkpoint cannot be forked, in words for the operator."""


def fork(run: Run, seq: int, *, instruction: str = "", by=None) -> Run:
    """A new queued run continuing `run` from its checkpoint at `seq`."""
    instruction = instruction.strip()
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        raise ForkError(f"the instruction is longer than {MAX_INSTRUCTION_CHARS} characters")
    agent = get_agent(run.agent)
    if agent is None:
        raise ForkError(f"agent {run.agent!r} is not in this installation's catalogue")
    checkpoint = run.checkpoints.filter(seq=seq).first()
    if checkpoint is None:
        raise ForkError(f"run {run.pk} has no checkpoint after step #{seq}")
    state = copy.deepcopy(checkpoint.state)
    messages = engine.conversation(run, upto_seq=seq)
    last = messages[-1] if messages else None
    checking = state.get("checking")  # a final answer (or call) not yet verified
    if checking is not None:
        if instruction:
            del state["checking"]  # the operator's instruction comes first; the model answers it
        else:
            checking.pop("approval", None)  # checked again, and the fork's own people decide
    elif last and last["role"] == "assistant" and not state.get("pending") and not instruction:
        raise ForkError(
            "the agent had given its final answer at this checkpoint: "
            "add an instruction for it to go on"
        )
    for item in state.get("pending", []):
        # The fork's own gates decide; the origin's approvals and retries stay the origin's.
        item.update({"approval": None, "regate": True, "llm_seq": 1})
        item.pop("cleared_at_attempt", None)
    return engine.launch(
        agent=agent,
        input=run.input,
        limits=Limits(
            max_steps=run.max_steps,
            max_cost_usd=run.max_cost_usd,
            max_seconds=run.max_seconds,
            max_consecutive_errors=run.max_consecutive_errors,
        ),
        trigger=Run.Trigger.FORK,
        launched_by=by,
        parent=run,
        provider=run.provider,
        source=f"checkpoint {run.pk}@{seq}",
        fork=engine.ForkPoint(
            origin=str(run.pk),
            seq=seq,
            checkpoint=checkpoint,
            messages=messages,
            state=state,
            instruction=instruction,
        ),
    )
