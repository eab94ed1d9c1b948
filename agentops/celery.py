import os

from celery import Celery
from celery.signals import (
    beat_init,
    celeryd_after_setup,
    celeryd_init,
    setup_logging,
    worker_init,
)
from kombu.utils.objects import cached_property

from agentops import celery_output, start_checks

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")


class AgentopsCelery(Celery):
    @cached_property
    def Beat(self) -> type:
        """`celery beat`, quiet with LOG_FORMAT=json (agentops/celery_output.py)."""
        return self.subclass_with_self(celery_output.QuietBeat)


app = AgentopsCelery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def refuse_unsound_configuration(**kwargs) -> None:
    """The system checks `manage.py check` runs, before the worker consumes anything: a
    worker started without them must not execute an agent whose gate rules gate nothing
    (agentops/start_checks.py). Raises SystemExit, which Celery's dispatcher lets through."""
    start_checks.refuse_unsound("the worker")


@worker_init.connect
def preload_model_sdk(**kwargs) -> None:
    """Import the Anthropic SDK once at worker start. Imported lazily (the web process never
    needs it), it was imported by the first burst of runs' threads all at once: 20 ms of CPU
    per call and +150 MB of memory in the first round of bench/model_latency.py."""
    import agentkit.llm.anthropic  # noqa: F401


# With LOG_FORMAT=json the worker's and beat's banners and sayings are log records too.
celeryd_init.connect(celery_output.worker_is_quiet, weak=False)
celeryd_after_setup.connect(celery_output.worker_banner, weak=False)
beat_init.connect(celery_output.beat_banner, weak=False)


@setup_logging.connect
def keep_django_logging(**kwargs) -> None:
    """A receiver here tells Celery not to configure logging itself: the worker and beat keep
    the settings' LOGGING (one JSON object per line with LOG_FORMAT=json), instead of
    Celery's own plain-text handler on the root logger."""
