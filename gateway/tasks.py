"""The gateway's sweep (celery beat; the embedded sweeps call it too) and what ends sessions
nobody may use any more: those of a deactivated agent, and the idle ones."""

import logging

from celery import shared_task

from runs.tasks import sweep_all

from . import callbacks, sessions
from .models import ExternalAgent

log = logging.getLogger("agentops.gateway")


@shared_task
def sweep_sessions() -> int:
    """End the sessions of agents switched off without a save, and the idle ones."""
    return sweep_all(sweep_sessions_once)


def sweep_sessions_once() -> int:
    ended = end_sessions_of_inactive() + sessions.end_idle()
    if ended:
        log.info("ended %d external session(s): idle, or their agent deactivated", ended)
    return ended


def end_sessions_of_inactive(slug: str | None = None) -> int:
    """sessions.end_sessions_of_inactive, and the cancelled calls' callbacks (status
    "cancelled", the reason): an agent that does not long-poll learns it there. How many
    sessions ended."""
    ended = sessions.end_sessions_of_inactive(slug)
    for cancelled in ended:
        callbacks.queue_on_commit(cancelled)
    return len(ended)


def on_agent_saved(sender, instance: ExternalAgent, created: bool = False, **kwargs) -> None:
    """post_save of an ExternalAgent: saved inactive, its open sessions end now."""
    if not created and not instance.active:
        end_sessions_of_inactive(instance.slug)
