from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # Web processes and workers both publish events: each renders an event once.
        from . import rendering

        rendering.install()
