"""The gateway's periodic task (celery beat; the embedded sweeps call it too)."""

import logging

from celery import shared_task

from runs.tasks import sweep_all

from . import sessions

log = logging.getLogger("agentops.gateway")


@shared_task
def sweep_sessions() -> int:
    """End the sessions of agents switched off without a save, and the idle ones."""
    return sweep_all(sweep_sessions_once)


def sweep_sessions_once() -> int:
    ended = sessions.end_sessions_of_inactive() + sessions.end_idle()
    if ended:
        log.info("ended %d external session(s): idle, or their agent deactivated", ended)
    return ended
