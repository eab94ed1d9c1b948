from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        # The engine asks the gate policy through an interface it owns (runs.engine.gates);
        # this app provides it. Imported here, once the models are loaded, as Django intends.
        from runs import engine

        from . import gates

        engine.use_gates(gates)
