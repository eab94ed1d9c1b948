from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "external agents"

    def ready(self) -> None:
        # Approvals of external calls name tools that are not in this process's registry:
        # the approvals app asks the finders registered here (Approval.tool_object).
        from django.db.models.signals import post_save

        from accounts.teams import AGENT_SOURCES
        from approvals.decisions import APPROVAL_HOLDS
        from approvals.models import TOOL_FINDERS
        from runs.models import Run, Step, run_cancelled, step_appended

        from . import callbacks, sessions, tasks, wakeups
        from .call_tools import tool_of_approval
        from .models import external_agent_slugs

        if tool_of_approval not in TOOL_FINDERS:
            TOOL_FINDERS.append(tool_of_approval)
        # Teams may own external agents too (the Teams page offers their names).
        if external_agent_slugs not in AGENT_SOURCES:
            AGENT_SOURCES.append(external_agent_slugs)
        # A decided call's callback URL is POSTed once the decision is committed.
        step_appended.connect(
            callbacks.on_step_appended, sender=Step, dispatch_uid="gateway.callbacks"
        )
        # A decided call wakes the requests waiting on it (gateway/waits.py).
        step_appended.connect(wakeups.on_step_appended, sender=Step, dispatch_uid="gateway.wakeups")
        run_cancelled.connect(wakeups.on_run_cancelled, sender=Run, dispatch_uid="gateway.wakeups")
        # An agent switched off: its waiting requests answer 401 at once.
        post_save.connect(
            wakeups.on_agent_saved, sender="gateway.ExternalAgent", dispatch_uid="gateway.wakeups"
        )
        # ... and its open sessions end, their pending calls cancelled: none is approved.
        post_save.connect(
            tasks.on_agent_saved, sender="gateway.ExternalAgent", dispatch_uid="gateway.sessions"
        )
        if sessions.deactivated_hold not in APPROVAL_HOLDS:
            APPROVAL_HOLDS.append(sessions.deactivated_hold)
