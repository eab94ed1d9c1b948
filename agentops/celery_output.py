"""What `celery worker` and `celery beat` print besides their log records, as log records
when LOG_FORMAT=json, so every line of their output is JSON. Connected by agentops/celery.py;
nothing here acts with LOG_FORMAT=text. Why and how (Celery's prints, safe_say, the test that
pins it): docs/design/modules.md.
"""

import logging
from typing import Any

from celery.apps.beat import Beat

log = logging.getLogger("agentops.celery")


def _json() -> bool:
    from django.conf import settings

    return settings.LOG_FORMAT == "json"


def worker_is_quiet(instance: Any = None, **kwargs: Any) -> None:
    """celeryd_init: the first thing a worker program does, before its root-user warning and
    its banner."""
    if not _json():
        return
    import django
    from celery.apps import worker

    # Logging as the settings say (and warnings through it) before Celery's first warning;
    # Celery's Django fix-up would do it a moment later, and does it again harmlessly.
    django.setup()
    instance.quiet = True
    worker.safe_say = _said  # type: ignore[attr-defined]


def _said(msg: str, f: Any = None) -> None:
    log.info("%s", msg.strip())


def worker_banner(sender: str = "", instance: Any = None, **kwargs: Any) -> None:
    """celeryd_after_setup: the banner's facts (the queues as -Q left them) as one record;
    from now on what code prints is a record too."""
    if _json() and instance is not None:
        log.info("celery worker %s starting\n%s", sender, instance.startup_info(artlines=False))
        prints_as_records(instance.app)


def beat_banner(sender: Any = None, **kwargs: Any) -> None:
    """beat_init: what beat's banner says, as one record; from now on what code prints is a
    record too."""
    if _json() and sender is not None:
        scheduler = sender.scheduler
        log.info(
            "celery beat starting: scheduler %s.%s, max interval %ss",
            type(scheduler).__module__,
            type(scheduler).__name__,
            sender.max_interval,
        )
        prints_as_records(sender.app)


def prints_as_records(app: Any) -> None:
    """sys.stdout and sys.stderr as records of `celery.redirected` (a tool's print()), as
    Celery does when it sets logging up itself, which it does not here (agentops/celery.py
    keeps the settings' LOGGING): worker_redirect_stdouts and its level still decide. The
    handlers keep the streams they were made with, so nothing loops."""
    if app.conf.worker_redirect_stdouts:
        app.log.redirect_stdouts(app.conf.worker_redirect_stdouts_level)


class QuietBeat(Beat):
    """`celery beat` (celery.apps.beat.Beat) that prints no banner when JSON is asked for:
    beat sends no signal before its first print, so quiet is chosen as it is made."""

    def __init__(self, **kwargs: Any):
        kwargs["quiet"] = kwargs.get("quiet") or _json()
        super().__init__(**kwargs)
