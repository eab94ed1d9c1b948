from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # Wiring imported once the models are loaded, as Django intends.
        # The Celery tasks that runs/queue.py sends by name (a web process never imports them
        # otherwise).
        from . import access, events, tasks  # noqa: F401
        from .models import Step, step_appended

        # Every appended step is published once committed.
        step_appended.connect(events.on_step_appended, sender=Step, dispatch_uid="runs.events")

        # Live sockets are told when a user's access may have ended.
        access.connect_signals()
