from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo business data"

    def ready(self) -> None:
        # Registers the demo tools and agents in the catalogue.
        from . import agents, planning_agent  # noqa: F401
