from django.apps import AppConfig

from . import logs


class AgentopsConfig(AppConfig):
    name = "agentops"

    def ready(self) -> None:
        logs.connect_celery_signals()
