"""The conversation's length at a claim: carried in the checkpoint by the model step's path
(runs/engine/owned.py, CHARS) instead of serialising the whole history again, and always
the number that serialising it gives (loop._load)."""

import pytest

from agentkit.llm.scripted import text, tool_use
from runs.engine import loop, owned
from runs.engine.conversation import conversation
from runs.models import Checkpoint, Run, Step, canonical_json

from ..harness import drive

pytestmark = pytest.mark.django_db(transaction=True)


def long_script(turns: int) -> list:
    calls = []
    for i in range(turns):
        if i % 3 == 0:
            calls.append([tool_use("t_echo", text=f'naïve ✓ «{i}» \\ "quoted"\n' * (i + 1))])
        elif i % 3 == 1:
            calls.append([tool_use("t_inline", text=f"turn {i}"), tool_use("t_fail", n=i)])
        else:
            calls.append([tool_use("t_big", n=i, size=500 * i)])
    return [*calls, [text("All done: ✓")]]


def measured(run: Run) -> int:
    """What the claim measured before: the whole conversation, serialised."""
    return len(canonical_json(conversation(run)))


def claim_count(run: Run) -> tuple[int, int | None]:
    """(the length a claim starts from, the checkpoint's carried length or None)."""
    run.refresh_from_db()
    work = loop._load(run, "test-worker")
    state = Checkpoint.objects.filter(run=run).latest("seq").state
    last = run.steps.filter(kind__in=loop.CONVERSATION_KINDS).latest("seq").seq
    return work.messages_chars, owned.carried_chars(state, run.pk, last)


def test_a_long_conversation_is_measured_as_serialising_it_would(launch, script):
    script(long_script(18))
    run = launch(max_steps=40)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert run.steps.filter(kind=Step.Kind.TOOL).count() == 24
    chars, carried = claim_count(run)
    assert carried is not None  # the checkpoint carried it: nothing serialised at the claim
    assert chars == carried == measured(run) > 30_000
    # And at every step of the way: each carried length is the one its conversation measures.
    carried_at = [c.state[owned.CHARS] for c in run.checkpoints.all() if owned.CHARS in c.state]
    assert len(carried_at) >= 18
    for _, seq, length in carried_at:
        assert length == len(canonical_json(conversation(run, upto_seq=seq)))


def test_a_step_written_after_the_checkpoint_makes_the_claim_measure_again(launch, script):
    script(long_script(4))
    run = launch()
    drive(run)
    _, before = claim_count(run)
    assert before == measured(run)
    # A conversation step nobody counted (an operation the run awaited, reported later).
    report = {"event": "failed", "operation": 1, "tool": "t_echo", "awaits": "x", "error": "e"}
    run.append_step(Step.Kind.PENDING, report)
    chars, carried = claim_count(run)
    assert carried is None
    assert chars == measured(run) > before


def test_a_float_the_database_may_spell_otherwise_is_not_carried(launch, script):
    # "1e+16" in the conversation: a float stored by Postgres may read back as an integer.
    script([[tool_use("t_echo", text="1e+16")], [text("done")]])
    run = launch()
    drive(run)
    chars, carried = claim_count(run)
    assert carried is None and chars == measured(run)


def test_a_checkpoint_copied_from_another_run_is_not_trusted(launch, script):
    script(long_script(2))
    run = launch()
    drive(run)
    state = Checkpoint.objects.filter(run=run).latest("seq").state
    _, seq, chars = state[owned.CHARS]
    assert owned.carried_chars(state, run.pk, seq) == chars
    other = launch()
    assert owned.carried_chars(state, other.pk, seq) is None
