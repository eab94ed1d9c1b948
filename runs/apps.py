from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # Registers the Celery tasks that runs/queue.py sends by name (a web process never
        # imports them otherwise). Imported here, once the models are loaded, as Django intends.
        from . import tasks  # noqa: F401
