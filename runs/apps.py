from django.apps import AppConfig
from django.core import checks


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # Wiring imported once the models are loaded, as Django intends.
        # The Celery tasks that runs/queue.py sends by name (a web process never imports them
        # otherwise).
        from . import access, chains, events, tasks  # noqa: F401
        from .compensation import effects as compensable
        from .compensation import models as compensation
        from .models import Run, Step, run_cancelled, step_appended
        from .pending import models as pending
        from .steering import models as steering

        # Every appended step is published once committed.
        step_appended.connect(events.on_step_appended, sender=Step, dispatch_uid="runs.events")
        # A run's success, once committed, sends its follow-ups (chained runs).
        step_appended.connect(chains.on_step_appended, sender=Step, dispatch_uid="runs.chains")
        # A failed or cancelled run's compensations; a compensation run's end settles them.
        step_appended.connect(
            compensation.on_step_appended, sender=Step, dispatch_uid="runs.compensation"
        )

        # A cancelled run awaits nothing any more.
        run_cancelled.connect(pending.cancel_with_run, sender=Run, dispatch_uid="runs.pending")
        run_cancelled.connect(steering.cancel_with_run, sender=Run, dispatch_uid="runs.steering")

        # A compensation that names no tool (or one that changes nothing) stops start-up.
        checks.register(compensable.check_declarations)

        # Live sockets are told when a user's access may have ended.
        access.connect_signals()
