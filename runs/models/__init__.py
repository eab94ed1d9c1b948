"""The runs app's models, one module per part (Django finds them all here):

- run.py: Run's fields; its behaviour in run_status.py (status changes), run_resume.py (back
  to work), timeline.py (the timeline's writes), limits.py (time used); queries.py is
  `Run.objects`, choices.py its statuses and their transitions;
- step.py: Step and Checkpoint; canonical.py: the JSON that is hashed;
- costs.py, ledger.py, pending.py, rate_limits.py, steering.py, retention.py: the run-level
  features' models.
The parts import no app above runs and nothing of the engine (tests/test_layering.py).
"""

from .canonical import args_hash, canonical_json
from .choices import ACTIVE_STATUSES, TERMINAL_STATUSES
from .costs import BUDGET_THRESHOLDS_RISE, SPEND_SHARDS, AgentDaySpend, Budget, BudgetCrossing
from .ledger import Compensation, SideEffect
from .limits import queued_resend_seconds
from .pending import PendingOperation
from .queries import SEARCH_SORTS_AT_MOST, RunQuerySet, _prefix_tsquery
from .rate_limits import RateLimitScope, RateLimitUse, RateLimitWait
from .retention import ArchivedRun, Retention
from .run import RUN_COLUMNS, Run
from .signals import run_cancelled, step_appended
from .steering import Instruction, Recovery
from .step import Checkpoint, RunCreatedField, Step
from .timeline import CHECKPOINT_COLUMNS, STEP_COLUMNS, checkpoint_conflict

__all__ = [
    "ACTIVE_STATUSES",
    "BUDGET_THRESHOLDS_RISE",
    "CHECKPOINT_COLUMNS",
    "RUN_COLUMNS",
    "SEARCH_SORTS_AT_MOST",
    "SPEND_SHARDS",
    "STEP_COLUMNS",
    "TERMINAL_STATUSES",
    "AgentDaySpend",
    "ArchivedRun",
    "Budget",
    "BudgetCrossing",
    "Checkpoint",
    "Compensation",
    "Instruction",
    "PendingOperation",
    "RateLimitScope",
    "RateLimitUse",
    "RateLimitWait",
    "Recovery",
    "Retention",
    "Run",
    "RunCreatedField",
    "RunQuerySet",
    "SideEffect",
    "Step",
    "_prefix_tsquery",
    "args_hash",
    "canonical_json",
    "checkpoint_conflict",
    "queued_resend_seconds",
    "run_cancelled",
    "step_appended",
]
