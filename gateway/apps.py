from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "external agents"

    def ready(self) -> None:
        # Approvals of external calls name tools that are not in this process's registry:
        # the approvals app asks the finders registered here (Approval.tool_object).
        from approvals.models import TOOL_FINDERS

        from .tools import tool_of_approval

        if tool_of_approval not in TOOL_FINDERS:
            TOOL_FINDERS.append(tool_of_approval)
