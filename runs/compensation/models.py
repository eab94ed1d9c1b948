"""Compensation after a partial failure: undoing the committed effects of a run that failed or
was cancelled, with the compensating call each tool declares (agentkit.tools.Compensate).
Why and how: docs/design/modules.md."""

import logging
from datetime import timedelta
from typing import NoReturn

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentkit.agents import CATALOGUE, get_agent
from agentkit.tools import ToolArgsError, get_tool

from .. import engine, queue
from ..engine.compensating import compensation_key
from ..models import Compensation, Run, SideEffect, Step
from .effects import Effect, effects, why_not_offered

log = logging.getLogger("agentops.compensation")

REQUESTED = "compensation_requested"  # the origin's step: who asked, for which effects
SETTLED = "compensation_settled"  # the origin's step: what one compensation came to
REFUSED = "compensation_refused"  # the origin's step: an automatic request that could not be
# The sweep leaves a just-ended run to its own message for this long, and gives up on one
# whose message was lost longer ago than the lookback (as chains.py).
SWEEP_AFTER = timedelta(seconds=60)
SWEEP_LOOKBACK = timedelta(days=1)
SWEEP_BATCH = 200


class CompensationError(Exception):
    """Why the request cannot be served, in words for the operator, with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def request(
    run: Run, effect_ids: list[int] | None = None, *, by=None, automatic: bool = False
) -> list[Compensation]:
    """Ask for the compensation of these committed effects of `run` (None: every one that
    may be), in one compensation run; the Compensation rows made. CompensationError (409:
    not now, not compensable, asked already; 404: no such effect; 422: its compensation's
    arguments cannot be made) with nothing written."""
    with transaction.atomic():
        origin = Run.locked(run.pk)
        why = why_not_offered(origin)
        if why:
            raise CompensationError(409, why)
        agent = get_agent(origin.agent)
        if agent is None:
            raise CompensationError(409, f"agent {origin.agent!r} is not in the catalogue")
        chosen = _chosen(origin, effect_ids)
        who = _who(by, automatic) or "an operator"
        items = [_call(origin, effect, index, who) for index, effect in enumerate(chosen)]
        child = engine.launch(
            agent=agent,
            input=origin.input,
            trigger=Run.Trigger.COMPENSATION,
            launched_by=by if by is not None else origin.launched_by,
            parent=origin,
            provider=origin.provider,
            source=f"run {origin.pk}",
            compensating=items,
        )
        now = timezone.now()
        made = Compensation.objects.bulk_create(
            Compensation(
                effect=effect,
                run=origin,
                compensating_run=child,
                tool=item["name"],
                args=item["args"],
                key=item["key"],
                attempt=item["attempt"],
                requested_by=by,
                automatic=automatic,
                created_at=now,
            )
            for effect, item in zip(chosen, items, strict=True)
        )
        origin.append_step(
            Step.Kind.OPERATOR,
            {
                "event": REQUESTED,
                "by": _who(by, automatic),
                "automatic": automatic,
                "compensation_run": str(child.pk),
                "effects": [
                    {
                        "effect": effect.pk,
                        "tool": effect.tool,
                        "compensate": item["name"],
                        "args": item["args"],
                    }
                    for effect, item in zip(chosen, items, strict=True)
                ],
            },
        )
    return made


def _who(by, automatic: bool) -> str | None:
    if automatic:
        return "the agent (compensate_on_failure)"
    return by.get_username() if by is not None else None


def _chosen(run: Run, effect_ids: list[int] | None) -> list[SideEffect]:
    """The effects to compensate, newest first (undone in the reverse order they were done)."""
    shown = effects(run)
    if effect_ids is None:
        chosen = [e for e in shown if e.requestable]
        if not chosen:
            raise CompensationError(409, "nothing to compensate: no committed effect waits for it")
    else:
        by_id = {e.effect.pk: e for e in shown}
        chosen = []
        for effect_id in dict.fromkeys(effect_ids):
            found = by_id.get(effect_id)
            if found is None:
                _not_committed(run, effect_id)
            _check_requestable(found)
            chosen.append(found)
    return sorted((e.effect for e in chosen), key=lambda e: e.pk, reverse=True)


def _not_committed(run: Run, effect_id: int) -> NoReturn:
    other = run.side_effects.filter(pk=effect_id).values_list("status", flat=True).first()
    if other is None:
        raise CompensationError(404, f"run {run.pk} has no effect #{effect_id}")
    raise CompensationError(
        409, f"effect #{effect_id} is {other}: only a committed effect can be compensated"
    )


def _check_requestable(found: Effect) -> None:
    effect = found.effect
    if not found.compensate_tool:
        raise CompensationError(409, f"effect #{effect.pk}: {effect.tool} declares no compensation")
    latest = found.latest
    if latest is not None and latest.status == Compensation.Status.PENDING:
        who = latest.requested_by.get_username() if latest.requested_by else "the agent"
        raise CompensationError(
            409,
            f"effect #{effect.pk}: its compensation was asked already by {who} at "
            f"{latest.created_at:%Y-%m-%d %H:%M:%S} UTC and is under way",
        )
    if latest is not None and latest.status == Compensation.Status.COMPENSATED:
        raise CompensationError(
            409,
            f"effect #{effect.pk} is compensated already "
            f"({latest.settled_at or latest.created_at:%Y-%m-%d %H:%M:%S} UTC)",
        )


def _call(origin: Run, effect: SideEffect, index: int, who: str) -> dict:
    """The compensating call of `effect` as the compensation run's pending call."""
    tool = get_tool(effect.tool)
    declared = tool.compensate if tool else None
    target = get_tool(declared.tool) if declared else None
    if declared is None or target is None:
        raise CompensationError(409, f"effect #{effect.pk}: {effect.tool} has no compensation now")
    result = (effect.result or {}).get("result")
    try:
        args = target.validate(declared.arguments(effect.args, result))
    except ToolArgsError as exc:
        raise CompensationError(422, f"effect #{effect.pk}: {exc}") from None
    except Exception as exc:  # the mapping is code over a recorded result: any error is its own
        raise CompensationError(
            422,
            f"effect #{effect.pk}: the arguments of {target.name} cannot be made from it "
            f"({type(exc).__name__}: {exc})",
        ) from None
    attempt = effect.compensations.count() + 1
    return {
        "id": f"compensation-{effect.pk}-{attempt}",
        "name": target.name,
        "input": args,
        "llm_seq": 1,
        "index": index,
        "args": args,
        "error": None,
        "approval": None,
        # Asked of the gate policy before it runs, as any proposed call is.
        "regate": True,
        "key": compensation_key(effect.key, attempt),
        "effect": effect.pk,
        "attempt": attempt,
        "context": (
            f"Compensation asked by {who}: it undoes effect #{effect.pk} of run {origin.pk} "
            f"({origin.status}), {tool.effect(effect.args)}."
        ),
    }


# --- settling -----------------------------------------------------------------------------------
def settle(compensating_run_id) -> list[Compensation]:
    """Record what the compensations of an ended compensation run came to, on their rows and
    as steps of the origin run; the rows settled. Idempotent: a settled row is left alone."""
    with transaction.atomic():
        child = Run.objects.filter(pk=compensating_run_id).first()
        if child is None or not child.is_terminal or child.parent_id is None:
            return []
        origin = Run.locked(child.parent_id)  # the origin first, as `request` locks it
        comps = list(
            Compensation.objects.select_for_update()
            .filter(compensating_run=child, status=Compensation.Status.PENDING)
            .order_by("id")
        )
        done = {e.key: e for e in SideEffect.objects.filter(key__in=[c.key for c in comps])}
        now = timezone.now()
        for comp in comps:
            _settle_one(comp, done.get(comp.key), child, now)
            origin.append_step(
                Step.Kind.OPERATOR,
                {
                    "event": SETTLED,
                    "effect": comp.effect_id,
                    "compensate": comp.tool,
                    "outcome": comp.status,
                    "detail": comp.detail,
                    "compensation_run": str(child.pk),
                },
            )
    return comps


def _settle_one(comp: Compensation, effect: SideEffect | None, child: Run, now) -> None:
    if effect is not None and effect.status == SideEffect.Status.COMMITTED:
        comp.status = Compensation.Status.COMPENSATED
        comp.result = (effect.result or {}).get("result")
        comp.detail = "made"
    else:
        comp.status = Compensation.Status.FAILED
        comp.detail = _why_not_made(comp, effect, child)[:1000]
    comp.settled_at = now
    comp.save(update_fields=["status", "result", "detail", "settled_at"])


def _why_not_made(comp: Compensation, effect: SideEffect | None, child: Run) -> str:
    """The compensating call's own error (a refusal, a rejection, an expiry), else why its
    run ended (cancelled before the call)."""
    step = (
        child.steps.filter(kind=Step.Kind.TOOL, data__tool_use_id=_call_id(comp))
        .order_by("-seq")
        .values_list("data", flat=True)
        .first()
    )
    if step and step.get("error"):
        return step["error"]
    if effect is not None:
        return f"its outcome is {effect.status}"
    return f"not made: the compensation run {child.status} ({child.status_detail})"


def _call_id(comp: Compensation) -> str:
    return f"compensation-{comp.effect_id}-{comp.attempt}"


# --- wiring: when a run ends ------------------------------------------------------------------
def on_step_appended(sender, step: Step, **kwargs) -> None:
    """Once committed: a compensation run's end settles its compensations; a failed or
    cancelled run of an agent that compensates on failure requests its compensations."""
    data = step.data
    if step.kind != Step.Kind.STATUS or data.get("event") not in ("terminated", "cancelled"):
        return
    run = step.run
    run_id = step.run_id
    if run.trigger == Run.Trigger.COMPENSATION:
        transaction.on_commit(lambda: queue.send_compensation(queue.SETTLE_TASK, run_id))
    elif (
        data.get("to") in (Run.Status.FAILED, Run.Status.CANCELLED)
        and run.agent_config.get("compensate_on_failure")
        and run.trigger != Run.Trigger.REPLAY
    ):
        transaction.on_commit(lambda: queue.send_compensation(queue.AUTO_TASK, run_id))


def compensate_automatically(run_id) -> list[Compensation]:
    """The request an agent declared (compensate_on_failure) for its failed or cancelled run;
    when nothing can be requested, a step says why (and the sweep does not ask again)."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not run.agent_config.get("compensate_on_failure"):
        return []
    if Compensation.objects.filter(run=run, automatic=True).exists():
        return []  # requested already (a duplicate message, the sweep)
    if not run.side_effects.filter(status=SideEffect.Status.COMMITTED).exists():
        return []  # it changed nothing: nothing to undo, nothing to say
    try:
        return request(run, by=None, automatic=True)
    except CompensationError as exc:
        with transaction.atomic():
            origin = Run.locked(run.pk)
            if Compensation.objects.filter(run=origin, automatic=True).exists():
                return []  # a twin task asked meanwhile: that is not a refusal
            if not origin.steps.filter(kind=Step.Kind.OPERATOR, data__event=REFUSED).exists():
                origin.append_step(
                    Step.Kind.OPERATOR,
                    {"event": REFUSED, "by": _who(None, True), "detail": exc.message},
                )
        return []


def sweep(now=None) -> int:
    """Send again what a lost message left undone: ended compensation runs whose compensations
    are not settled, and recently failed or cancelled runs of agents that compensate on
    failure with nothing requested or refused yet."""
    now = now or timezone.now()
    ended = list(
        Compensation.objects.filter(
            status=Compensation.Status.PENDING,
            compensating_run__status__in=Run.TERMINAL_STATUSES,
            compensating_run__finished_at__lt=now - SWEEP_AFTER,
        )
        .values_list("compensating_run_id", flat=True)
        .distinct()[:SWEEP_BATCH]
    )
    for run_id in ended:
        queue.send_compensation(queue.SETTLE_TASK, run_id)
    slugs = [slug for slug, agent in CATALOGUE.items() if agent.compensate_on_failure]
    unasked: list = []
    if slugs:
        handled = Step.objects.filter(
            run=OuterRef("pk"), kind=Step.Kind.OPERATOR, data__event__in=[REQUESTED, REFUSED]
        )
        committed = SideEffect.objects.filter(run=OuterRef("pk"), status="committed")
        unasked = list(
            Run.objects.filter(
                status__in=[Run.Status.FAILED, Run.Status.CANCELLED],
                agent__in=slugs,
                finished_at__gte=now - SWEEP_LOOKBACK,
                finished_at__lt=now - SWEEP_AFTER,
                agent_config__has_key="compensate_on_failure",
            )
            .exclude(trigger__in=[Run.Trigger.REPLAY, Run.Trigger.COMPENSATION])
            .filter(Exists(committed))
            .exclude(Exists(handled))
            .values_list("pk", flat=True)[:SWEEP_BATCH]
        )
        for run_id in unasked:
            queue.send_compensation(queue.AUTO_TASK, run_id)
    if ended or unasked:
        log.info("sent %d settlement(s) and %d request(s) again", len(ended), len(unasked))
    return len(ended) + len(unasked)
