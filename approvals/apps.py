from django.apps import AppConfig
from django.core import checks


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        # Wiring to runs, which never imports approvals. Imported here, once the models are
        # loaded, as Django intends.
        from runs import engine
        from runs.models import Run, run_cancelled

        from . import decisions, engine_gates, tasks
        from .gates import checks as gate_checks
        from .learning import rules as learning
        from .models import Approval

        # A gate configuration that names what is not there refuses to start (check, up).
        checks.register(gate_checks.check_catalogue)
        checks.register(gate_checks.check_named_approvers, checks.Tags.database)

        # The engine asks the gate policy through an interface it owns (runs.engine.gates).
        engine.use_gates(engine_gates)
        # What a cancelled run waited for is cancelled with it.
        run_cancelled.connect(
            decisions.on_run_cancelled, sender=Run, dispatch_uid="approvals.on_run_cancelled"
        )
        # The learning wing hears every settled decision, inside its transaction.
        decisions.settled.connect(
            learning.on_settled, sender=Approval, dispatch_uid="approvals.learning_on_settled"
        )
        # A decision from anywhere updates the Slack app's message (when the app is on).
        decisions.decided.connect(
            tasks.slack_on_decided, sender=Approval, dispatch_uid="approvals.slack_on_decided"
        )
