"""Chained runs: the follow-ups an agent declares (Agent.follow_ups), launched once a run of
it has succeeded.
Why and how: docs/design/modules.md."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentkit.agents import CATALOGUE, RunResult, get_agent, json_type_errors

from . import engine, queue
from .models import Run, Step, canonical_json

log = logging.getLogger("agentops.chains")

FOLLOW_UP = "follow_up"  # the event of a parent's step that records one follow-up
# The sweep leaves a just-succeeded run to its own message for this long ...
SWEEP_AFTER = timedelta(seconds=60)
# ... and gives up on one whose message was lost longer ago than this: launching a day-old
# chain by surprise would do more harm than a visible gap (the parent's page shows it).
SWEEP_LOOKBACK = timedelta(days=1)
SWEEP_BATCH = 500
# A rejected input is kept in the step, to show what the mapping made, up to this size.
SHOWN_INPUT_CHARS = 4000


def on_step_appended(sender, step: Step, **kwargs) -> None:
    """Once a run's success is committed, send its follow-ups to a worker (if it has any)."""
    data = step.data
    if (
        step.kind == Step.Kind.STATUS
        and data.get("event") == "terminated"
        and data.get("to") == Run.Status.SUCCEEDED
        and step.run.agent_config.get("follow_ups")
        and step.run.trigger not in (Run.Trigger.REPLAY, Run.Trigger.COMPENSATION)
    ):
        run_id = step.run_id
        transaction.on_commit(lambda: queue.send_follow_ups(run_id))


def launch_follow_ups(run_id) -> list[Step]:
    """Launch the follow-ups of a succeeded run not handled yet; the steps that say so.

    Idempotent: the parent's row lock orders concurrent calls, and a follow-up with a step
    is not looked at again. A run that did not succeed launches nothing.
    """
    with transaction.atomic():
        parent = Run.objects.select_for_update().filter(pk=run_id).first()
        # A replay re-enacts a recorded run without side effects: launching is one.
        if (
            parent is None
            or parent.status != Run.Status.SUCCEEDED
            # A compensation run undoes; it does not go on to what the agent does next.
            or parent.trigger in (Run.Trigger.REPLAY, Run.Trigger.COMPENSATION)
        ):
            return []
        declared = [f["name"] for f in parent.agent_config.get("follow_ups", [])]
        if not declared:
            return []
        handled = {
            data.get("follow_up")
            for data in parent.steps.filter(
                kind=Step.Kind.STATUS, data__event=FOLLOW_UP
            ).values_list("data", flat=True)
        }
        return [
            parent.append_step(Step.Kind.STATUS, _follow_up(parent, key))
            for key in declared
            if key not in handled
        ]


def _follow_up(parent: Run, key: str) -> dict:
    """Launch one follow-up of `parent` (inside its transaction), or not; the step's data."""
    agent = get_agent(parent.agent)
    follow_up = agent.follow_up(key) if agent else None
    step = {
        "event": FOLLOW_UP,
        "from": Run.Status.SUCCEEDED,
        "to": Run.Status.SUCCEEDED,
        "follow_up": key,
        "agent": follow_up.agent if follow_up else "",
    }
    if follow_up is None:
        return _failed(step, f"agent {parent.agent} no longer declares the follow-up {key!r}")
    target = get_agent(follow_up.agent)
    if target is None:
        return _failed(step, f"agent {follow_up.agent} is not in the catalogue")
    result = RunResult(
        run_id=str(parent.pk), agent=parent.agent, input=parent.input, output=parent.output
    )
    try:
        mapped = follow_up.input(result)
    except Exception as exc:  # the mapping is code over model output: any error is its own
        return _failed(step, f"the mapping raised {type(exc).__name__}: {exc}")
    if mapped is None:
        return {**step, "outcome": "skipped", "detail": "the mapping gave no input"}
    if not isinstance(mapped, dict):
        return _failed(step, f"the mapping gave a {type(mapped).__name__}, not an object")
    errors = json_type_errors(target.input_schema(), mapped)
    cleaned = None
    if not errors:
        cleaned, errors = target.validate_input(mapped)
    if errors:
        return _failed(
            step, f"the mapped input is not valid for {target.slug}", errors=errors, input=mapped
        )
    size = len(canonical_json(cleaned).encode())
    if size > settings.AGENTOPS["MAX_INPUT_BYTES"]:
        return _failed(
            step,
            f"the mapped input is {size} bytes, more than the "
            f"{settings.AGENTOPS['MAX_INPUT_BYTES']} any launch may have",
        )
    child = engine.launch(
        agent=target,
        input=cleaned,
        trigger=Run.Trigger.CHAINED,
        launched_by=parent.launched_by,
        parent=parent,
        provider=parent.provider,
        source=f"run {parent.pk}",
    )
    return {**step, "outcome": "launched", "child": str(child.pk)}


def _failed(step: dict, detail: str, *, errors: dict | None = None, input=None) -> dict:
    failed = {**step, "outcome": "failed", "detail": detail[:2000]}
    if errors:
        failed["errors"] = errors
    if input is not None:
        try:
            shown = canonical_json(input)
        except (TypeError, ValueError):  # not JSON: the errors say enough
            shown = ""
        if shown and len(shown) <= SHOWN_INPUT_CHARS:
            failed["input"] = input
    return failed


def sweep(now=None) -> int:
    """Send again the follow-ups of recently succeeded runs that none were recorded for."""
    slugs = [slug for slug, agent in CATALOGUE.items() if agent.follow_ups]
    if not slugs:
        return 0
    now = now or timezone.now()
    recorded = Step.objects.filter(run=OuterRef("pk"), kind=Step.Kind.STATUS, data__event=FOLLOW_UP)
    ids = list(
        Run.objects.filter(
            status=Run.Status.SUCCEEDED,
            agent__in=slugs,
            finished_at__gte=now - SWEEP_LOOKBACK,
            finished_at__lt=now - SWEEP_AFTER,
            agent_config__has_key="follow_ups",
        )
        .exclude(trigger__in=[Run.Trigger.REPLAY, Run.Trigger.COMPENSATION])
        .exclude(Exists(recorded))
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for run_id in ids:
        queue.send_follow_ups(run_id)
    if ids:
        log.info("sent the follow-ups of %d run(s) again", len(ids))
    return len(ids)
