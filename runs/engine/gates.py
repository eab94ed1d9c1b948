"""What the engine asks of the people who supervise it, and nothing more: the narrow
interface the approvals app fills at start-up (approvals/apps.py calls `use_gates`).
The engine owns it and never imports approvals: the dependency runs approvals -> runs.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from agentkit.agents import GateRules
from agentkit.tools import Tool

from ..models import Run, SideEffect
from . import replaying

# A decision's status, as the approvals app records it.
PENDING, APPROVED, REJECTED, EXPIRED, ANSWERED = (
    "pending",
    "approved",
    "rejected",
    "expired",
    "answered",
)
# What a "continue?" checkpoint came to.
CONTINUE, STOP, EXPIRE = "continue", "stop", "expired"


@dataclass(frozen=True)
class Decision:
    """What a person (or the expiry sweep) decided about one gated call or question."""

    id: str
    status: str
    args: dict  # the arguments to execute: the approver's edit, if any, else the proposal
    args_hash: str  # the hash those arguments must have (args_hash of the approved call)
    by: str | None  # username; None when the system decided (expiry)
    answer: str = ""
    reason: str = ""
    # "fail" fails the run; otherwise the agent is told (after a "halt", once an operator
    # resumed the halted run: the approvals app keeps it parked until then).
    on_expiry: str = GateRules.on_expiry
    decided_at: datetime | None = None
    side_effect_id: int | None = None  # set on an "outcome unknown" question


@dataclass(frozen=True)
class ContinueAnswer:
    """A "continue?" checkpoint: PENDING, CONTINUE, STOP or EXPIRE, in words, and who."""

    outcome: str
    detail: str = ""
    by: Any = None  # the user who stopped the run, for the cancelled step


class Gates(Protocol):
    def config_problems(self, config: dict) -> list[str]:
        """What in a run's snapshot (Run.agent_config) the policy cannot apply: a rule that
        names a tool, argument or approver group the snapshot does not have, a key or value
        it does not know; [] when sound. Such a rule gates nothing, so the engine refuses
        the run (terminator.refuse_unsound_gates). No writes."""

    def gate_for_call(self, run: Run, item: dict, tool: Tool, response: Any) -> dict | None:
        """What to ask a person about this proposed call, or None: it may run. No writes.
        An item with `pii` (the agent's PII guard's findings, masked) must be gated, and its
        approval show them; that includes the final answer held as a call (pii_guard)."""

    def open_gate(self, run: Run, item: dict, gate: dict) -> str:
        """Open the approval `gate_for_call` described (and its gate step); its id."""

    def open_outcome_question(self, run: Run, item: dict, tool: Tool, effect: SideEffect) -> str:
        """Ask whether a call whose outcome was never recorded took effect; the approval id."""

    def open_verification_question(self, run: Run, failed: dict) -> str:
        """Ask a person what to do with a final answer that failed verification as often as
        the verifier allows (`failed`: key, llm_seq, subject, verifier, reason, attempts,
        output; `key` names the question, one per checked answer or call): answer
        "accept", "fail", or a note that sends it back to the agent. The approval id."""

    def pending_count(self, run: Run) -> int:
        """How many of the run's approvals wait for a person."""

    def decisions(self, ids: list[str]) -> dict[str, Decision]:
        """The current state of these approvals, by id."""

    def continue_due(self, run: Run) -> bool:
        """Whether a "continue?" checkpoint is due before the next model call."""

    def continue_answer(self, run: Run) -> ContinueAnswer | None:
        """The due checkpoint's state; None when it has not been asked yet."""

    def open_continue_question(self, run: Run) -> object:
        """Ask "continue?" for the due checkpoint."""

    def budget_answer(self, run: Run, key: str) -> ContinueAnswer | None:
        """The state of the run's "budget exceeded: continue?" question of this budget's
        period (`key`); None when it has not been asked yet."""

    def open_budget_question(self, run: Run, key: str, question: str, explanation: str) -> object:
        """Ask whether the run may go on although its agent's budget is spent."""

    def budget_crossed(self, run: Run, crossing_id: int) -> None:
        """Tell people a budget threshold was crossed (after commit)."""


_gates: Gates | None = None


def registered() -> Gates | None:
    """The app's policy, even while a replay answers in its place (replay compares them)."""
    return _gates


def use_gates(gates: Gates) -> None:
    """Called once at start-up by the app that supervises runs (approvals/apps.py)."""
    global _gates
    _gates = gates


def current() -> Gates:
    recording = replaying.current()
    if recording is not None:
        return recording.gates
    if _gates is None:
        # Never run ungated: a missing policy is a configuration error, not "allow all".
        raise RuntimeError("no gate policy registered: is 'approvals' in INSTALLED_APPS?")
    return _gates
